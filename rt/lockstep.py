"""Controller and plant in lockstep, compiled as one numba kernel.

``run`` does per step what a real-time tick does (apply due faults, measure,
control, step, correct) and records t, x and u of every row; ``diagnose_rows``
derives currents and diagnostics from the records afterwards. This is the offline
``hil sim`` path and the in-process ``--fast`` path: both cross the
Python/numba boundary once per run, not once per step.

Rows: row k holds the state at t_k = k h and the command computed from it
(applied over [t_k, t_k + h)); there are n_steps + 1 rows, starting at t = 0.

Diagnostics per row (3 columns): 3RRR: residual max|f_i| (m^2), det Phi_theta,
det Phi_x; serial arm: total energy (J), x_C, y_C of the overall centre of mass (m).
"""
import numpy as np

from controllers.law import command
from plant import rrr3, rrr3_scalar, serial_arm
from plant.integrators import is_fused_rrr3, state_size, step
from plant.jam import start_jam
from plant.kernel import kernel
from plant.layout import H_MODEL, H_NACT, H_NQ, MODEL_RRR3, MODEL_SERIAL_ARM
from plant.motor import currents

CORRECTION_NONE = 0
CORRECTION_POST_ADJUST = 1
CORRECTION_PROJECTION = 2

# schedule rows: [joint (0-based), t1 (s), duration (s), applied flag (0: pending)]
SCHEDULE_COLUMNS = 4


@kernel
def correct(p, x, correction, work):
    """Apply the configured constraint correction to x in place (3RRR only).

    ``work``: a plant's work array (its scratch rows are overwritten).
    """
    if correction == CORRECTION_POST_ADJUST:
        rrr3.post_adjust(p, x, work[int(p[H_NQ]) + 2:])
    elif correction == CORRECTION_PROJECTION:
        rrr3_scalar.project(p, x, work)


@kernel
def advance(p, jams, t, x, u, h, method, correction, work, stages):
    """One plant step from t with u held over h, then the constraint correction
    (the 3RRR's RK4 step and projection fused in one call where it can: no jams
    on a 3RRR, so nothing of plant.integrators.step's jam handling is skipped).

    Returns False (x then holds the invalid state) if the state became invalid:
    NaN or a singular mass matrix.
    """
    if correction == CORRECTION_PROJECTION and is_fused_rrr3(p, method) \
            and rrr3_scalar.rk4(p, x, u, h, work, True) > 0.0:
        health = 3.0   # the rank of S, as plant.integrators.step reports it
    else:
        health = step(p, jams, t, x, u, h, work, stages, method)
        correct(p, x, correction, work)
    if not health > 0.0:
        return False
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return False
    return True


@kernel
def apply_schedule(p, jams, schedule, t, x, tol):
    """Start every scheduled jam whose start time has come (at this step boundary)."""
    nq = int(p[H_NQ])
    for r in range(schedule.shape[0]):
        if schedule[r, 3] == 0.0 and schedule[r, 1] <= t + tol:
            start_jam(jams, x, nq, int(schedule[r, 0]), t, schedule[r, 2])
            schedule[r, 3] = 1.0


@kernel
def diagnostics(p, x, out, work):
    """Fill out[0:3] with the model's diagnostics (see module docstring).

    ``work``: a plant's work array (its matrix and scratch rows are overwritten).
    """
    nq = int(p[H_NQ])
    model = int(p[H_MODEL])
    scratch = work[nq + 2:]
    if model == MODEL_RRR3:
        out[0] = rrr3.residual(p, x, scratch)
        out[1] = rrr3.det_phi_theta(p, x)
        out[2] = rrr3.det_phi_x(p, x, scratch)
    elif model == MODEL_SERIAL_ARM:
        mass = work[:nq, :nq]
        bias = work[nq, :nq]
        serial_arm.mass_and_bias(p, x[:nq], x[nq:2 * nq], mass, bias, scratch)
        kinetic = 0.0
        for i in range(nq):
            for j in range(nq):
                kinetic += 0.5 * x[nq + i] * mass[i, j] * x[nq + j]
        out[0] = kinetic + serial_arm.potential_energy(p, x)
        serial_arm.centre_of_mass(p, x, out[1:3])


@kernel
def diagnose_rows(p, rec_x, rec_u, rec_i, rec_diag, work):
    """Currents and diagnostics of recorded rows, computed after a run (off the stepping path)."""
    for k in range(rec_x.shape[0]):
        currents(p, rec_x[k], rec_u[k], rec_i[k])
        diagnostics(p, rec_x[k], rec_diag[k], work)


@kernel
def run(p, jams, ctrl, model, cwork, schedule, x, t0, h, n_steps, method, correction, work, stages,
        rec_t, rec_x, rec_u):
    """Run n_steps lockstep ticks from t0 and record n_steps + 1 rows of t, x, u.

    Returns the number of rows written: n_steps + 1, or fewer if the plant
    state became invalid (NaN, singular mass matrix): the last row written is
    the last valid state.
    """
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    nx = state_size(p)
    tol = 1e-9 * h
    for k in range(n_steps + 1):
        t = t0 + k * h
        apply_schedule(p, jams, schedule, t, x, tol)
        u = rec_u[k]   # the command is recorded where it is computed
        command(ctrl, model, cwork, t, x[:nact], x[nq:nq + nact], u)
        rec_t[k] = t
        for i in range(nx):
            rec_x[k, i] = x[i]
        if k == n_steps:
            break
        if not advance(p, jams, t, x, u, h, method, correction, work, stages):
            return k + 1
    return n_steps + 1
