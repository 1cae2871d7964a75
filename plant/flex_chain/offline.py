"""``hil sim`` for the flexible chain on the ground (plant.flex_chain.model, its
PlantModel.offline): the contact integrators of plant.flex_chain.integrators instead of
the lockstep loop.

Arrays, besides those of every run (``t``, ``q``, ``qd``, ``u``, ``jam_events`` (none),
``meta``):

- ``points`` (rows, n + 1, 2): x, y (m) of every contact point O_1 .. O_{n+1};
- ``events`` (k, 3): rows [t (s), point (0-based), kind: 1 contact onset, 0 separation];
- ``contact_force`` (rows, n + 1, 2): friction F_T and normal force F_N (N) per point;
- ``energy`` (rows): mechanical energy T + V (J);
- ``work_contact`` (rows): cumulative work of the normal and friction forces (J);
- ``dissipated`` (rows): cumulative energy taken by structural and air damping (J),
  so that energy - energy[0] = work_contact - dissipated (+ the joint torques' work).

``sim.integrator = "accurate"``: rows every sim.dt from the event-located run;
``"rk4"``: one row per tick of sim.dt (RK4 substeps inside). The joint torques are the
constant ``input.torque`` (the paper's drop has none); a controller in the loop is not
run on this plant, nor are faults (refused: ``hil run --fast`` steps the chain with them).
"""
from __future__ import annotations

import json
import time

import numpy as np
from hilrig.errors import ConfigError
from hilrig.plant.flex_chain import integrators as ci
from hilrig.plant.flex_chain import chain as fc
from hilrig.plant.flex_chain.contact import contact_force
from hilrig.plant.flex_chain.model import chain_params
from hilrig.plant.faults import TABLE_KINDS
from hilrig.plant.offline import SimRun, SimulationError
from hilrig.schema import Config


def simulate(cfg: Config):
    """Run the resolved flex_chain config offline; a SimRun with the arrays above."""
    chain = chain_params(cfg.plant)
    n = chain.n
    nz = fc.n_coordinates(n)
    if cfg.controller.type != "open_loop" or cfg.controller.law is not None:
        raise ConfigError(f"controller: {cfg.plant.model} under hil sim takes constant joint torques "
                          "(input.torque, N m), not a controller in the loop")
    if cfg.plant.drive != "torque":
        raise ConfigError(f"plant.drive: {cfg.plant.model} is torque-driven (joint torques, N m)")
    faulted = [kind for kind in TABLE_KINDS if getattr(cfg.faults, kind)]
    if faulted:
        raise ConfigError(f"faults.{faulted[0]}: {cfg.plant.model} under hil sim runs its own "
                          "integrators under constant input.torque, without faults; `hil run "
                          "--fast` steps it with them")
    torque = np.zeros(n - 1) if cfg.input.torque is None else np.array(cfg.input.torque)
    p = chain.block()
    z0, zd0 = np.array(cfg.plant.q0), np.array(cfg.plant.qd0)
    sim = cfg.sim
    out = SimRun()
    started = time.perf_counter()   # compile (or load) the kernels on a two-row run first
    ci.simulate_events(p, z0, zd0, 2 * sim.dt, dt_out=sim.dt, tau=torque)
    ci.simulate_fixed(p, z0, zd0, sim.dt, dt=sim.dt, tau=torque)
    out.startup_seconds = time.perf_counter() - started
    started = time.perf_counter()
    if sim.integrator == "accurate":
        run = ci.simulate_events(p, z0, zd0, sim.duration, dt_out=sim.dt, rtol=sim.rtol,
                                 atol=sim.atol, t_tol=cfg.plant.event_tolerance,
                                 h_max=cfg.plant.max_step, tau=torque)
        t, y, events, failed = run.t, run.y, run.events, run.failed
        modes, vminus = run.modes, run.vminus
    elif sim.integrator == "rk4":
        run = ci.simulate_fixed(p, z0, zd0, sim.duration, dt=sim.dt,
                                h_fine=cfg.plant.substep_fine,
                                h_coarse=cfg.plant.substep_coarse, tau=torque)
        t, y, events, failed = run.t, run.y, run.events, run.failed
        modes, vminus = run.modes, run.vminus
    else:
        raise ConfigError(f"sim.integrator: {cfg.plant.model} runs 'accurate' (event-located) or 'rk4' "
                          f"(fixed ticks in substeps), not {sim.integrator!r}")
    out.stepping_seconds = time.perf_counter() - started
    out.arrays = _named(cfg, p, t, y, events, modes, vminus, nz, n, torque)
    if failed:
        raise SimulationError(f"plant state became invalid after t = {t[-1]:.6f} s; "
                              f"{len(t)} rows kept", out.arrays)
    return out


def _named(cfg, p, t, y, events, modes, vminus, nz, n, torque) -> dict:
    rows = len(t)
    points = np.zeros((rows, n + 1, 2))
    forces = np.zeros((rows, n + 1, 2))
    energy = np.zeros(rows)
    mass, bias, s = np.zeros((nz, nz)), np.zeros(nz), np.zeros(fc.scratch_size(n))
    pt, force = np.zeros(4), np.zeros(2)
    for r in range(rows):
        z, zd = y[r, :nz], y[r, nz:2 * nz]
        energy[r] = fc.assemble(p, z, zd, mass, bias, s) + 0.5 * zd @ mass @ zd
        for k in range(n + 1):
            fc.point_state(p, s, k, pt)
            points[r, k] = pt[:2]
            if modes[r, k] == 1.0:
                contact_force(p, pt, 1, vminus[r, k], force)
                forces[r, k] = force
    work = y[:, 2 * nz:]
    return {"t": t, "q": y[:, :nz], "qd": y[:, nz:2 * nz],
            "u": np.tile(torque, (rows, 1)), "jam_events": np.zeros((0, 3)),
            "points": points, "events": events, "contact_force": forces, "energy": energy,
            "work_contact": work[:, 0] + work[:, 1], "dissipated": work[:, 2],
            "meta": np.array(json.dumps(cfg.to_dict(), sort_keys=True))}   # as every log's
