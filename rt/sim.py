"""Offline runs: ``hil sim`` runs a scenario as fast as it can and returns named arrays.

Output arrays (one row per step, starting at t = 0; see rt.lockstep for the row
convention): ``t`` (s), ``q``, ``qd``, ``u`` (V or N m), ``i`` (A, voltage-driven
plants), ``jam_events`` (rows [joint, t1, t2]), ``fault_events`` (plant.faults.started_rows),
``fault_detected`` (the law's first detected fault, controller.detection_slot: one row
[tick, t (s), code] or none); the model's diagnostics (PlantModel.diagnostics:
a chain's and a serial arm's ``energy`` (J) and ``com`` (x_C, y_C, m; NaN for a user's
chain), the 3RRR's ``residual`` (m^2), ``det_phi_theta``, ``det_phi_x``); and ``meta``,
the resolved config as a JSON string. A model with an offline run of its own
(PlantModel.offline) gives its own arrays.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import bad_command_reason, first_detection
from hilrig.controllers.limits import config_limits, outside_measured, violation
from hilrig.drivers.link import Measurement
from hilrig.drivers.registry import command_unit
from hilrig.plant import stepping
from hilrig.plant.factory import fault_schedule, initial_plant, plant_model
from hilrig.plant.family import for_plant
from hilrig.plant.faults import (
    C_JOINT,
    C_KIND,
    C_P0,
    C_STATE,
    C_T_ON,
    K_JAM,
    S_PENDING,
    started_rows,
)
from hilrig.plant.model import METHODS
from hilrig.plant.offline import SimRun, SimulationError
from hilrig.rt import accurate, lockstep
from hilrig.rt.tick import (
    Imperfections,
    LawArrays,
    Records,
    Stepping,
    TickIO,
    law_of,
    plant_arrays,
)
from hilrig.schema import Config
from hilrig.telemetry.recorder import to_json


@dataclass
class OfflineRun:
    """What an offline run of a config starts from: its plant in the initial state (the
    constraint correction applied), its controller, command limits (controllers.limits),
    fault table (plant.factory.fault_schedule), correction id, step h (s), number of steps,
    and for the fixed-step runs the integrator id, the measurement noise per row
    (measurement_noise) and the commands pending under the command latency (zeros):
    rt.lockstep.run's inputs."""

    plant: Any
    controller: Any
    limits: np.ndarray
    schedule: np.ndarray
    correction: int
    h: float
    n_steps: int
    method: int = -1
    noise: np.ndarray = None
    pending: np.ndarray = None


def offline_run(cfg: Config, plant_cfg: Config | None = None) -> OfflineRun:
    """The OfflineRun of a resolved config (not for a model with its own offline run);
    ``plant_cfg``: another config's plant under ``cfg``'s controller (hil identify
    --validate: a fitted plant under the controller of the log)."""
    sim = cfg.sim
    h = sim.dt
    n_steps = int(round(sim.duration / h))
    plant, correction = initial_plant(plant_cfg or cfg)   # (plant_cfg: cfg's but for q0, qd0)
    unit = command_unit(cfg.link.type, cfg.plant.drive)
    controller = controller_from_config(cfg, unit)
    limits = config_limits(cfg, plant.nact, unit)
    run = OfflineRun(plant, controller, limits, fault_schedule(cfg), correction, h, n_steps)
    if sim.integrator != "accurate":
        run.method = METHODS[sim.integrator]
        run.noise = measurement_noise(sim, n_steps, plant.nact)
        run.pending = np.zeros((int(round(sim.command_latency / h)), plant.nact))
    return run


