"""``hil sim --replay LOG``: run a real-time run's log again offline, its live parameter
changes included, and get the same trajectory.

The log holds the resolved config (``meta``) and one ``param`` event per live change
(live.params: the tick that took it and the new values). The replay builds the
params and command limits of every change the way the run did (the config with the
change applied, validated, the controller built again), then runs ``replay_ticks``,
which runs per tick the tick of rt.realtime.run_loop's fast path (the jams and a
change due at this tick, then rt.tick.tick: the measurement, the law and the command
limits, the plant step with its correction in the tick), in chunks of ticks so that a long replay
reports its progress.

The trajectory equals the run's row for row when the run did the same arithmetic:
``hil run --fast``, or a paced run with ``loop.correction = "inline"`` and no ticks
skipped (``loop.overrun = "catch_up"``, or no overrun); the correction worker of a paced
run applies its corrections at ticks the timing decides. Live faults (``hil fault``) are
replayed from their events: each becomes a row of the fault table after the config's,
in the order the run took them, pending until its tick (plant.faults.event_row), which is
where and when the run's loop wrote it.
"""
from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import numpy as np
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import first_detection
from hilrig.controllers.limits import config_limits
from hilrig.drivers.link import Measurement
from hilrig.drivers.registry import command_unit
from hilrig.plant import stepping
from hilrig.plant.factory import actuated_joints, fault_schedule, initial_plant
from hilrig.plant.family import for_plant
from hilrig.plant.faults import add_row, event_row
from hilrig.jit.kernel import kernel
from hilrig.plant.model import METHODS
from hilrig.plant.stepping import apply_schedule
from hilrig.settings.config import resolve
from hilrig.settings.live_changes import changed_config, controller_arrays, raw_config
from hilrig.rt.tick import (
    T_BAD_COMMAND,
    T_OK,
    LawArrays,
    Records,
    Stepping,
    TickIO,
    law_of,
    plant_arrays,
    tick,
)
from hilrig.rt.sim import SimRun, SimulationError, _named, records
from hilrig.telemetry.logfile import read_log

CHUNK_SECONDS = 0.25     # wall time between progress reports, about


class Changes(NamedTuple):
    """A log's live changes in the order taken: change c at the start of tick ``ticks[c]``
    sets the law's params to ``params[c]`` and the command limits to ``limits[c]``."""
    ticks: np.ndarray
    params: np.ndarray
    limits: np.ndarray


@kernel
def replay_ticks(law, plant, ctrl, io, stepping, schedule, k0, k1, n_steps, changes, rec,
                 mech=None):
    """Ticks k0 .. k1 - 1 (rows k0 ..; plant time t = k h), stopping after row n_steps.

    Records (rt.tick): ``plant``, ``ctrl``, ``io`` (its ``u`` not used: tick k computes
    its command into ``rec.u[k]``), ``stepping``, ``rec`` (Records); ``changes``
    (Changes): each taken at the start of its tick, before the law runs, as the real-time
    loop takes a live change. Per tick: the jams due, the changes due, then rt.tick.tick,
    the tick every compiled loop runs. Returns the next tick to run, or -(rows written)
    once the plant state became invalid or the law gave a non-finite command.
    """
    h = stepping.h
    tol = 1e-9 * h
    params, limits = ctrl.params, ctrl.limits
    for k in range(k0, min(k1, n_steps + 1)):
        t = k * h
        apply_schedule(plant.p, plant.jams, schedule, t, plant.x, tol)
        for c in range(changes.ticks.shape[0]):
            if changes.ticks[c] == k:
                for i in range(params.shape[0]):
                    params[i] = changes.params[c, i]
                for r in range(limits.shape[0]):
                    for j in range(limits.shape[1]):
                        limits[r, j] = changes.limits[c, r, j]
        done = tick(law, plant, ctrl, TickIO(io.meas, rec.u[k], io.held), stepping, schedule,
                    t, k, k == n_steps, None, rec, None, None, None, 0, mech)
        if done == T_BAD_COMMAND:
            return -k
        if done != T_OK:
            return -(k + 1)
        if k == n_steps:
            return k + 1
    return min(k1, n_steps + 1)


def log_changes(cfg, events: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The live changes of a log as (ticks, params, limits) arrays, in the order taken."""
    changes = sorted((e for e in events if e["kind"] == "param"),
                     key=lambda e: (e["tick"], e.get("seq", 0)))
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    base = controller_from_config(cfg, unit).params
    limits0 = config_limits(cfg, actuated_joints(cfg), unit)
    ticks = np.zeros(len(changes), dtype=np.int64)
    params = np.zeros((len(changes), len(base)))
    limits = np.zeros((len(changes),) + limits0.shape)
    for c, event in enumerate(changes):
        cfg = changed_config(cfg, event["changes"])
        ticks[c] = event["tick"]
        params[c], limits[c] = controller_arrays(cfg, unit, len(base), limits0.shape[1])
    return ticks, params, limits


def replay_schedule(cfg, events: list) -> np.ndarray:
    """The run's fault table: the config's rows, then one per live fault of the log's
    ``events`` in the order the run took them (plant.faults.event_row)."""
    rows = [row for row in (event_row(e, cfg.sim.dt) for e in events) if row is not None]
    table = fault_schedule(cfg, len(rows))
    for row in rows:
        add_row(table, row)
    return table


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
    plant, correction = initial_plant(cfg)
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    controller = controller_from_config(cfg, unit)
    schedule = replay_schedule(cfg, events)
    nx, nact = len(plant.x), plant.nact
    limits = config_limits(cfg, nact, unit)
    rec = records(n_steps + 1, nx, nact)
    method = METHODS[cfg.sim.integrator]
    c = controller
    law, step = law_of(c), Stepping(h, method, correction)
    changes, mech = Changes(ticks, change_params, change_limits), for_plant(plant, method)
    out = SimRun()

    def ticks_from(k0, k1, arrays):
        return replay_ticks(law, *arrays[:3], step, arrays[3], k0, k1, n_steps, changes,
                            arrays[4], mech)

    def io() -> TickIO:
        return TickIO(Measurement(nact).buffer, np.zeros(nact), np.zeros(nact))

    started = time.perf_counter()
    ticks_from(0, 1, (plant_arrays(plant.copy()),                 # compile or load
                      LawArrays(c.params.copy(), c.state.copy(), limits.copy(),
                                c.detection.copy()), io(),
                      schedule.copy(), Records(np.zeros(n_steps + 1),
                                               np.zeros((n_steps + 1, nx)),
                                               np.zeros((n_steps + 1, nact)),
                                               np.zeros((n_steps + 1, 2 * nact)),
                                               np.zeros((n_steps + 1, nact)))))
    out.startup_seconds = time.perf_counter() - started
    live = (plant_arrays(plant), LawArrays(c.params, c.state, limits, c.detection), io(), schedule,
            Records(rec["t"], rec["x"], rec["u"], rec["seen"], rec["i"]))
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
    stepping.diagnose_rows(plant.params, rec["x"][:rows], rec["diag"][:rows], plant.work,
                           for_plant(plant))
    out.arrays = _named(cfg, plant, rec, rows, schedule)
    out.arrays["param_ticks"] = ticks
    out.arrays["fault_detected"] = first_detection(c.detection)
    if rows < n_steps + 1:
        raise SimulationError(
            f"replay: the run stopped after t = {rec['t'][max(rows - 1, 0)]:.6f} s (invalid "
            f"plant state, non-finite command or a joint outside its safety limits); {rows} "
            "rows kept", out.arrays)
    return out, cfg

