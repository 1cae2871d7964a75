"""Logs to the samples a fit uses: the positions, commands and currents of a run, filtered.

A log is a telemetry log (.mcap, ``hil run``/``hil control``/``hil emulate``) or the .npz
of ``hil sim``/``hil log export``; what is read of it: t (s), q (rad, the measured
positions), u (the command held over each tick, V or N m), i (A, where the drive has
currents) and the config that ran (its ``meta``).

Velocities and accelerations come from the positions by a zero-phase filter: a 4th-order
Butterworth low-pass at ``cutoff`` Hz run forward and backward (scipy.signal.filtfilt with
Gustafsson's initial conditions: no lag, the magnitude response squared), then central
differences (numpy.gradient) for qd and again for qdd. The commands and currents go
through the same filter, so both sides of the equations see the same band; so does the
sign of the filtered rate, the Coulomb friction's column (a step at each reversal that the
filter spreads over about 1 / cutoff, as it spreads the friction's step in the logged
commands: the filtered sign, not the sign of the filtered rate, is what the filtered
commands hold). EDGE seconds
at each end (at least 2.5 periods of the cut-off, the filter's transient), where the
filter and the differences are least accurate, are dropped, and the rest is decimated to
about two samples per period of the cut-off, so that the residuals of neighbouring rows are nearly
independent and the least-squares covariance sigma^2 (Y^T Y)^-1 is honest.

Logs of ``hil control`` over a real link (``regular``): a tick the loop skipped leaves
no row. Where the plant moved on over it (a rig), the rows are put on the grid of sim.dt
by their time, the missing tick's positions and currents interpolated and its command
the previous one (the drives hold it), and the rows within GAP_GUARD periods of the
cut-off of a missing one are left out of the fit. Where the plant stood still over it (a
SYNC-clocked emulator steps once per SYNC, and a skipped tick sends none: told by the
position's step across the gaps), the rows are consecutive steps of the plant and are
taken so. What u is comes from the link
(drivers.registry.command_unit): volts for a voltage-driven plant behind a link that
takes volts, joint torques (N m) behind torque-mode drives (CiA 402 cyclic synchronous
torque) or for a torque-driven plant. ``delay``: the ticks a command waits before it
acts, LINK_DELAY of the link (a CiA 402 drive applies a synchronous RPDO at the next
SYNC: 1), by which the commands are shifted before they are filtered.

The currents: ``hil sim`` and ``hil run`` record a row's current under the row's own
command (the motor's current as the plant computes it after the tick's command), while a
controller over a link (``hil control``) reads the drives' currents at the start of a
tick, before it writes that tick's command: the current of its row k was measured under
an earlier command (on packet serial the previous row's, or the one before where the
command reached the drive after its next step). ``current_lag`` (rows, 0 to
MAX_CURRENT_LAG) is read off the log: the lag whose command, with the rate, explains the
currents clearly best (``_current_lag``), and the motor's R and K_e are fitted against the
command of that earlier row (Samples.held).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hilrig.drivers.registry import command_unit
from hilrig.errors import ConfigError
from hilrig.schema import Config
from hilrig.settings.config import resolve
from hilrig.settings.live_changes import raw_config

CUTOFF = 4.0     # Hz: the position filter's cut-off for logs of other references
BAND_FACTOR = 4  # the cut-off for logs of an exciting trajectory: 4x its highest harmonic
ORDER = 4        # Butterworth order
EDGE = 0.25      # s dropped at each end of a log
GAP_GUARD = 1.0  # periods of the cut-off left out on each side of a missing row
# ticks a link's command waits before it acts: a CiA 402 drive applies a synchronous
# RPDO at the next SYNC; the other links' commands act at once
LINK_DELAY = {"canopen": 1}
MAX_CURRENT_LAG = 2   # rows: the most a log's currents may lag behind their command
LAG_MARGIN = 0.5      # a current lag is taken where it leaves less than this of lag 0's residual
# LAZY_SCIPY: scipy.signal is imported where a log is filtered, not with this module: its
# import cost `hil excite` (which reaches this module through identify.fit and filters
# nothing) 0.35 s of its 1.9 s of CPU


@dataclass
class Log:
    """One log: where it came from, the config that ran, t (s), q (rad), u (V or N m: ``unit``)
    and i (A; None when the log has no currents), on the grid of sim.dt; ``missing``: the
    rows the log did not have (filled in by ``regular``)."""

    path: str
    cfg: Config
    t: np.ndarray
    q: np.ndarray
    u: np.ndarray
    i: np.ndarray | None
    unit: str = "V"
    missing: np.ndarray | None = None
    current_lag: int = 0

    @property
    def delay(self) -> int:
        """Ticks a command waits before it acts (LINK_DELAY of the log's link)."""
        return LINK_DELAY.get(self.cfg.link.type, 0)

    @property
    def dt(self) -> float:
        """The sampling period, s (the median step of t)."""
        return float(np.median(np.diff(self.t)))


@dataclass
class Samples:
    """Filtered samples of one or more logs, decimated (module docstring): q, qd, qdd (rad,
    rad/s, rad/s^2), u (the command at the sample's instant, at_sample), held (the
    command of the row, as the current i of the row saw it), sign (sign(qd) filtered like
    the commands, in [-1, 1]: the Coulomb column), i (None without currents), N x n
    each; ``rates``: per log, its filtered rate at every row, the rows kept and the
    filter, for columns that are nonlinear in the rate (``hump``)."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    u: np.ndarray
    held: np.ndarray
    sign: np.ndarray
    i: np.ndarray | None
    rates: tuple = ()

    @staticmethod
    def stack(parts: list["Samples"]) -> "Samples":
        """The samples of several logs one after another."""
        cur = None if any(p.i is None for p in parts) else np.concatenate([p.i for p in parts])
        return Samples(*(np.concatenate([getattr(p, k) for p in parts])
                         for k in ("q", "qd", "qdd", "u", "held", "sign")), cur,
                       tuple(r for p in parts for r in p.rates))

    def hump(self, stribeck_velocity: float, joint: int,
             derivative: bool = False) -> np.ndarray:
        """The Stribeck hump's column of ``joint`` (N): exp(-(qd / v_s)^2) sign(qd) of the
        filtered rate at every row of the logs, filtered like the commands (as the
        Coulomb column ``sign``), at the samples' rows; v_s = ``stribeck_velocity``,
        rad/s. ``derivative``: its derivative with respect to v_s instead (s/rad; the
        filter is linear), 2 qd^2 / v_s^3 times the hump before the filter."""
        from scipy.signal import filtfilt      # (see LAZY_SCIPY)
        out = []
        for qd, keep, (b, a) in self.rates:
            v = qd[:, joint]
            ratio2 = (v / stribeck_velocity) ** 2
            column = np.exp(-ratio2) * np.sign(v)
            if derivative:
                column *= 2.0 * ratio2 / stribeck_velocity
            # padded edges, not Gustafsson's (ten times faster; the edges are dropped)
            out.append(filtfilt(b, a, column)[keep])
        return np.concatenate(out)


def read(path: str | Path) -> Log:
    """The log at ``path`` (.mcap or .npz). ConfigError (one line) when it holds no
    measured positions; telemetry.logfile.LogError when it is not a log."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        if not path.is_file():
            raise ConfigError(f"{path}: not found")
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        if "meta" not in arrays:
            raise ConfigError(f"{path}: no meta (the config that ran): not a hil sim .npz")
        meta = json.loads(str(arrays["meta"]))
    else:
        from hilrig.telemetry.logfile import read_log
        arrays, _, meta, _ = read_log(path)
    cfg = resolve(raw_config(meta))
    q = arrays.get("q")
    nact = len(cfg.controller.kp)
    if q is None or q.ndim != 2 or len(q) < 10 or "u" not in arrays or "t" not in arrays:
        rows = 0 if q is None else len(q)
        raise ConfigError(f"{path}: no measurements to identify from (needs t, q and u "
                          f"over at least 10 rows; the log has {rows} rows of q)")
    cur = arrays.get("i")
    if cur is not None and (cur.ndim != 2 or cfg.plant.drive == "torque"
                            or not np.any(cur)):
        cur = None
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    log = regular(Log(str(path), cfg, np.asarray(arrays["t"], float), q[:, :nact],
                      arrays["u"][:, :nact], cur, unit))
    log.current_lag = _current_lag(log)
    return log


def regular(log: Log) -> Log:
    """The log on the grid of its config's sim.dt (module docstring): each row at tick
    round((t - t_0) / dt); a tick without a row gets interpolated positions and currents
    and the command before it (held), and is marked in ``missing``; a repeated tick keeps
    its first row."""
    dt = float(log.cfg.sim.dt)
    tick = np.round((log.t - log.t[0]) / dt).astype(np.int64)
    first = np.concatenate([[True], np.diff(tick) > 0])
    tick, rows = tick[first], np.flatnonzero(first)
    if _plant_paused(log.q[rows], tick):
        tick = np.arange(len(rows))
    grid = np.arange(tick[-1] + 1)
    missing = np.ones(len(grid), bool)
    missing[tick] = False

    def fill(x):
        return np.stack([np.interp(grid, tick, x[rows, j]) for j in range(x.shape[1])], 1)
    held = log.u[rows][np.searchsorted(tick, grid, side="right") - 1]
    return Log(log.path, log.cfg, log.t[0] + grid * dt, fill(log.q), held,
               None if log.i is None else fill(log.i), log.unit, missing)


def _plant_paused(q: np.ndarray, tick: np.ndarray) -> bool:
    """Whether the plant stood still over the ticks missing from a log (a SYNC-clocked
    emulator steps once per SYNC, and a skipped tick sends none) rather than moving on in
    real time (a rig): the position's step across the gaps, against the mean step of the
    rows either side, is nearer 1 than the gaps' length in ticks."""
    step = np.diff(tick)
    gaps = np.flatnonzero(step[1:-1] > 1) + 1
    if len(gaps) == 0:
        return False
    moves = np.abs(np.diff(q, axis=0)).sum(axis=1)
    across = moves[gaps].sum()
    beside = 0.5 * (moves[gaps - 1] + moves[gaps + 1]).sum()
    return bool(across < 0.5 * (1.0 + step[gaps].mean()) * beside)


def _current_lag(log: Log) -> int:
    """The rows by which the log's currents lag behind the command they were measured
    under (module docstring), 0 without currents: for each lag from 0 to
    MAX_CURRENT_LAG, the linear least-squares fit of each joint's current to the command
    that many rows before and the rate (the simplified motor's i = (V - K_e r qd) / R;
    qd from the positions filtered at CUTOFF, as ``filtered_both`` does), on the rows on
    the grid (not the missing ones). The command's steps from tick to tick (the
    controller's reaction to the measurements) tell the lags apart: the lag with the
    smallest residual (sum of squares over the joints) is taken where it is below
    LAG_MARGIN times that of lag 0, else 0 (a smooth command, or sensor noise that the
    controller did not see, tells them apart too little: measured 0.99-1.05 against
    0.07-0.26 on packet serial)."""
    if log.i is None:
        return 0
    from scipy.signal import butter, filtfilt      # (see LAZY_SCIPY)
    dt = log.dt
    b, a = butter(ORDER, min(CUTOFF * 2.0 * dt, 0.5))
    qd = np.gradient(filtfilt(b, a, log.q, axis=0, method="gust"), dt, axis=0)
    seen = np.ones(len(log.t), bool) if log.missing is None else ~log.missing
    rows = np.arange(MAX_CURRENT_LAG, len(log.t))
    rows = rows[seen[rows]]
    residual = []
    for lag in range(MAX_CURRENT_LAG + 1):
        total = 0.0
        for j in range(log.i.shape[1]):
            A = np.stack([log.u[rows - lag, j], qd[rows, j]], axis=1)
            _, res, _, _ = np.linalg.lstsq(A, log.i[rows, j], rcond=None)
            total += float(res[0]) if len(res) else 0.0
        residual.append(total)
    best = int(np.argmin(residual))
    return best if residual[best] < LAG_MARGIN * residual[0] else 0


def default_cutoff(logs: list[Log]) -> float:
    """The cut-off when none is given, Hz: BAND_FACTOR times the highest harmonic (L f) of
    the logs' exciting trajectories (controller.reference = "fourier") where they all ran
    one, else CUTOFF. Low enough to keep the noise of qdd small (it grows as the cut-off
    to the power 2.5), high enough not to distort the motion (its band and the controller's
    response to it)."""
    bands = [log.cfg.controller.harmonics * log.cfg.controller.frequency for log in logs
             if log.cfg.controller.type in ("pd", "feedforward")
             and log.cfg.controller.reference == "fourier"]
    return BAND_FACTOR * max(bands) if len(bands) == len(logs) else CUTOFF


def filtered(log: Log, cutoff: float, dense: bool = False) -> Samples:
    """The log's samples, filtered, differentiated, trimmed and decimated (module
    docstring; ``dense``: every row, not decimated): one of ``filtered_both``'s."""
    return filtered_both(log, cutoff)[1 if dense else 0]


def filtered_both(log: Log, cutoff: float) -> tuple[Samples, Samples]:
    """The log's samples filtered, differentiated and trimmed (module docstring), each
    command acting ``log.delay`` ticks after its row: (decimated, every row), from one
    pass of the filter. ConfigError when the cut-off is not below half the sampling rate
    or the log is too short for the filter."""
    dt = log.dt
    nyquist = 0.5 / dt
    if not 0.0 < cutoff < nyquist:
        raise ConfigError(f"--cutoff {cutoff:g} Hz: must lie between 0 and half the sampling "
                          f"rate of {log.path} ({nyquist:g} Hz)")
    edge = int(round(max(EDGE, 2.5 / cutoff) / dt))
    if len(log.t) <= 2 * edge + 3 * (ORDER + 1):
        raise ConfigError(f"{log.path}: {len(log.t)} rows are too few to filter (needs more "
                          f"than {2 * EDGE:g} s)")
    from scipy.signal import butter, filtfilt      # (see LAZY_SCIPY)
    b, a = butter(ORDER, cutoff / nyquist)

    def smooth(x):
        return filtfilt(b, a, x, axis=0, method="gust")

    q = smooth(log.q)
    qd = np.gradient(q, dt, axis=0)
    qdd = np.gradient(qd, dt, axis=0)
    step = max(1, int(0.5 / (cutoff * dt)))
    every = np.arange(edge, len(q) - edge)
    if log.missing is not None and log.missing.any():
        guard = int(round(GAP_GUARD / (cutoff * dt)))
        near = np.convolve(log.missing, np.ones(2 * guard + 1), mode="same") > 0
        every = every[~near[every]]
    if len(every) == 0:
        raise ConfigError(f"{log.path}: no rows left to fit (too short, or too many "
                          "ticks missing)")
    u = later(log.u, log.delay)
    signals = (q, qd, qdd, smooth(at_sample(u)), smooth(later(log.u, log.current_lag)),
               smooth(np.sign(qd)), None if log.i is None else smooth(log.i))

    def samples(keep):
        return Samples(*(None if x is None else x[keep] for x in signals),
                       ((qd, keep, (b, a)),))
    decimated = every[(every - edge) % step == 0]
    return samples(decimated), samples(every)


def later(x: np.ndarray, rows: int) -> np.ndarray:
    """``x`` (rows along axis 0) ``rows`` rows later: row k holds x[k - rows] (the first
    rows the first value)."""
    return x if rows == 0 else np.concatenate([np.repeat(x[:1], rows, 0), x[:-rows]])


def at_sample(x: np.ndarray) -> np.ndarray:
    """A row's command acts from its tick to the next (the loops measure, then hold the new
    command over the step: rt.tick), so the command at the tick's instant, where q was
    measured, is the mean of the rows before and after it: (x[k-1] + x[k]) / 2. Without
    this half-step shift the fit would read the command half a tick late, which biases
    the damping by about I w^2 dt / 2."""
    out = x.copy()
    out[1:] = 0.5 * (x[1:] + x[:-1])
    return out
