"""Voltage-driven DC motors with massless gears, coupled to a mechanism (paper 003, §2.2-2.3).

Per actuated coordinate j (motor angle theta_m = r q_j, gear torque tau_2 = r tau_1):

    J_m r^2 qdd_j + D_m r^2 qd_j = r K_m i_j - tau_2,j                  (eq. 11)
    L_a di_j/dt = u_j - R_a i_j - K_e r qd_j                             (eq. 6, 7)

Adding eq. 11 to the mechanism gives eq. 16: M_s = M + B r^2 J_m Z,
D_s = D + B r^2 (D_m [+ K_m K_e / R_a]) Z, generalised force B r K_m i. With
the simplified model (L_a di/dt = 0) the current is algebraic:
i = (u - K_e r qd) / R_a, which puts r^2 K_m K_e / R_a into D_s and
B_s = B r K_m / R_a in front of u.

Units: J_m kg m^2, R_a Ohm, L_a H, K_m N m/A, K_e V s/rad, D_m N m s/rad,
voltages V, currents A, joint torques N m.
"""
from dataclasses import dataclass

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.actuator_faults import drive3_faulty, drive_input, drive_output
from hilrig.plant.layout import (
    A_ON,
    A_WINDING,
    DRIVE_TORQUE,
    DRIVE_VOLTAGE,
    DRIVE_VOLTAGE_FULL,
    H_DRIVE,
    H_MOTOR,
    H_NACT,
    H_NQ,
    MOT_DM,
    MOT_JM,
    MOT_KE,
    MOT_KM,
    MOT_LA,
    MOT_RA,
    MOT_RATIO,
    MOTOR_STRIDE,
    W_OPEN,
)


@dataclass(frozen=True)
class MotorParams:
    """Parameters of the n_act DC motors and gears, one entry per actuated joint."""

    rotor_inertia: np.ndarray        # J_m, kg m^2
    resistance: np.ndarray           # R_a, Ohm
    inductance: np.ndarray           # L_a, H
    torque_constant: np.ndarray      # K_m, N m / A
    back_emf_constant: np.ndarray    # K_e, V s / rad
    viscous_friction: np.ndarray     # D_m, N m s / rad (on the motor shaft)
    gear_ratio: np.ndarray           # r = motor angle / joint angle

    def block(self) -> np.ndarray:
        """The motor block of ``params``: n_act rows of MOTOR_STRIDE values."""
        rows = np.zeros((len(self.gear_ratio), MOTOR_STRIDE))
        rows[:, MOT_JM] = self.rotor_inertia
        rows[:, MOT_RA] = self.resistance
        rows[:, MOT_LA] = self.inductance
        rows[:, MOT_KM] = self.torque_constant
        rows[:, MOT_KE] = self.back_emf_constant
        rows[:, MOT_DM] = self.viscous_friction
        rows[:, MOT_RATIO] = self.gear_ratio
        return rows.ravel()

    def torque_per_volt(self) -> np.ndarray:
        """k = r K_m / R_a: joint torque per volt at standstill, N m / V."""
        return self.gear_ratio * self.torque_constant / self.resistance

    def back_emf_damping(self) -> np.ndarray:
        """c = r^2 K_m K_e / R_a + r^2 D_m: joint damping the simplified motor adds, N m s / rad."""
        r2 = self.gear_ratio ** 2
        return r2 * self.torque_constant * self.back_emf_constant / self.resistance \
            + r2 * self.viscous_friction

    def reflected_inertia(self) -> np.ndarray:
        """r^2 J_m: rotor inertia seen at the joint, kg m^2."""
        return self.gear_ratio ** 2 * self.rotor_inertia


@kernel
def _simplified_current(p, row, u, qd):
    """i = (u - K_e r qd) / R_a: the current when L_a di/dt = 0 (eq. 8), A."""
    return (u - p[row + MOT_KE] * p[row + MOT_RATIO] * qd) / p[row + MOT_RA]


