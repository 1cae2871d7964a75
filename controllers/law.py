"""Control laws as one numba kernel over a flat ``ctrl`` array.

``command(ctrl, model, work, t, pos, vel, u)`` turns a measurement (``pos`` in
rad, ``vel`` in rad/s of the actuated joints) into one command per joint in
``u``: volts for a voltage-driven plant, N m for a torque-driven one.

Laws (``ctrl[C_KIND]``):
- ``OPEN_LOOP``: u = u_const.
- ``PD`` (paper 003 §5.2): c = Kp (r − q) + Kd (r' − q'), r from controllers.reference.
- ``FEEDFORWARD``: computed-torque feed-forward from the inverse dynamics of the
  controller's own model (``model``, the plant's model block: plant.model_kernels; the
  serial arm, a URDF arm) plus PD on the error:
  c = M(r) r'' + C(r, r') r' + D r' + g(r) + Kp (r − q) + Kd (r' − q').

What c means and how it becomes u (``ctrl[C_OUTPUT]``):
- ``OUT_DIRECT``: u = c (volt gains on a voltage plant, torques on a torque plant).
- ``OUT_GAIN``: c is a joint torque, u = c / k with k = r K_m / R_a the motor's
  torque per volt at standstill (the "torque" reading of the paper's PD law).
- ``OUT_MOTOR_MODEL``: c is the joint torque the mechanism needs; the inverse of
  the DC motor and gear (simplified model, L_a di/dt = 0) gives the voltage:
  u = R_a / (r K_m) (c + r² J_m r'' + r² D_m q') + K_e r q'.

Layout of ``ctrl``: controllers.layout. ``work``: 2-D scratch, rows 0–2 hold
r, r', r'' and row WORK_MODEL the feed-forward's torque M(r) r'' + c(r, r') + g(r) + D r'
(plant.model_kernels.inverse_dynamics: for the URDF arm one RNEA pass, no mass matrix).
"""
from hilrig.controllers.layout import (
    B_KD,
    B_KP,
    B_MOTOR_EMF,
    B_MOTOR_FRICTION,
    B_MOTOR_INERTIA,
    B_MOTOR_RESISTANCE,
    B_SCALE,
    B_U_CONST,
    C_KIND,
    C_NACT,
    C_OUTPUT,
    C_REF,
    at,
)
from hilrig.controllers.reference import reference
from hilrig.jit.kernel import kernel
from hilrig.plant import model_kernels

OPEN_LOOP = 0
PD = 1
FEEDFORWARD = 2

OUT_DIRECT = 0
OUT_GAIN = 1
OUT_MOTOR_MODEL = 2

WORK_MODEL = 3


@kernel
def command(ctrl, model, work, t, pos, vel, u):
    """Write the command for time t (s) into u (V or N m per actuated joint). ``model``:
    the feed-forward's plant params (plant.model_kernels), or None for a law compiled
    without the feed-forward (open loop and PD: numba then prunes its branch, and the
    model kernels are neither typed nor compiled)."""
    kind = int(ctrl[C_KIND])
    n = int(ctrl[C_NACT])
    if kind == OPEN_LOOP:
        for j in range(n):
            u[j] = at(ctrl, B_U_CONST, n, j)
        return
    reference(int(ctrl[C_REF]), t, ctrl, work)
    for j in range(n):
        u[j] = at(ctrl, B_KP, n, j) * (work[0, j] - pos[j]) \
            + at(ctrl, B_KD, n, j) * (work[1, j] - vel[j])
    if model is not None:        # None: a law compiled without the feed-forward (above)
        if kind == FEEDFORWARD:     # M(r) r'' + c(r, r') + g(r) + D r': one RNEA pass
            tau = work[WORK_MODEL, :n]
            model_kernels.inverse_dynamics(model, work[0, :n], work[1, :n], work[2, :n], tau)
            for j in range(n):
                u[j] += tau[j]
    output = int(ctrl[C_OUTPUT])
    if output == OUT_GAIN:
        for j in range(n):
            u[j] = at(ctrl, B_SCALE, n, j) * u[j]
    elif output == OUT_MOTOR_MODEL:
        for j in range(n):
            torque = u[j] + at(ctrl, B_MOTOR_INERTIA, n, j) * work[2, j] \
                + at(ctrl, B_MOTOR_FRICTION, n, j) * vel[j]
            u[j] = at(ctrl, B_MOTOR_RESISTANCE, n, j) * torque \
                + at(ctrl, B_MOTOR_EMF, n, j) * vel[j]