def simulate(cfg: Config, minimal: bool = False, plant_cfg: Config | None = None) -> SimRun:
    """Run the resolved config offline. Raises SimulationError on an invalid state.
    ``plant_cfg``: the plant of this config instead of cfg's (offline_run).

    ``minimal``: the arrays t, q, qd, u and jam_events only (identical to a full run's),
    without the currents, the model's diagnostics and meta, and without the warm-up
    call that keeps compilation out of ``stepping_seconds`` (so the first run in a
    process counts the kernels' loading).
    """
    model = plant_model(cfg.plant.model)
    if model.offline is not None:     # e.g. a chain on the ground: its own integrators
        return model.offline(cfg)
    sim = cfg.sim
    run = offline_run(cfg, plant_cfg)
    plant, controller, schedule, h, n_steps = \
        run.plant, run.controller, run.schedule, run.h, run.n_steps
    nx, nact = len(plant.x), plant.nact
    rec = records(n_steps + 1, nx, nact, currents=not minimal)
    out = SimRun()
    if sim.integrator == "accurate":
        started = time.perf_counter()
        rows = accurate.run(plant, controller, schedule, h, n_steps, sim.rtol, sim.atol,
                            sim.accurate_method, rec, sim.control == "continuous",
                            run.limits[0])
        out.stepping_seconds = time.perf_counter() - started
        rec["seen"][:, :nact] = rec["x"][:, :nact]          # no sensor faults here
        rec["seen"][:, nact:] = rec["x"][:, plant.nq:plant.nq + nact]
    else:
        if not minimal:
            started = time.perf_counter()
            _warm_up(run)
            out.startup_seconds = time.perf_counter() - started
        c = controller
        meas = Measurement(nact)
        started = time.perf_counter()
        rows = _lockstep(run, plant, c.state, c.detection, run.schedule, n_steps,
                         Records(rec["t"], rec["x"], rec["u"], rec["seen"], rec["i"]), run.noise,
                         run.pending, meas)
        out.stepping_seconds = time.perf_counter() - started
    if not minimal:
        stepping.diagnose_rows(plant.params, rec["x"][:rows], rec["diag"][:rows], plant.work,
                               for_plant(plant))
    out.arrays = _named(cfg, plant, rec, rows, schedule, minimal)
    out.arrays["fault_detected"] = first_detection(controller.detection)
    out.plant = plant
    if rows < n_steps + 1:
        if sim.integrator != "accurate" and outside_measured(run.limits, meas.pos, meas.vel):
            raise SimulationError(violation(run.limits, meas.pos, meas.vel), out.arrays, plant)
        u = rec["u"][rows - 1]
        if sim.integrator != "accurate" and not np.all(np.isfinite(u)):   # the law's, not the plant's
            raise SimulationError(_bad_command(controller, meas, u, len(run.pending), h, rows),
                                  out.arrays, plant)
        raise SimulationError(invalid_state(rec["t"][rows - 1], rows), out.arrays, plant)
    return out


def _bad_command(controller, meas: Measurement, u: np.ndarray, delay: int, h: float,
                 rows: int) -> str:
    """What a fixed-step run that the law's non-finite command ``u`` ended reports: the law
    and the inputs of its last call (``meas``); under a command latency of ``delay`` steps
    u was computed that many steps (h s each) before that call."""
    reason = bad_command_reason(controller.name, meas.t, meas.pos, meas.vel, meas.current, u)
    if delay:
        reason += f" (its last call; under the command latency u was computed {delay * h:g} s earlier)"
    return f"{reason}; {rows} rows kept"


def invalid_state(t: float, rows: int) -> str:
    """What a run that ended on an invalid state reports: ``t`` its last valid row's time
    (s), ``rows`` the rows it kept."""
    return (f"plant state became invalid after t = {t:.6f} s (NaN or singular mass "
            f"matrix); {rows} rows kept")


def _warm_up(run: OfflineRun) -> None:
    """Compile (or load from cache) the run kernel on copies, so timing counts stepping only."""
    plant = run.plant
    nx, nact = len(plant.x), plant.nact
    _lockstep(run, plant.copy(), run.controller.state.copy(), run.controller.detection.copy(),
              run.schedule.copy(), 1,
              Records(np.zeros(2), np.zeros((2, nx)), np.zeros((2, nact)),
                      np.zeros((2, 2 * nact)), np.zeros((2, nact))),
              np.zeros((0, 2 * nact)), np.zeros((0, nact)))


