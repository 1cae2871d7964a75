"""What a campaign measures of one run, and its pass/fail criteria.

``measure(arrays, cfg, settings)`` turns the arrays of an offline run (rt.sim.simulate,
or the .npz that ``hil sim`` writes) into the metrics of one campaign row; a campaign
and a single ``hil sim`` of the same scenario give the same arrays, hence the same
metrics, bit for bit. ``judge`` applies the criteria: each is an upper bound on one
metric, and a scenario passes when its run completed and every bound holds.

Joints are the actuated ones (the first nact coordinates: a serial arm's joints, the
3RRR's motor angles); the target is the config's ``controller.target`` (the final
target: for a moving reference, not the reference itself).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hilrig.plant import rrr3
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import MODEL_RRR3
from hilrig.schema import Config


@dataclass(frozen=True)
class Metric:
    """One metric: its unit, what it is, and what a run needs for it."""

    unit: str
    doc: str
    needs_target: bool = False      # controller.target
    model: str | None = None        # only for this plant model


METRICS = {
    "tracking_error": Metric(
        "rad", "max over t >= settle_time and the joints of |target - q|", needs_target=True),
    "healthy_tracking_error": Metric(
        "rad", "tracking_error over the joints that no jam hit (0 if every joint jammed)",
        needs_target=True),
    "final_error": Metric("rad", "max over the joints of |target - q| at the end",
                          needs_target=True),
    "reach_time": Metric(
        "s", "first time from which every joint stays within reach_tolerance of its target "
             "to the end (inf: not reached by the end); the criterion is 'reached by T'",
        needs_target=True),
    "peak_command": Metric("V or N m", "max over the run and the joints of |u|"),
    "peak_joint_rate": Metric("rad/s", "max over the run and the joints of |qd|"),
    "peak_residual": Metric("m^2", "max constraint residual (3RRR)", model="rrr3"),
    "det_phi_x_sign_changes": Metric(
        "", "sign changes of det Phi_x: passes through a type-2 singularity (3RRR)",
        model="rrr3"),
    "det_phi_theta_sign_changes": Metric(
        "", "sign changes of det Phi_theta: passes through a type-1 singularity (3RRR)",
        model="rrr3"),
}


@dataclass(frozen=True)
class MetricSettings:
    """The spec's [metrics] table: settle_time (s) from which tracking_error counts,
    reach_tolerance (rad) of reach_time."""

    settle_time: float = 0.0
    reach_tolerance: float = 0.01


def unavailable(name: str, cfg: Config) -> str | None:
    """Why metric ``name`` cannot be measured on runs of ``cfg`` (None: it can)."""
    metric = METRICS[name]
    if metric.needs_target and target_of(cfg) is None:
        return "needs controller.target (a pd or feedforward controller)"
    if metric.model is not None and cfg.plant.model != metric.model:
        return f"is measured on plant.model = {metric.model!r} only"
    return None


def target_of(cfg: Config) -> np.ndarray | None:
    """The config's joint targets (controller.target), or None if its controller has none."""
    target = getattr(cfg.controller, "target", None)
    return None if target is None else np.asarray(target, dtype=float)


# what measure_rows finds in a run's rows: entries of its output
F_TRACKING = 0         # max |target - q| over rows from the settle row, rad
F_HEALTHY = 1          # the same over the joints no jam hit, rad
F_FINAL = 2            # max |target - q| in the last row, rad
F_LAST_OUTSIDE = 3     # the last row where some |target - q| > tolerance (-1: none)
F_PEAK_COMMAND = 4     # max |u|
F_PEAK_RATE = 5        # max |qd| of the joints
F_RESIDUAL = 6         # 3RRR: max constraint residual, m^2
F_DET_X_CHANGES = 7    # 3RRR: sign changes of det Phi_x
F_DET_THETA_CHANGES = 8    # 3RRR: sign changes of det Phi_theta
F_SETTLE = 9           # the settle row: the first with t >= settle_time (rows: none)
F_REACH_TIME = 10      # t of the row after F_LAST_OUTSIDE (inf: none), s
FOUND = 11


