"""``hil sim --replay LOG``: run a real-time run's log again offline, its live parameter
changes included, and get the same trajectory.

The log holds the resolved config (``meta``) and one ``param`` event per live change
(live.params: the tick that took it and the new values). The replay builds the
params and command limits of every change the way the run did (the config with the
change applied, validated, the controller built again), then runs ``replay_ticks``,
which does per tick exactly what the fast path of rt.realtime.run_loop does (due jams,
a change due at this tick, the measurement, the law and the command limits, the plant
step with its correction in the tick), in chunks of ticks so that a long replay
reports its progress.

The trajectory equals the run's row for row when the run did the same arithmetic:
``hil run --fast``, or a paced run with ``loop.correction = "inline"`` and no ticks
skipped (``loop.overrun = "catch_up"``, or no overrun); the correction worker of a paced
run applies its corrections at ticks the timing decides. Live faults (``hil fault``)
are not replayed.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.limits import command_limits
from hilrig.drivers.link import Measurement
from hilrig.drivers.registry import command_unit
from hilrig.plant import stepping
from hilrig.plant.factory import actuated_joints, correction_id, jam_schedule, plant_from_config
from hilrig.plant.family import for_plant
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import H_NACT, H_NQ
from hilrig.plant.model import METHODS
from hilrig.plant.motor import currents
from hilrig.plant.stepping import advance, apply_schedule
from hilrig.settings.config import resolve
from hilrig.settings.live_changes import changed_config, controller_arrays, raw_config
from hilrig.rt.realtime import control_tick
from hilrig.rt.sim import SimRun, SimulationError, _named
from hilrig.telemetry.logfile import read_log

CHUNK_SECONDS = 0.25     # wall time between progress reports, about


@kernel
def replay_ticks(p, jams, law, params, state, schedule, x, h, k0, k1, n_steps, method,
                 correction, work, stages, limits, meas, u, held, change_ticks, change_params,
                 change_limits, rec_t, rec_x, rec_u, mech=None):
    """Ticks k0 .. k1 - 1 (rows k0 ..; plant time t = k h), stopping after row n_steps.

    Change c (params ``change_params[c]``, limits ``change_limits[c]``) is taken at the
    start of tick ``change_ticks[c]``, before the law runs, as the real-time loop takes a
    live change. Returns the next tick to run, or -(rows written) once the plant state
    became invalid or the law gave a non-finite command.
    """
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    tol = 1e-9 * h
    pos = meas[1:1 + nact]
    vel = meas[1 + nact:1 + 2 * nact]
    cur = meas[1 + 2 * nact:1 + 3 * nact]
    for k in range(k0, min(k1, n_steps + 1)):
        t = k * h
        apply_schedule(p, jams, schedule, t, x, tol)
        for c in range(change_ticks.shape[0]):
            if change_ticks[c] == k:
                for i in range(params.shape[0]):
                    params[i] = change_params[c, i]
                for r in range(2):
                    for j in range(nact):
                        limits[r, j] = change_limits[c, r, j]
        meas[0] = t
        for j in range(nact):
            pos[j] = x[j]
            vel[j] = x[nq + j]
        currents(p, x, held, cur)
        if not control_tick(law, params, state, limits, h, t, pos, vel, cur, u, held):
            return -k
        rec_t[k] = t
        for i in range(x.shape[0]):
            rec_x[k, i] = x[i]
        for j in range(nact):
            rec_u[k, j] = held[j]
        if k == n_steps:
            return k + 1
        if not advance(p, jams, t, x, held, h, method, correction, work, stages, mech):
            return -(k + 1)
    return min(k1, n_steps + 1)


def log_changes(cfg, events: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The live changes of a log as (ticks, params, limits) arrays, in the order taken."""
    changes = sorted((e for e in events if e["kind"] == "param"),
                     key=lambda e: (e["tick"], e.get("seq", 0)))
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    base = controller_from_config(cfg, unit).params
    limits0 = command_limits(cfg.safety, actuated_joints(cfg), cfg.emulator.drive_range(unit),
                             unit)
    ticks = np.zeros(len(changes), dtype=np.int64)
    params = np.zeros((len(changes), len(base)))
    limits = np.zeros((len(changes),) + limits0.shape)
    for c, event in enumerate(changes):
        cfg = changed_config(cfg, event["changes"])
        ticks[c] = event["tick"]
        params[c], limits[c] = controller_arrays(cfg, unit, len(base), limits0.shape[1])
    return ticks, params, limits


