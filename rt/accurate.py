"""The accurate offline path: scipy ``solve_ivp`` at tight tolerances, exact event switching.

It reproduces what the fixed-step path computes, without the step error, so
the two can be compared: the same plant kernels (plant.dynamics.derivative),
the same sampled controller (the command is held between control instants
t_k = k h, as in the lockstep run; or, with ``continuous``, evaluated at
every instant, as in the papers' ODE solvers), and jams switched at their exact instants
(start at t1, block at t2 = t1 + dt) rather than inside a step. Rows are
recorded on the same grid as the fixed-step run. Constraint corrections are
not applied: at rtol 1e-10 the drift stays at the tolerance level.
"""
from __future__ import annotations

import numpy as np
from hilrig.controllers.factory import Controller
from hilrig.drivers.link import Measurement
from hilrig.plant.dynamics import derivative
from hilrig.plant.family import for_plant
from hilrig.plant.faults import C_DURATION, C_STATE, C_T1, C_T_ON, S_ACTIVE, S_PENDING, apply_faults
from hilrig.plant.jam import finish_jams
from hilrig.plant.layout import JAM_PHASE, JAM_T_END, JAMMING
from hilrig.plant.model import Plant
from hilrig.plant.motor import currents


def run(plant: Plant, controller: Controller, schedule: np.ndarray, h: float, n_steps: int,
        rtol: float, atol: float, method: str, rec: dict, continuous: bool = False,
        max_command=None) -> int:
    """Fill the record arrays ``rec`` (t, x, u and, if it has rows, i: the currents under
    u, a faulty winding's) like rt.lockstep.run; returns rows written.

    ``max_command``: |u| per axis at most this (controllers.limits; no slew limit here)."""
    # imported here, not with the module (rt.sim imports it for every `hil sim`): about
    # 0.2 s of CPU that only this path needs
    from scipy.integrate import solve_ivp

    p, jams, x = plant.params, plant.jams, plant.x.copy()
    nq, nact, nx = plant.nq, plant.nact, len(plant.x)
    work = plant.work
    model = for_plant(plant)
    u = np.zeros(nact)
    c = controller
    feedback = c.feedback
    meas = Measurement(nact)

    def control(t, state, out):
        """The law on what a tick measures: t, the actuated joints and the motor
        currents under the command held so far, a faulty winding's (as rt.lockstep.run)."""
        meas.pos[:] = state[:nact]
        meas.vel[:] = state[nq:nq + nact]
        currents(p, state, u, meas.current, jams)
        c(t, meas.pos, meas.vel, meas.current, out)
        if max_command is not None:
            np.clip(out, -max_command, max_command, out=out)
    t_final = n_steps * h
    tol = 1e-9 * h

    def rhs(t, state):
        state = np.ascontiguousarray(state)   # Radau's and BDF's Jacobians pass columns
        dx = np.zeros(nx)
        if continuous:
            control(t, state, u)
        derivative(p, jams, t, state, u, dx, work, model)
        return dx

    def record(k, state):
        rec["t"][k] = k * h
        rec["x"][k] = state
        if feedback:
            control(k * h, state, rec["u"][k])
        else:
            rec["u"][k] = u
        if len(rec["i"]):
            currents(p, state, rec["u"][k], rec["i"][k], jams)

    def events_now(t, state):
        finish_jams(jams, state, nq, t, tol)
        apply_faults(p, jams, schedule, t, state, tol)

    t = 0.0
    events_now(t, x)
    control(t, x, u)
    record(0, x)
    k_next = 1
    while k_next <= n_steps:
        candidates = [t_final, k_next * h if feedback and not continuous else t_final]
        candidates += [s[C_T1] for s in schedule if s[C_STATE] == S_PENDING and s[C_T1] > t + tol]
        candidates += [s[C_T_ON] + s[C_DURATION] for s in schedule
                       if s[C_STATE] == S_ACTIVE and s[C_T_ON] + s[C_DURATION] > t + tol]
        candidates += [jams[j, JAM_T_END] for j in range(nq)
                       if jams[j, JAM_PHASE] == JAMMING and jams[j, JAM_T_END] > t + tol]
        t_next = min(candidates)
        sol = solve_ivp(rhs, (t, t_next), x, method=method, rtol=rtol, atol=atol,
                        dense_output=True)
        if not sol.success:
            return k_next
        while k_next <= n_steps and k_next * h < t_next - tol:
            record(k_next, sol.sol(k_next * h))
            k_next += 1
        x = sol.y[:, -1].copy()
        t = t_next
        if not np.all(np.isfinite(x)):
            return k_next
        at_row = k_next <= n_steps and abs(k_next * h - t) <= tol
        events_now(t, x)
        if at_row:
            record(k_next, x)
            if feedback:
                control(t, x, u)
            k_next += 1
    return n_steps + 1