def measure(arrays: dict, cfg: Config, settings: MetricSettings, plant=None) -> dict:
    """The metrics (METRICS; NaN where a metric does not apply) and ``q_end`` (the last
    row's coordinates) of one run's arrays. A run cut short by an invalid state is
    measured on the rows it has. The 3RRR's metrics come from the arrays' diagnostics
    (``residual``, ``det_phi_x``, ``det_phi_theta``: a full run, or its .npz) or, for a
    minimal run (rt.sim.simulate(minimal=True)), from its rows and the ``plant`` that ran
    (rrr3_metrics): the same values, bit for bit."""
    t, q, qd, u = arrays["t"], arrays["q"], arrays["qd"], arrays["u"]
    nact = u.shape[1]
    target = target_of(cfg)
    healthy = np.ones(nact)
    healthy[arrays["jam_events"][:, 0].astype(int) - 1] = 0.0
    rrr3_rows = "residual" not in arrays and plant is not None and plant.model == MODEL_RRR3
    found = np.zeros(FOUND)
    measure_rows(t, q, qd, u, np.zeros(nact) if target is None else target, healthy,
                 settings.settle_time - 1e-9 * cfg.sim.dt, settings.reach_tolerance,
                 plant.params if rrr3_rows else t, np.zeros((3, rrr3.NQ)), rrr3_rows, found)
    out = metrics_of(found, len(t), target is not None, rrr3_rows)
    if "residual" in arrays:
        out["peak_residual"] = float(arrays["residual"].max())
        out["det_phi_x_sign_changes"] = float(_sign_changes(arrays["det_phi_x"]))
        out["det_phi_theta_sign_changes"] = float(_sign_changes(arrays["det_phi_theta"]))
    out["q_end"] = [float(v) for v in q[-1]]
    return out


def metrics_of(found: np.ndarray, rows: int, has_target: bool, rrr3_rows: bool) -> dict:
    """The METRICS of what measure_rows found in ``rows`` rows (NaN where a metric does not
    apply: no controller.target, no row from the settle time on, not a 3RRR)."""
    out = dict.fromkeys(METRICS, np.nan)
    out["peak_command"], out["peak_joint_rate"] = found[F_PEAK_COMMAND], found[F_PEAK_RATE]
    if has_target:
        if found[F_SETTLE] < rows:      # else the run ended before settle_time: NaN
            out["tracking_error"], out["healthy_tracking_error"] = \
                found[F_TRACKING], found[F_HEALTHY]
        out["final_error"] = found[F_FINAL]
        out["reach_time"] = found[F_REACH_TIME]
    if rrr3_rows:
        out["peak_residual"] = found[F_RESIDUAL]
        out["det_phi_x_sign_changes"] = found[F_DET_X_CHANGES]
        out["det_phi_theta_sign_changes"] = found[F_DET_THETA_CHANGES]
    return {name: float(value) for name, value in out.items()}


@kernel
def measure_rows(t, q, qd, u, target, healthy, settle_time, tolerance, p, scratch, rrr3_rows,
                 found):
    """What the metrics need of a run's rows (t, and q, qd, u per row), into ``found``
    (F_* entries): joint_metrics from the first row at or after ``settle_time`` (s), and
    with ``rrr3_rows`` rrr3_metrics of the 3RRR of params ``p`` (``scratch`` 3 x 6)."""
    rows = t.shape[0]
    settle = 0
    while settle < rows and t[settle] < settle_time:   # np.searchsorted(t, settle_time)
        settle += 1
    joint_metrics(q, qd, u, target, healthy, settle, tolerance, found)
    found[F_SETTLE] = settle
    after = int(found[F_LAST_OUTSIDE]) + 1
    found[F_REACH_TIME] = t[after] if after < rows else np.inf
    if rrr3_rows:
        rrr3_metrics(p, q, scratch, found[F_RESIDUAL:F_DET_THETA_CHANGES + 1])


