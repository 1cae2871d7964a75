"""Fixed-step integrators for every plant, compiled with numba.

One step advances the state ``x`` in place from t to t + h with the input ``u``
held constant over the step (zero-order hold, as a sampled controller does).
If a jamming phase ends inside the step, the step is split at that instant and
the joint is blocked there exactly (qd_k = 0), so jams need no step alignment
beyond their start, which is a step boundary by construction. A chain with joint
friction first decides at the step's start which joints friction holds
(plant.stick_slip).

Methods: ``METHOD_RK4`` (classical Runge-Kutta, 4 evaluations),
``METHOD_EULER`` (semi-implicit Euler: qd += h qdd(q, qd); q += h qd_new;
i += h di/dt) and ``METHOD_ROSENBROCK`` (the linearly implicit ROS2 of
plant.rosenbrock, for stiff chains; serial arms and chains without current states). RK4 runs fused, in scalars, for the 3-link arm
(plant.dynamics.is_arm3: plant.rk4_arm3) and for the 3RRR without current
states (plant.rrr3_scalar); every other plant, and a 3RRR step where
Phi_q loses rank, takes _rk4 over plant.dynamics.derivative.
"""
from hilrig.plant import rosenbrock, rrr3_scalar
from hilrig.plant.dynamics import derivative, is_arm3
from hilrig.plant.family import CHAINS, compiled
from hilrig.plant.friction import any_can_stick
from hilrig.plant.jam import any_jamming, finish_jams, next_jam_end
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.layout import (
    DRIVE_VOLTAGE_FULL,
    H_DRIVE,
    H_FRICTION,
    H_MODEL,
    H_NACT,
    H_NQ,
    MODEL_RRR3,
    MODEL_SERIAL_ARM,
)
from hilrig.plant.rk4_arm3 import rk4_arm3
from hilrig.plant.stick_slip import stick_slip

METHOD_RK4 = 0
METHOD_EULER = 1
METHOD_ROSENBROCK = 2


@kernel
def state_size(p):
    """Length of x: 2 nq, plus n_act currents for the full motor model."""
    nq = int(p[H_NQ])
    if int(p[H_DRIVE]) == DRIVE_VOLTAGE_FULL:
        return 2 * nq + int(p[H_NACT])
    return 2 * nq


@kernel
def is_fused_rrr3(p, method):
    """True where an RK4 step of the plant p runs fused (plant.rrr3_scalar.rk4):
    a 3RRR without current states."""
    return method == METHOD_RK4 and int(p[H_MODEL]) == MODEL_RRR3 \
        and int(p[H_DRIVE]) != DRIVE_VOLTAGE_FULL


@kernel
def _rk4(p, jams, t, x, u, h, work, stages, nx, mech=None):
    k1 = stages[0]
    k2 = stages[1]
    k3 = stages[2]
    k4 = stages[3]
    xs = stages[4]
    health = derivative(p, jams, t, x, u, k1, work, mech)
    for i in range(nx):
        xs[i] = x[i] + 0.5 * h * k1[i]
    health = min(health, derivative(p, jams, t + 0.5 * h, xs, u, k2, work, mech))
    for i in range(nx):
        xs[i] = x[i] + 0.5 * h * k2[i]
    health = min(health, derivative(p, jams, t + 0.5 * h, xs, u, k3, work, mech))
    for i in range(nx):
        xs[i] = x[i] + h * k3[i]
    health = min(health, derivative(p, jams, t + h, xs, u, k4, work, mech))
    sixth = h / 6.0
    for i in range(nx):
        x[i] += sixth * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i])
    return health


@kernel
def _euler(p, jams, t, x, u, h, work, stages, nx, mech=None):
    nq = int(p[H_NQ])
    dx = stages[0]
    health = derivative(p, jams, t, x, u, dx, work, mech)
    for i in range(nq):
        x[nq + i] += h * dx[nq + i]
        x[i] += h * x[nq + i]
    for i in range(2 * nq, nx):
        x[i] += h * dx[i]
    return health


@inline_kernel
def step(p, jams, t, x, u, h, work, stages, method, mech=None):
    """Advance x from t to t + h (s). ``work``: plant.layout.work_shape(nq);
    ``stages``: (5, len(x)). Returns the worst health figure of the evaluations
    (see plant.dynamics.derivative; <= 0 means invalid). ``mech``: a user's chain's
    mechanism (None for the built-in models).

    Inlined into its callers: the arm's RK4 step outside a jamming phase, the common
    case, is then one call with four arrays (each array argument of a compiled call is
    copied field by field: passing this step's ten cost tens of ns a tick). ``mech``:
    what the kernel is compiled for (plant.family)."""
    # a chain with a joint that friction can hold: who sticks, who slips
    if p[H_FRICTION] != 0.0 and any_can_stick(p):
        compiled(mech, CHAINS, stick_slip, None, p, jams, t, x, u, h, work, stages, mech)
    if method == METHOD_RK4 and is_arm3(p) and not any_jamming(jams):
        # no jamming phase can end inside the step
        return compiled(mech, MODEL_SERIAL_ARM, rk4_arm3, -1.0, p, jams, x, u, h)
    return split_step(p, jams, t, x, u, h, work, stages, method, mech)


def split_step_parts(p, jams, x, u, h, work, stages, mech=None) -> list:
    """The generic integrators ``split_step`` calls for every plant (``_rk4``, ``_euler``),
    each as (kernel, arguments of the types split_step passes them; ``h`` the step, s;
    ``mech`` plant.family): what a run's first process compiles while the second types
    the loop that steps the plant (rt.loop_ahead), so that its typing loads them from the
    cache."""
    arguments = (p, jams, 0.0, x, u, h, work, stages, 0, mech)
    return [(_rk4, arguments), (_euler, arguments)]


@kernel
def split_step(p, jams, t, x, u, h, work, stages, method, mech=None):
    """``step`` for every plant and jam state: the step split where a jamming phase ends."""
    fused_arm3 = method == METHOD_RK4 and is_arm3(p)
    nq = int(p[H_NQ])
    nx = state_size(p)
    t_end = t + h
    tol = 1e-9 * h
    ts = t
    health = 1e300
    fused_rrr3 = is_fused_rrr3(p, method)
    while True:
        tn = next_jam_end(jams, ts + tol, t_end)
        # rrr3_scalar.rk4 leaves x untouched where S is singular (returns -1): the
        # generic step, with its pseudo-inverse, takes that step
        if fused_arm3:
            sub = compiled(mech, MODEL_SERIAL_ARM, rk4_arm3, -1.0, p, jams, x, u, tn - ts)
        elif fused_rrr3 and compiled(mech, MODEL_RRR3, rrr3_scalar.rk4, -1.0, p, x, u, tn - ts,
                                     work, 0.0, jams) > 0.0:
            sub = 3.0   # the rank of S, as rrr3.constrained_accel reports it
        elif method == METHOD_ROSENBROCK:   # serial arms and chains (plant.rosenbrock)
            sub = compiled(mech, CHAINS, rosenbrock.ros2, -1.0, p, jams, x, u, tn - ts, work,
                           stages, mech)
        elif method == METHOD_RK4:
            sub = _rk4(p, jams, ts, x, u, tn - ts, work, stages, nx, mech)
        else:
            sub = _euler(p, jams, ts, x, u, tn - ts, work, stages, nx, mech)
        health = min(health, sub)
        finish_jams(jams, x, nq, tn, tol)
        if tn >= t_end - tol:
            break
        ts = tn
    return health