def replay_log(path, duration: float | None = None, progress=None) -> tuple[SimRun, object]:
    """Replay the run of the log at ``path`` (its config, its live changes) offline.

    ``duration`` (s) overrides the config's; ``progress(fraction, t)`` is called after
    each chunk of ticks. Returns (the run, its config); SimulationError on an invalid
    state or a non-finite command, with the rows up to then.
    """
    _, events, meta, _ = read_log(path)
    cfg = resolve(raw_config(meta))
    if duration is not None:
        cfg = cfg.replace(sim=dataclasses.replace(cfg.sim, duration=duration))
    h = cfg.sim.dt
    n_steps = int(round(cfg.sim.duration / h))
    ticks, change_params, change_limits = log_changes(cfg, events)
    plant = plant_from_config(cfg)
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    controller = controller_from_config(cfg, unit)
    schedule = jam_schedule(cfg)
    correction = correction_id(cfg)
    stepping.correct(plant.params, plant.x, correction, plant.work)
    nx, nact = len(plant.x), plant.nact
    limits = command_limits(cfg.safety, nact, cfg.emulator.drive_range(unit), unit)
    rec = {"t": np.zeros(n_steps + 1), "x": np.zeros((n_steps + 1, nx)),
           "u": np.zeros((n_steps + 1, nact)), "i": np.zeros((n_steps + 1, nact)),
           "diag": np.zeros((n_steps + 1, 3))}
    method = METHODS[cfg.sim.integrator]
    c = controller
    meas, u, held = Measurement(nact).buffer, np.zeros(nact), np.zeros(nact)
    out = SimRun()

    def ticks_from(k0, k1, arrays):
        p, s, x, jams, sched, lim, prm, mh, uu, hh, rt_, rx, ru = arrays
        return replay_ticks(p, jams, c.law, prm, s, sched, x, h, k0, k1, n_steps, method,
                            correction, plant.work, plant.stages, lim, mh, uu, hh, ticks,
                            change_params, change_limits, rt_, rx, ru, for_plant(plant, method))

    started = time.perf_counter()
    scratch = plant.copy()
    ticks_from(0, 1, (scratch.params, c.state.copy(), scratch.x, scratch.jams, schedule.copy(),
                      limits.copy(), c.params.copy(), meas.copy(), u.copy(), held.copy(),
                      np.zeros(n_steps + 1), np.zeros((n_steps + 1, nx)),
                      np.zeros((n_steps + 1, nact))))            # compile or load
    out.startup_seconds = time.perf_counter() - started
    live = (plant.params, c.state, plant.x, plant.jams, schedule, limits, c.params, meas, u,
            held, rec["t"], rec["x"], rec["u"])
    k, chunk, rows = 0, 1000, None
    started = time.perf_counter()
    while rows is None:
        chunk_started = time.perf_counter()
        nxt = ticks_from(k, k + chunk, live)
        if nxt < 0 or nxt > n_steps:
            rows = -nxt if nxt < 0 else n_steps + 1
        else:
            spent = time.perf_counter() - chunk_started
            chunk = int(min(max(chunk * CHUNK_SECONDS / max(spent, 1e-6), 100), 1e7))
            k = nxt
        if progress is not None:
            done = min(k if rows is None else rows, n_steps + 1)
            progress(done / (n_steps + 1), (done - 1) * h)
    out.stepping_seconds = time.perf_counter() - started
    stepping.diagnose_rows(plant.params, rec["x"][:rows], rec["u"][:rows], rec["i"][:rows],
                           rec["diag"][:rows], plant.work, for_plant(plant))
    out.arrays = _named(cfg, plant, rec, rows, schedule)
    out.arrays["param_ticks"] = ticks
    if rows < n_steps + 1:
        raise SimulationError(
            f"replay: the run stopped after t = {rec['t'][max(rows - 1, 0)]:.6f} s (invalid "
            f"plant state or non-finite command); {rows} rows kept", out.arrays)
    return out, cfg