@kernel
def joint_metrics(q, qd, u, target, healthy, settle, tolerance, out):
    """One pass over the rows of a run (its first u.shape[1] coordinates are the joints):
    out[0] max |target - q| over rows >= settle, out[1] the same over the joints where
    ``healthy`` is nonzero (0 if none), out[2] max |target - q| in the last row, out[3]
    the last row where some |target - q| > tolerance (-1: none), out[4] max |u|,
    out[5] max |qd| of the joints. A NaN in a maximum makes it NaN."""
    rows, nact = u.shape[0], u.shape[1]
    tracking, healthy_error, last_outside, peak_u, peak_rate = 0.0, 0.0, -1.0, 0.0, 0.0
    worst = 0.0
    for k in range(rows):
        worst = 0.0
        settled = k >= settle
        for j in range(nact):
            error = abs(target[j] - q[k, j])
            worst = _larger(worst, error)
            if settled and healthy[j] != 0.0:
                healthy_error = _larger(healthy_error, error)
            peak_rate = _larger(peak_rate, abs(qd[k, j]))
            peak_u = _larger(peak_u, abs(u[k, j]))
        if not worst <= tolerance:
            last_outside = k
        if settled:
            tracking = _larger(tracking, worst)
    out[0], out[1], out[2], out[3], out[4], out[5] = \
        tracking, healthy_error, worst, last_outside, peak_u, peak_rate


@kernel
def rrr3_metrics(p, q, scratch, out):
    """The 3RRR's metrics of a run's rows q (one row of coordinates per step) in one pass,
    without storing the per-row diagnostics: out[0] the max constraint residual (m^2;
    rrr3.residual), out[1] and out[2] the sign changes of det Phi_x and det Phi_theta
    (rrr3.det_phi_x, det_phi_theta; all three from rrr3.row_diagnostics, which shares
    the legs' trigonometry), as measure gives them from the stored diagnostics
    (a NaN residual makes out[0] NaN; a NaN determinant counts as a change of sign
    either side, zeros are skipped). ``scratch`` is 3 x 6."""
    peak, changes_x, changes_theta = 0.0, 0.0, 0.0
    last_x, last_theta = 0.0, 0.0          # the last nonzero sign (0: none yet)
    for k in range(q.shape[0]):
        residual, det_theta, det_x = rrr3.row_diagnostics(p, q[k], scratch)
        peak = _larger(peak, residual)
        sign = _sign(det_x)
        if sign != 0.0:
            if last_x != 0.0 and sign != last_x:
                changes_x += 1.0
            last_x = sign
        sign = _sign(det_theta)
        if sign != 0.0:
            if last_theta != 0.0 and sign != last_theta:
                changes_theta += 1.0
            last_theta = sign
    out[0], out[1], out[2] = peak, changes_x, changes_theta


@kernel
def _sign(value):
    """np.sign of a float: 1, -1, 0, or NaN for a NaN."""
    if value > 0.0:
        return 1.0
    if value < 0.0:
        return -1.0
    return value if value != value else 0.0


@kernel
def _larger(a, b):
    """max(a, b); NaN if either is NaN (two comparisons, no branch)."""
    return a if (b <= a or a != a) else b


def _sign_changes(values: np.ndarray) -> int:
    signs = np.sign(values)
    signs = signs[signs != 0.0]
    return int(np.count_nonzero(signs[1:] != signs[:-1]))


def judge(metrics: dict, criteria: dict, completed: bool) -> tuple[bool, list[str]]:
    """Whether a run passes its criteria (metric name -> upper bound), and the names of
    those it fails (a NaN metric fails; a run that did not complete fails as 'completed')."""
    failed = [] if completed else ["completed"]
    failed += [name for name, bound in criteria.items() if not metrics[name] <= bound]
    return not failed, failed
