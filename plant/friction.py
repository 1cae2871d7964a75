"""Joint friction of the serial chains: viscous, Coulomb and Stribeck (docs/FRICTION.md).

Per joint k, on the joint side (rad or m), a torque (N m; N for a prismatic joint)
against the motion:

    tau_f = viscous qd + [coulomb + (static - coulomb) exp(-(qd / v_s)^2)] sign(qd)

with ``static`` the breakaway torque (default ``coulomb``: no Stribeck hump) and v_s the
Stribeck velocity (rad/s or m/s). A sliding joint (jam phase HEALTHY) has tau_f added to
the bias, M qdd + bias + tau_f = force (``add_friction``, from plant.dynamics.derivative).
A joint at rest is held exactly: plant.stick_slip makes it STUCK (plant.layout: qd = qdd
= 0, like a BLOCKED jam) at a step boundary while the torque that holds it stays within
+-static, and releases it when that torque exceeds static.

The block in ``params`` (header entry H_FRICTION gives its offset; 0: no friction, and
no kernel reads further): ``[stick_velocity, then nq rows of FRICTION_STRIDE]``.
The motor-side ``plant.motor.viscous_friction`` (plant.motor) is separate and stays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.plant.layout import H_FRICTION, H_NQ, HEALTHY, JAM_PHASE

FRICTION_STRIDE = 4
FR_VISCOUS = 0      # N m s/rad (N s/m)
FR_COULOMB = 1      # N m (N)
FR_STATIC = 2       # breakaway, N m (N), >= coulomb
FR_STRIBECK = 3     # Stribeck velocity v_s, rad/s (m/s), > 0


@dataclass(frozen=True)
class FrictionParams:
    """Joint friction, one entry per coordinate (see the module docstring for units)."""

    viscous: np.ndarray
    coulomb: np.ndarray
    static: np.ndarray
    stribeck_velocity: np.ndarray
    stick_velocity: float       # a joint slower than this (rad/s, m/s) at a boundary may stick

    def any(self) -> bool:
        """Whether any joint has friction at all (else no block is attached)."""
        return bool(np.any(self.viscous) or np.any(self.coulomb) or np.any(self.static))

    def sticks(self) -> bool:
        """Whether any joint can stick (a Coulomb or breakaway level)."""
        return bool(np.any(self.coulomb) or np.any(self.static))

    def block(self) -> np.ndarray:
        """The friction block of ``params`` (module docstring)."""
        rows = np.zeros((len(self.viscous), FRICTION_STRIDE))
        rows[:, FR_VISCOUS] = self.viscous
        rows[:, FR_COULOMB] = self.coulomb
        rows[:, FR_STATIC] = self.static
        rows[:, FR_STRIBECK] = self.stribeck_velocity
        return np.concatenate([[self.stick_velocity], rows.ravel()])

    def torque(self, qd: np.ndarray) -> np.ndarray:
        """tau_f at the rates qd of sliding joints (N m), in numpy (tests, analysis)."""
        qd = np.asarray(qd, dtype=float)
        level = self.coulomb + (self.static - self.coulomb) \
            * np.exp(-(qd / self.stribeck_velocity) ** 2)
        return self.viscous * qd + level * np.sign(qd)


def attach(params: np.ndarray, friction: FrictionParams) -> np.ndarray:
    """``params`` with the friction block appended and named in its header (a new array)."""
    out = np.concatenate([params, friction.block()])
    out[H_FRICTION] = len(params)
    return out


@kernel
def row(p, k):
    """Offset in ``p`` of joint k's friction row (the plant has a friction block)."""
    return int(p[H_FRICTION]) + 1 + k * FRICTION_STRIDE


@kernel
def sliding_torque(p, r, v):
    """tau_f (N m) of the joint whose row is at ``r`` sliding at rate v (rad/s); 0 at v = 0.
    Without a Stribeck hump (static = coulomb: a URDF's damping alone, say) the level is
    coulomb, the exponential's term being exactly 0: it is not computed (four per RK4 step
    and joint, about a tenth of a Panda's tick)."""
    if v == 0.0:
        return 0.0
    coulomb = p[r + FR_COULOMB]
    level = coulomb
    hump = p[r + FR_STATIC] - coulomb
    if hump != 0.0:
        ratio = v / p[r + FR_STRIBECK]
        level = coulomb + hump * np.exp(-ratio * ratio)
    return p[r + FR_VISCOUS] * v + (level if v > 0.0 else -level)


@kernel
def add_friction(p, jams, qd, bias):
    """bias += tau_f of every sliding (HEALTHY) joint; a held one (jammed, blocked or
    STUCK) has its acceleration prescribed, and its friction is part of the torque
    holding it."""
    for k in range(int(p[H_NQ])):
        if jams[k, JAM_PHASE] == HEALTHY:
            bias[k] += sliding_torque(p, row(p, k), qd[k])


@kernel
def can_stick(p, r):
    """Whether the joint whose row is at ``r`` has a Coulomb or breakaway level."""
    return p[r + FR_COULOMB] > 0.0 or p[r + FR_STATIC] > 0.0


@kernel
def any_can_stick(p):
    """Whether a joint of the plant (with a friction block) can stick (``can_stick``): with
    viscous friction alone plant.stick_slip has nothing to decide, and is not called."""
    for k in range(int(p[H_NQ])):
        if can_stick(p, row(p, k)):
            return True
    return False