@kernel
def apply_drive(p, jams, x, u, mass, bias, force, dcurrent):
    """Add the drives to a mechanism's equations M qdd + bias = force.

    ``mass`` (nq x nq) and ``bias`` (nq) hold the mechanism's terms on entry and
    the coupled system's (eq. 16) on return; ``force`` receives the generalised
    drive force (N m per actuated joint, 0 elsewhere). For the full motor model
    ``dcurrent`` (n_act) receives di/dt in A/s. ``jams``: the coordinates' rows
    (plant.layout), whose actuator faults (plant.actuator_faults) change the drive.
    """
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    drive = int(p[H_DRIVE])
    mo = int(p[H_MOTOR])
    for j in range(nq):
        force[j] = 0.0
    for j in range(nact):
        faulty = jams[j, A_ON] != 0.0
        volts = drive_input(jams, j, u[j]) if faulty and drive != DRIVE_TORQUE else u[j]
        if drive == DRIVE_TORQUE:
            force[j] = volts
        else:
            row = mo + j * MOTOR_STRIDE
            ratio = p[row + MOT_RATIO]
            qd = x[nq + j]
            mass[j, j] += ratio * ratio * p[row + MOT_JM]
            bias[j] += ratio * ratio * p[row + MOT_DM] * qd
            if drive == DRIVE_VOLTAGE:
                current = _simplified_current(p, row, volts, qd)
            else:
                current = x[2 * nq + j]
                back_emf = p[row + MOT_KE] * ratio * qd
                dcurrent[j] = (volts - p[row + MOT_RA] * current - back_emf) / p[row + MOT_LA]
            force[j] = ratio * p[row + MOT_KM] * current
        if faulty:
            drive_output(jams, j, x[nq + j], force, bias, dcurrent,
                         drive == DRIVE_VOLTAGE_FULL)


@kernel
def currents(p, x, u, out, jams=None):
    """Armature currents in A (the state for the full model, algebraic for the simplified
    one); with ``jams``, a faulty winding's (plant.actuator_faults: open, shorted, a
    sagging supply), else the healthy drives'."""
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    drive = int(p[H_DRIVE])
    mo = int(p[H_MOTOR])
    for j in range(nact):
        row = mo + j * MOTOR_STRIDE
        if drive == DRIVE_TORQUE:
            out[j] = 0.0
        elif drive == DRIVE_VOLTAGE:
            faulty = jams is not None and jams[j, A_ON] != 0.0
            volts = drive_input(jams, j, u[j]) if faulty else u[j]
            out[j] = _simplified_current(p, row, volts, x[nq + j])
            if faulty and jams[j, A_WINDING] == W_OPEN:
                out[j] = 0.0
        else:
            out[j] = x[2 * nq + j]


@kernel
def drive3(p, u, jams=None):
    """What the drives of the first three coordinates add for input u (N m or V) held
    over a step, in scalars (the fused kernels' form of apply_drive; torque drive or
    simplified motor model): ((J1, J2, J3), (D1, D2, D3), (F1, F2, F3)) with the
    reflected inertia r^2 J_m (kg m^2), the damping r^2 (D_m + K_m K_e / R_a)
    (N m s/rad) and the generalised force (N m); with ``jams``, their actuator faults
    (plant.actuator_faults.drive3_faulty)."""
    if jams is not None:
        if jams[0, A_ON] != 0.0 or jams[1, A_ON] != 0.0 or jams[2, A_ON] != 0.0:
            return drive3_faulty(p, u, jams, reflected_inertia3(p))
    if int(p[H_DRIVE]) == DRIVE_TORQUE:
        return (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (u[0], u[1], u[2])
    r0 = int(p[H_MOTOR])
    r1 = r0 + MOTOR_STRIDE
    r2 = r1 + MOTOR_STRIDE
    return (reflected_inertia3(p), (_damping(p, r0), _damping(p, r1), _damping(p, r2)),
            (_force_per_volt(p, r0) * u[0], _force_per_volt(p, r1) * u[1],
             _force_per_volt(p, r2) * u[2]))


@kernel
def reflected_inertia3(p):
    """(r^2 J_m) of the drives of the first three coordinates, kg m^2 (0 for torque drive)."""
    if int(p[H_DRIVE]) == DRIVE_TORQUE:
        return 0.0, 0.0, 0.0
    r0 = int(p[H_MOTOR])
    return (_reflected_inertia(p, r0), _reflected_inertia(p, r0 + MOTOR_STRIDE),
            _reflected_inertia(p, r0 + 2 * MOTOR_STRIDE))


@kernel
def _reflected_inertia(p, row):
    return p[row + MOT_RATIO] * p[row + MOT_RATIO] * p[row + MOT_JM]


@kernel
def _damping(p, row):
    r = p[row + MOT_RATIO]
    return r * r * (p[row + MOT_DM] + p[row + MOT_KM] / p[row + MOT_RA] * p[row + MOT_KE])


@kernel
def _force_per_volt(p, row):
    return p[row + MOT_RATIO] * (p[row + MOT_KM] / p[row + MOT_RA])