def _lockstep(run: OfflineRun, plant, state: np.ndarray, detection: np.ndarray,
              schedule: np.ndarray, n_steps: int, rec: Records, noise: np.ndarray,
              pending: np.ndarray, meas: Measurement | None = None) -> int:
    """rt.lockstep.run of ``run``'s controller and limits over ``plant`` (a
    plant.model.Plant), the law's ``state``, its ``detection`` record and ``schedule``, for
    n_steps from t = 0 into ``rec``; returns the rows written. ``meas`` ends holding the
    law's last inputs."""
    c, nact = run.controller, plant.nact
    meas = Measurement(nact) if meas is None else meas
    return lockstep.run(law_of(c), plant_arrays(plant),
                        LawArrays(c.params, state, run.limits, detection),
                        TickIO(meas.buffer, np.zeros(nact), np.zeros(nact)),
                        Stepping(run.h, run.method, run.correction), schedule, 0.0, n_steps,
                        rec, Imperfections(noise, pending), for_plant(plant, run.method))


def measurement_noise(sim, n_steps: int, nact: int) -> np.ndarray:
    """The noise the law sees per row (rt.lockstep.run): n_steps + 1 rows of nact position
    noises (rad) then nact rate noises (rad/s), Gaussian with the config's standard
    deviations from the generator seeded by sim.noise_seed; no rows without noise."""
    if sim.position_noise == 0.0 and sim.velocity_noise == 0.0:
        return np.zeros((0, 2 * nact))
    noise = np.random.default_rng(sim.noise_seed).standard_normal((n_steps + 1, 2 * nact))
    noise[:, :nact] *= sim.position_noise
    noise[:, nact:] *= sim.velocity_noise
    return noise


def records(rows: int, nx: int, nact: int, currents: bool = True) -> dict:
    """The arrays an offline run fills (rt.tick.Records' t, x, u, seen and the currents i,
    which without ``currents`` has no rows and is not recorded; the diagnostics diag
    derived afterwards), ``rows`` rows each."""
    return {"t": np.zeros(rows), "x": np.zeros((rows, nx)), "u": np.zeros((rows, nact)),
            "seen": np.zeros((rows, 2 * nact)), "i": np.zeros((rows if currents else 0, nact)),
            "diag": np.zeros((rows, 3))}


def _named(cfg, plant, rec, rows, schedule, minimal=False) -> dict:
    """The named arrays of an offline run: t, q, qd, u, q_meas and qd_meas (what the law
    saw), i, the diagnostics, meta; jam_events (joint 1-based, t1, t2 s) and
    fault_events (plant.faults.started_rows) from the fault table ``schedule``."""
    nq, nact = plant.nq, plant.nact
    x = rec["x"][:rows]
    arrays = {"t": rec["t"][:rows], "q": x[:, :nq], "qd": x[:, nq:2 * nq],
              "u": rec["u"][:rows]}
    if not minimal:
        arrays["meta"] = np.array(to_json(cfg.to_dict()))
        arrays["q_meas"] = rec["seen"][:rows, :nact]
        arrays["qd_meas"] = rec["seen"][:rows, nact:]
    if not minimal and cfg.plant.drive != "torque":
        arrays["i"] = rec["i"][:rows]
    if not minimal:
        arrays.update(plant_model(cfg.plant.model).split_diagnostics(rec["diag"][:rows]))
    jams = schedule[(schedule[:, C_KIND] == K_JAM) & (schedule[:, C_STATE] != S_PENDING)]
    arrays["jam_events"] = np.column_stack(
        [jams[:, C_JOINT] + 1, jams[:, C_T_ON], jams[:, C_T_ON] + jams[:, C_P0]]) \
        if len(jams) else np.zeros((0, 3))
    arrays["fault_events"] = started_rows(schedule)
    return arrays
