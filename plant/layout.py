"""Layout of the flat ``params`` array shared by every plant kernel.

``params`` starts with a fixed header; the header gives the offsets of the motor
block and of the model's own block. Kernels read these integer-valued floats at
run time, so one compiled kernel serves every configuration of a model.

State vector ``x``: ``[q (nq), qd (nq), i (nact, only for the full motor model)]``,
in the model's generalised coordinates (rad, m) and A.

Jam array ``jams``: shape (nq, JAM_COLUMNS), one row per coordinate:
``[phase, t_end, qdd_prescribed]`` with phase ``HEALTHY``, ``JAMMING`` (constant
deceleration until ``t_end``, s), ``BLOCKED`` or ``STUCK`` (held by joint friction,
plant.friction: qd = qdd = 0 like BLOCKED, released when the torque holding it exceeds
the breakaway). For a HEALTHY joint with friction, ``qdd_prescribed`` holds the sign of
its rate at the last step boundary (plant.friction.stick_slip detects a reversal by it).
The columns after these three hold the coordinate's actuator faults (``A_*``:
plant.actuator_faults).
"""

# model ids (header entry H_MODEL)
MODEL_SERIAL_ARM = 1
MODEL_RRR3 = 2
MODEL_CHAIN = 3         # a user's chain: M and bias from its mechanism (plant.interface)

# how the actuated coordinates are driven (header entry H_DRIVE)
DRIVE_TORQUE = 0          # input u is the joint torque, N m
DRIVE_VOLTAGE = 1         # input u is the motor voltage, V; simplified motor (L_a di/dt = 0)
DRIVE_VOLTAGE_FULL = 2    # input u is the motor voltage, V; armature current is a state

# header entries
H_MODEL = 0     # model id
H_NQ = 1        # number of generalised coordinates
H_NACT = 2      # number of actuated coordinates (the first H_NACT of q)
H_DRIVE = 3     # drive kind
H_MOTOR = 4     # offset of the motor block (NACT rows of MOTOR_STRIDE)
H_BODY = 5      # offset of the model block
H_FRICTION = 6  # offset of the joint friction block (plant.friction), 0: no friction
HEADER_SIZE = 7

# motor block, one row per actuated coordinate
MOTOR_STRIDE = 7
MOT_JM = 0      # rotor inertia J_m, kg m^2
MOT_RA = 1      # armature resistance R_a, Ohm
MOT_LA = 2      # armature inductance L_a, H
MOT_KM = 3      # torque constant K_m, N m / A
MOT_KE = 4      # back-emf constant K_e, V s / rad
MOT_DM = 5      # rotor viscous friction D_m, N m s / rad
MOT_RATIO = 6   # gear ratio r = motor angle / joint angle

# jam phases
HEALTHY = 0.0
JAMMING = 1.0
BLOCKED = 2.0
STUCK = 3.0       # held by friction (plant.friction), not a fault
JAM_PHASE = 0
JAM_T_END = 1
JAM_QDD = 2
# actuator faults of the coordinate (plant.actuator_faults), in the same rows; neutral
# values: A_ON 0 (no actuator fault: the drive is healthy and these are not read),
# A_GAIN 1, A_OFFSET 0, A_WINDING W_HEALTHY, A_SAG 1, A_VMAX inf, A_VISCOUS 0
A_ON = 3          # 1: some actuator fault is active on this coordinate
A_GAIN = 4        # drive torque multiplier (effectiveness; free_swing: 0)
A_OFFSET = 5      # added torque, N m
A_WINDING = 6     # W_HEALTHY, W_OPEN or W_SHORT
A_SAG = 7         # volts at the winding per volt commanded
A_VMAX = 8        # most the supply gives, V
A_VISCOUS = 9     # added viscous friction, N m s/rad
JAM_COLUMNS = 10
W_HEALTHY, W_OPEN, W_SHORT = 0.0, 1.0, 2.0



# The scratch array ``work`` is 2-D (rows x cols), carved into rows so that no
# kernel reshapes or allocates:
#   rows [0, nq)                 mass matrix (nq x nq)
#   row  nq                      bias
#   row  nq + 1                  drive force
#   rows [nq + 2, ...)           model scratch
#   the last 2 nq rows           the Rosenbrock step's matrices (plant.rosenbrock)
# The integrator's stages (k1, k2, k3, k4 and the trial state) live in a separate
# ``stages`` array of shape (5, nx): kept in ``work`` they made an RK4 step of the
# 3-DOF arm four times slower (measured 1.19 us against 0.30 us).
def work_shape(nq: int) -> tuple[int, int]:
    """Shape of the ``work`` array a plant of nq coordinates needs."""
    return nq + 2 + max(24, nq + 8) + 2 * nq, max(3 * nq, 18)
