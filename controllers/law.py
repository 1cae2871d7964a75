"""Control laws as one numba kernel over a flat ``ctrl`` array.

``command(ctrl, model, work, t, pos, vel, u)`` turns a measurement (``pos`` in
rad, ``vel`` in rad/s of the actuated joints) into one command per joint in
``u``: volts for a voltage-driven plant, N m for a torque-driven one.

Laws (``ctrl[C_KIND]``):
- ``OPEN_LOOP``: u = u_const.
- ``PD`` (paper 003 §5.2): c = Kp (r − q) + Kd (r' − q'), r from controllers.reference.
- ``FEEDFORWARD``: computed-torque feed-forward from the inverse dynamics of the
  controller's own model (``model``, a plant params array; serial arms) plus PD
  on the error: c = M(r) r'' + C(r, r') r' + D r' + g(r) + Kp (r − q) + Kd (r' − q').

What c means and how it becomes u (``ctrl[C_OUTPUT]``):
- ``OUT_DIRECT``: u = c (volt gains on a voltage plant, torques on a torque plant).
- ``OUT_GAIN``: c is a joint torque, u = c / k with k = r K_m / R_a the motor's
  torque per volt at standstill (the "torque" reading of the paper's PD law).
- ``OUT_MOTOR_MODEL``: c is the joint torque the mechanism needs; the inverse of
  the DC motor and gear (simplified model, L_a di/dt = 0) gives the voltage:
  u = R_a / (r K_m) (c + r² J_m r'' + r² D_m q') + K_e r q'.

Layout of ``ctrl``: a header (C_*), then blocks of n_act values in the order
of BLOCKS. ``work``: 2-D scratch, rows 0–2 hold r, r', r'' and rows from
WORK_MODEL on are the model's work array (plant.layout.work_shape).
"""
import numpy as np

from controllers.reference import reference
from plant import serial_arm
from plant.kernel import kernel
from plant.layout import H_NQ

OPEN_LOOP = 0
PD = 1
FEEDFORWARD = 2

OUT_DIRECT = 0
OUT_GAIN = 1
OUT_MOTOR_MODEL = 2

C_KIND, C_NACT, C_REF, C_OUTPUT, C_T_START, C_DURATION, C_FREQUENCY = range(7)
HEADER = 8
BLOCKS = ("kp", "kd", "target", "start", "amplitude", "phase", "scale", "u_const",
          "motor_resistance", "motor_emf", "motor_inertia", "motor_friction")
B_KP, B_KD, B_TARGET, B_START, B_AMPLITUDE, B_PHASE, B_SCALE, B_U_CONST, \
    B_MOTOR_RESISTANCE, B_MOTOR_EMF, B_MOTOR_INERTIA, B_MOTOR_FRICTION = range(len(BLOCKS))
WORK_MODEL = 3


def make_ctrl(kind: int, nact: int, reference_kind: int = 0, output: int = OUT_DIRECT,
              t_start: float = 0.0, duration: float = 1.0, frequency: float = 0.0,
              **blocks) -> np.ndarray:
    """Pack a ``ctrl`` array; ``blocks`` are named as in BLOCKS (scalars broadcast)."""
    unknown = set(blocks) - set(BLOCKS)
    if unknown:
        raise ValueError(f"unknown controller blocks {sorted(unknown)}")
    out = np.zeros(HEADER + len(BLOCKS) * nact)
    out[C_KIND], out[C_NACT], out[C_REF], out[C_OUTPUT] = kind, nact, reference_kind, output
    out[C_T_START], out[C_DURATION], out[C_FREQUENCY] = t_start, duration, frequency
    for name, value in blocks.items():
        b = BLOCKS.index(name)
        out[HEADER + b * nact:HEADER + (b + 1) * nact] = value
    return out


@kernel
def _block(ctrl, b, n):
    return ctrl[HEADER + b * n:HEADER + (b + 1) * n]


@kernel
def command(ctrl, model, work, t, pos, vel, u):
    """Write the command for time t (s) into u (V or N m per actuated joint)."""
    kind = int(ctrl[C_KIND])
    n = int(ctrl[C_NACT])
    if kind == OPEN_LOOP:
        u_const = _block(ctrl, B_U_CONST, n)
        for j in range(n):
            u[j] = u_const[j]
        return
    r = work[0, :n]
    rd = work[1, :n]
    rdd = work[2, :n]
    reference(int(ctrl[C_REF]), t, ctrl[C_T_START], ctrl[C_DURATION], ctrl[C_FREQUENCY],
              _block(ctrl, B_START, n), _block(ctrl, B_TARGET, n),
              _block(ctrl, B_AMPLITUDE, n), _block(ctrl, B_PHASE, n), r, rd, rdd)
    kp = _block(ctrl, B_KP, n)
    kd = _block(ctrl, B_KD, n)
    for j in range(n):
        u[j] = kp[j] * (r[j] - pos[j]) + kd[j] * (rd[j] - vel[j])
    if kind == FEEDFORWARD:
        nq = int(model[H_NQ])
        mwork = work[WORK_MODEL:]
        mass = mwork[:nq, :nq]
        bias = mwork[nq, :nq]
        serial_arm.mass_and_bias(model, r, rd, mass, bias, mwork[nq + 2:])
        for j in range(n):
            tau = bias[j]
            for k in range(n):
                tau += mass[j, k] * rdd[k]
            u[j] += tau
    output = int(ctrl[C_OUTPUT])
    if output == OUT_GAIN:
        scale = _block(ctrl, B_SCALE, n)
        for j in range(n):
            u[j] = scale[j] * u[j]
    elif output == OUT_MOTOR_MODEL:
        res = _block(ctrl, B_MOTOR_RESISTANCE, n)
        emf = _block(ctrl, B_MOTOR_EMF, n)
        inertia = _block(ctrl, B_MOTOR_INERTIA, n)
        friction = _block(ctrl, B_MOTOR_FRICTION, n)
        for j in range(n):
            torque = u[j] + inertia[j] * rdd[j] + friction[j] * vel[j]
            u[j] = res[j] * torque + emf[j] * vel[j]
