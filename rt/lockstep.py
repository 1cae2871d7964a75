"""Controller and plant in lockstep, compiled as one numba kernel.

``run`` does per step what a real-time tick does (apply due faults, measure,
control, step, correct) and records t, x and u of every row;
plant.stepping.diagnose_rows derives currents and diagnostics from the records
afterwards. This is the offline ``hil sim`` path and the in-process ``--fast``
path: both cross the Python/numba boundary once per run, not once per step.

Rows: row k holds the state at t_k = k h and the command applied over [t_k, t_k + h):
the one computed from row k's measurement, or, with a command latency of d steps, the
one computed d rows earlier (zeros in the first d rows); there are n_steps + 1 rows,
starting at t = 0.
"""
from hilrig.controllers.builtin import builtin_command
from hilrig.controllers.interface import Controller
from hilrig.plant.integrators import state_size
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.layout import DRIVE_TORQUE, H_DRIVE, H_NACT, H_NQ
from hilrig.plant.motor import currents
from hilrig.plant.stepping import advance, apply_schedule
from hilrig.rt.realtime import limit_tick


def law_of(controller: Controller):
    """What ``run`` takes as the law of ``controller``: None for the built-in law, which
    ``run`` then calls directly (about 30 ns a tick less than through its pointer, the
    same arithmetic), else its compiled law."""
    return None if controller.builtin else controller.law


@inline_kernel   # like plant.stepping.advance: no call passing six arrays per tick
def _command(law, t, pos, vel, cur, params, state, u):
    """law(t, pos, vel, cur, params, state, u); law None: the built-in law, called directly
    (numba compiles one of the two branches)."""
    if law is None:
        builtin_command(t, pos, vel, cur, params, state, u)
    else:
        law(t, pos, vel, cur, params, state, u)


@kernel
def run(p, jams, law, params, state, schedule, x, t0, h, n_steps, method, correction, work,
        stages, meas, held, limits, rec_t, rec_x, rec_u, noise, pending, mech=None):
    """Run n_steps lockstep ticks from t0 and record n_steps + 1 rows of t, x, u.

    Per tick the law sees what a real-time tick measures (rt.realtime.run_loop): t in
    ``meas[0]``, then copies of the actuated joints' positions and rates and the motor
    currents under the command held so far (``held``, zeros at the start), in ``meas``
    (a drivers.link.Measurement buffer). The command is clamped by ``limits``
    (controllers.limits.command_limits), as in a real-time tick. ``mech``: a user's chain's mechanism (None for
    the built-in models).

    Measurement noise: row k of ``noise`` (n_steps + 1 rows of 2 nact: position noise,
    then rate noise) is added to what the law sees at row k; no rows: none. Command
    latency: ``pending`` (d rows of nact, zeros) holds the commands computed but not yet
    applied, each applied d steps after its measurement; no rows: none.

    Returns the number of rows written: n_steps + 1, or fewer if the plant
    state became invalid (NaN, singular mass matrix): the last row written is
    the last valid state.
    """
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    nx = state_size(p)
    tol = 1e-9 * h
    pos = meas[1:1 + nact]
    vel = meas[1 + nact:1 + 2 * nact]
    cur = meas[1 + 2 * nact:1 + 3 * nact]
    noisy = noise.shape[0] > 0
    delay = pending.shape[0]
    currents(p, x, held, cur)
    fixed_currents = int(p[H_DRIVE]) == DRIVE_TORQUE   # a torque drive's: zeros, set once
    for k in range(n_steps + 1):
        t = t0 + k * h
        apply_schedule(p, jams, schedule, t, x, tol)
        meas[0] = t
        for j in range(nact):
            pos[j] = x[j]
            vel[j] = x[nq + j]
        if noisy:
            for j in range(nact):
                pos[j] += noise[k, j]
                vel[j] += noise[k, nact + j]
        if not fixed_currents:
            currents(p, x, held, cur)
        u = rec_u[k]   # the command is recorded where it is applied
        if delay == 0:
            _command(law, t, pos, vel, cur, params, state, u)
        else:
            due = pending[k % delay]
            for j in range(nact):
                u[j] = due[j]         # computed d steps ago
            _command(law, t, pos, vel, cur, params, state, due)   # applied d steps on
        if not limit_tick(limits, h, u, held):    # a non-finite command: the run ends
            rec_t[k] = t
            for i in range(nx):
                rec_x[k, i] = x[i]
            return k + 1
        rec_t[k] = t
        for i in range(nx):
            rec_x[k, i] = x[i]
        if k == n_steps:
            break
        if not advance(p, jams, t, x, u, h, method, correction, work, stages, mech):
            return k + 1
    return n_steps + 1
