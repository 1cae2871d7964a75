"""Two compiled laws that use the plant's own model (hilrig.plant.model_kernels) instead
of a hand derivation: run from this folder, `hil sim panda_computed_torque.toml` and
`hil sim panda_cartesian.toml` (docs/PLUGINS.md, "The plant's model in your law").

Both set ``controller.with_model = true``: hilrig appends the plant's model block to the
law's params, so ``params[K:]`` (K = the law's own params) is what the model kernels
take. Everything they write goes into the law's ``state`` (views made with
``matrix_view``, no allocation), so the laws run in the real-time loop as they are.
"""
import math

from hilrig.controllers.interface import declare_sizes
from hilrig.plant import model_kernels as mk
from hilrig.plant.packed import matrix_view
from numba import njit

CT_PARAMS = 4        # kp 1/s^2, kd 1/s, amplitude rad, frequency Hz; then q_center (n)


@declare_sizes(params=lambda n: CT_PARAMS + n, state=lambda n: n)
@njit(cache=True)
def joint_computed_torque(t, pos, vel, cur, params, state, u):
    """Computed torque in joint space: u = M(q) (r'' + kp (r - q) + kd (r' - q')) + c(q, q')
    + g(q) + D q' (N m), one inverse-dynamics call, r = q_center + amplitude sin(2 pi f t)
    on every joint. ``state``: the commanded acceleration a (n, rad/s^2)."""
    n = u.shape[0]
    kp, kd, amplitude, frequency = params[0], params[1], params[2], params[3]
    model = params[CT_PARAMS + n:]
    w = 2.0 * math.pi * frequency
    for j in range(n):
        r = params[CT_PARAMS + j] + amplitude * math.sin(w * t)
        rd = amplitude * w * math.cos(w * t)
        rdd = -amplitude * w * w * math.sin(w * t)
        state[j] = rdd + kp * (r - pos[j]) + kd * (rd - vel[j])
    mk.inverse_dynamics(model, pos, vel, state[:n], u)


CART_PARAMS = 5      # k N/m, d N s/m, joint damping N m s/rad, radius m, frequency Hz


@declare_sizes(params=CART_PARAMS, state=lambda n: 16 + 6 * n)
@njit(cache=True)
def cartesian_impedance(t, pos, vel, cur, params, state, u):
    """The tip's origin follows a horizontal circle (radius, frequency) that starts where
    the tip is at t = 0, through a spring-damper in the base frame:
    u = J_v^T (k (x_d - x) + d (x_d' - J_v q')) + g(q) + c(q, q') - d_joint q' (N m), with
    J_v the top three rows of the tip Jacobian (joint damping keeps the redundant joints
    still). ``state``: [started, x0 (3)], then J (6 x n), R (3 x 3), x (3)."""
    n = u.shape[0]
    k, d, d_joint, radius, frequency = params[0], params[1], params[2], params[3], params[4]
    model = params[CART_PARAMS:]
    jac = matrix_view(state, 4, 6, n)
    rot = matrix_view(state, 4 + 6 * n, 3, 3)
    x = state[13 + 6 * n:16 + 6 * n]
    mk.tip_pose(model, pos, rot, x)
    if state[0] == 0.0:                 # the first call: the circle starts here
        state[0] = 1.0
        for i in range(3):
            state[1 + i] = x[i]
    mk.tip_jacobian(model, pos, jac)
    mk.bias(model, pos, vel, u)         # c(q, q') + g(q) + D q'
    w = 2.0 * math.pi * frequency
    target = (state[1] + radius * (math.cos(w * t) - 1.0), state[2] + radius * math.sin(w * t),
              state[3])
    rate = (-radius * w * math.sin(w * t), radius * w * math.cos(w * t), 0.0)
    for i in range(3):
        v = 0.0
        for j in range(n):
            v += jac[i, j] * vel[j]
        force = k * (target[i] - x[i]) + d * (rate[i] - v)
        for j in range(n):
            u[j] += jac[i, j] * force
    for j in range(n):
        u[j] -= d_joint * vel[j]
