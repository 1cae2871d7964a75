"""Actuator faults: what a faulty drive does to the joint it moves (docs/FAULTS.md).

Each coordinate's row of the ``jams`` array (plant.layout) carries its actuator faults
in the ``A_*`` columns, which plant.faults sets when a fault starts or ends.
plant.motor.apply_drive calls ``drive_input`` and ``drive_output`` for a coordinate only
while its ``A_ON`` is set, so a healthy drive costs one comparison per coordinate; the
3-link arm's fused step takes the same drive in its form (plant.motor.drive3:
``drive3_faulty``).

Per actuated joint j, with u the command (V or N m), r the gear ratio, K_m, K_e, R_a,
L_a the motor's constants (plant.motor) and qd the joint rate:

- winding open: no current flows, i = 0 (the full model's current state is zeroed
  when it opens and stays 0), so the drive gives no torque and no back-EMF damping;
- winding shorted: the winding sees V = 0: i = -K_e r qd / R_a for the simplified
  model, the torque tau = r K_m i = -r^2 K_m K_e qd / R_a; the full model's
  L_a di/dt = -R_a i - K_e r qd;
- supply sag: the winding sees V = clamp(factor u, -V_max, V_max), so the torque a
  voltage drive reaches at a rate qd is r K_m (V - K_e r qd) / R_a at most;
- free swing / effectiveness: the drive's torque times A_GAIN (0 / factor);
- torque offset: A_OFFSET N m added to the drive's torque;
- friction: A_VISCOUS qd added to the joint's bias forces (a viscous term; the
  [friction] table of another branch will give coulomb friction as well).

Free swing, effectiveness and offset act on any drive; winding, sag need a motor model
(plant.drive voltage or voltage_full; settings.config refuses them on a torque drive).
"""
import numpy as np
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.layout import (
    A_GAIN,
    A_OFFSET,
    A_ON,
    A_SAG,
    A_VISCOUS,
    A_VMAX,
    A_WINDING,
    DRIVE_TORQUE,
    H_DRIVE,
    H_MOTOR,
    MOT_DM,
    MOT_KE,
    MOT_KM,
    MOT_RA,
    MOT_RATIO,
    MOTOR_STRIDE,
    W_HEALTHY,
    W_OPEN,
    W_SHORT,
)


@kernel
def healthy_actuators(jams):
    """Set every coordinate's actuator columns to their neutral values (no fault)."""
    for j in range(jams.shape[0]):
        jams[j, A_ON] = 0.0
        jams[j, A_GAIN] = 1.0
        jams[j, A_OFFSET] = 0.0
        jams[j, A_WINDING] = W_HEALTHY
        jams[j, A_SAG] = 1.0
        jams[j, A_VMAX] = np.inf
        jams[j, A_VISCOUS] = 0.0


@inline_kernel
def drive_input(jams, j, u):
    """The voltage (V) the winding of coordinate j sees for the command u: 0 when
    shorted, else the sagging supply's clamp(A_SAG u, +-A_VMAX). (A torque drive's
    command passes: settings.config allows neither fault there.)"""
    if jams[j, A_WINDING] == W_SHORT:
        return 0.0
    v = jams[j, A_SAG] * u
    vmax = jams[j, A_VMAX]
    return min(max(v, -vmax), vmax)


@inline_kernel
def drive_output(jams, j, qd, force, bias, dcurrent, full):
    """The faulty drive's torque on coordinate j (``force``, N m, in place): none with an
    open winding (nor di/dt: the full model's current stays 0), else times A_GAIN plus
    A_OFFSET; A_VISCOUS qd added to ``bias``. ``full``: the current is a state."""
    if jams[j, A_WINDING] == W_OPEN:
        force[j] = 0.0
        if full:
            dcurrent[j] = 0.0
    force[j] = force[j] * jams[j, A_GAIN] + jams[j, A_OFFSET]
    bias[j] += jams[j, A_VISCOUS] * qd


@inline_kernel   # inlined, as drive3_faulty: as called kernels they cost ~60 ns a step
def _drive1(p, jams, j, u):
    """Damping (N m s/rad) and force (N m) of coordinate j's faulty drive for the held
    input u, in the fused form (plant.motor.drive3): the same torque as apply_drive with
    drive_input and drive_output, its rate terms as damping."""
    viscous, gain, offset = jams[j, A_VISCOUS], jams[j, A_GAIN], jams[j, A_OFFSET]
    if int(p[H_DRIVE]) == DRIVE_TORQUE:
        return viscous, gain * u + offset
    row = int(p[H_MOTOR]) + j * MOTOR_STRIDE
    r = p[row + MOT_RATIO]
    friction = r * r * p[row + MOT_DM] + viscous
    if jams[j, A_WINDING] == W_OPEN:
        return friction, offset
    emf = r * r * p[row + MOT_KM] * p[row + MOT_KE] / p[row + MOT_RA]
    per_volt = r * (p[row + MOT_KM] / p[row + MOT_RA])
    return friction + gain * emf, gain * (per_volt * drive_input(jams, j, u)) + offset


@inline_kernel
def drive3_faulty(p, u, jams, inertia):
    """plant.motor.drive3 with actuator faults: ((J1, J2, J3), (D1, D2, D3), (F1, F2, F3)),
    ``inertia`` the drives' reflected inertias (a fault leaves the rotor on its joint).
    A healthy coordinate's neutral columns give its healthy drive."""
    d0, f0 = _drive1(p, jams, 0, u[0])
    d1, f1 = _drive1(p, jams, 1, u[1])
    d2, f2 = _drive1(p, jams, 2, u[2])
    return inertia, (d0, d1, d2), (f0, f1, f2)

