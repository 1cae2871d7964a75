"""Controller and plant in lockstep, compiled as one numba kernel.

``run`` does per step what a real-time tick does (rt.tick.tick: measure, control, limit,
step, correct) after the faults due now, and records t, x, u, what the law saw and the
motor currents (a faulty winding's, as ``hil run`` logs them) of every row;
plant.stepping.diagnose_rows derives the model's diagnostics from the records
afterwards. This is the offline ``hil sim`` path and the campaigns' (campaign.kernel):
both cross the Python/numba boundary once per run, not once per step.

Rows: row k holds the state at t_k = t0 + k h and the command applied over [t_k, t_k + h):
the one computed from row k's measurement, or, with a command latency of d steps, the
one computed d rows earlier (zeros in the first d rows); there are n_steps + 1 rows,
starting at t = t0.
"""
from hilrig.jit.kernel import kernel
from hilrig.plant.faults import holds_faults
from hilrig.plant.stepping import apply_schedule
from hilrig.rt.tick import (
    T_BAD_COMMAND,
    T_JOINT_LIMIT,
    T_OK,
    TickIO,
    law_of,
    record_currents,
    record_state,
    tick,
)

__all__ = ["law_of", "run"]


@kernel
def run(law, plant, ctrl, io, stepping, schedule, t0, n_steps, rec, imperfect, mech=None):
    """Run n_steps lockstep ticks from t0 (s) and record n_steps + 1 rows in ``rec``.

    Records (rt.tick): ``plant`` (PlantArrays), ``ctrl`` (LawArrays: the law's params and
    state, the command limits of controllers.limits.command_limits), ``io`` (TickIO: the
    measurement buffer and the held command, zeros at the start; its ``u`` is not used:
    tick k computes its command into ``rec.u[k]``), ``stepping`` (Stepping), ``rec``
    (Records: n_steps + 1 rows of t, x, u, seen and i), ``imperfect`` (Imperfections: measurement
    noise, command latency). ``law``: a compiled law, or None for the built-in
    (rt.tick.law_of); ``schedule``: the fault table (plant.faults); ``mech``: what the plant code is
    compiled for (plant.family).

    Per tick the law sees what a real-time tick measures (rt.realtime.run_loop, the same
    rt.tick.tick): t, then the actuated joints' positions and rates and the motor currents
    under the command held so far.

    Returns the number of rows written: n_steps + 1, or fewer if the plant state became
    invalid (NaN, singular mass matrix: the last row written is the last valid state),
    the law gave a non-finite command or a joint left its safety limits (the last row
    holds that tick's state).
    """
    h = stepping.h
    tol = 1e-9 * h
    for k in range(n_steps + 1):
        t = t0 + k * h
        apply_schedule(plant.p, plant.jams, schedule, t, plant.x, tol)
        done = tick(law, plant, ctrl, TickIO(io.meas, rec.u[k], io.held), stepping, schedule,
                    t, k, k == n_steps, None, rec, imperfect, None, None, 0, mech)
        if done == T_BAD_COMMAND or done == T_JOINT_LIMIT:   # a non-finite command or a
            record_state(rec, k, t, plant.x, io.meas)         # joint out of its limits
            record_currents(plant, io.held, rec, k, holds_faults(schedule))
            return k + 1
        if done != T_OK:
            return k + 1
    return n_steps + 1
