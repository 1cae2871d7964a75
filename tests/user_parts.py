"""A user's parts with the mistakes the conformance checks and the config's size check must
catch (tests/test_conformance.py, tests/test_law_sizes.py): a planar two-link arm as a
chain, right and with a halved Coriolis term or a damping term no key declares; laws that
are NaN away from the one measurement the old check tried, NaN without currents, that
declare their sizes, that read past their state, and that command NaN after 0.1 s.

The arm hangs at q = 0 (angles from straight down); params = [m1, m2 (kg), l1 (m), lc1,
lc2 (m, centres of mass), I1, I2 (kg m^2, about the centres), g (m/s^2), damping
(N m s/rad)]. With a = I1 + I2 + m1 lc1^2 + m2 (l1^2 + lc2^2), b = m2 l1 lc2,
d = I2 + m2 lc2^2:

    M(q) = [[a + 2 b cos q2, d + b cos q2], [d + b cos q2, d]]
    c(q, qd) = [-b sin q2 (2 qd1 qd2 + qd2^2), b sin q2 qd1^2]
    V(q) = -(m1 lc1 + m2 l1) g cos q1 - m2 lc2 g cos(q1 + q2)
"""
import math

import numpy as np
from hilrig.controllers.interface import declare_sizes
from hilrig.plant.interface import ChainModel
from hilrig.schema import Key
from numba import njit

M1, M2, L1, LC1, LC2, I1, I2, GRAVITY, DAMPING = range(9)


@njit
def _arm(q, qd, params, mass, bias, coriolis, hidden_damping):
    """The arm's M(q) and bias with the Coriolis and centrifugal terms scaled by
    ``coriolis`` and a damping ``hidden_damping`` (N m s/rad) of no key; returns V (J)."""
    m1, m2, l1, lc1, lc2 = params[M1], params[M2], params[L1], params[LC1], params[LC2]
    g = params[GRAVITY]
    a = params[I1] + params[I2] + m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2)
    b = m2 * l1 * lc2
    d = params[I2] + m2 * lc2 * lc2
    c2, s2 = math.cos(q[1]), math.sin(q[1])
    mass[0, 0] = a + 2.0 * b * c2
    mass[0, 1] = d + b * c2
    mass[1, 0] = d + b * c2
    mass[1, 1] = d
    h = coriolis * b * s2
    g1 = (m1 * lc1 + m2 * l1) * g * math.sin(q[0]) + m2 * lc2 * g * math.sin(q[0] + q[1])
    g2 = m2 * lc2 * g * math.sin(q[0] + q[1])
    damping = params[DAMPING] + hidden_damping
    bias[0] = -h * (2.0 * qd[0] * qd[1] + qd[1] * qd[1]) + g1 + damping * qd[0]
    bias[1] = h * qd[0] * qd[0] + g2 + damping * qd[1]
    return -(m1 * lc1 + m2 * l1) * g * math.cos(q[0]) - m2 * lc2 * g * math.cos(q[0] + q[1])


@njit
def arm(q, qd, params, mass, bias):
    """The arm as derived."""
    return _arm(q, qd, params, mass, bias, 1.0, 0.0)


@njit
def halved_coriolis(q, qd, params, mass, bias):
    """The arm with half its Coriolis and centrifugal terms (a factor 2 lost in a
    derivation)."""
    return _arm(q, qd, params, mass, bias, 0.5, 0.0)


@njit
def hidden_damping(q, qd, params, mass, bias):
    """The arm with a joint friction of 0.05 N m s/rad that no key sets."""
    return _arm(q, qd, params, mass, bias, 1.0, 0.05)


@njit
def lopsided(q, qd, params, mass, bias):
    """The arm with M[1, 0] written without its cos q2 term (M not symmetric)."""
    potential = _arm(q, qd, params, mass, bias, 1.0, 0.0)
    mass[1, 0] = params[I2] + params[M2] * params[LC2] * params[LC2]
    return potential


KEYS = {"m1": Key("float", 1.0, positive=True, doc="kg"),
        "m2": Key("float", 0.8, positive=True, doc="kg"),
        "l1": Key("float", 0.5, positive=True, doc="m"),
        "lc1": Key("float", 0.25, positive=True, doc="m"),
        "lc2": Key("float", 0.2, positive=True, doc="m"),
        "i1": Key("float", 0.02, positive=True, doc="kg m^2"),
        "i2": Key("float", 0.01, positive=True, doc="kg m^2"),
        "gravity": Key("float", 9.81, minimum=0.0, doc="m/s^2"),
        "damping": Key("float", 0.0, minimum=0.0, doc="N m s/rad")}


def params(plant) -> np.ndarray:
    return np.array([plant.m1, plant.m2, plant.l1, plant.lc1, plant.lc2, plant.i1,
                     plant.i2, plant.gravity, plant.damping])


ARM = ChainModel("arm2", arm, 2, 2, KEYS, params, dissipation=("damping",))
HALVED_CORIOLIS = ChainModel("arm2_halved_coriolis", halved_coriolis, 2, 2, KEYS, params)
HIDDEN_DAMPING = ChainModel("arm2_hidden_damping", hidden_damping, 2, 2, KEYS, params)
LOPSIDED = ChainModel("arm2_lopsided", lopsided, 2, 2, KEYS, params)


# -- laws: params = [kp (N m/rad), kd (N m s/rad)] unless said -------------------------

@njit
def nan_elsewhere(t, pos, vel, cur, params, state, u):
    """A PD whose gain schedule sqrt(1 - pos^2) is NaN beyond |pos| = 1 rad (the old check
    tried pos = 0.1, 0.2, 0.3 rad only)."""
    for j in range(u.shape[0]):
        u[j] = -params[0] * pos[j] * math.sqrt(1.0 - pos[j] * pos[j]) - params[1] * vel[j]


@njit
def nan_without_currents(t, pos, vel, cur, params, state, u):
    """A PD with current feedback that never looks whether the currents were measured."""
    for j in range(u.shape[0]):
        u[j] = -params[0] * pos[j] - params[1] * vel[j] - 0.1 * cur[j]


@declare_sizes(params=lambda n: 2 + n, state=0, outputs=3)
@njit
def declared_pd(t, pos, vel, cur, params, state, u):
    """A PD to targets: params = [kp, kd, target_1 .. target_n (rad)], three joints."""
    for j in range(u.shape[0]):
        u[j] = params[0] * (params[2 + j] - pos[j]) - params[1] * vel[j]


@njit
def forgets_state(t, pos, vel, cur, params, state, u):
    """A PI whose integrators live in state[:n]: run without controller.state_size, its
    integrator slice is empty and numba raises inside the compiled loop."""
    integral = state[:u.shape[0]]
    integral[:] = integral + pos
    for j in range(u.shape[0]):
        u[j] = -params[0] * pos[j] - params[1] * vel[j] - integral[j]


@njit
def nan_after_a_tenth(t, pos, vel, cur, params, state, u):
    """A PD that commands NaN on its first joint from t = 0.1 s."""
    for j in range(u.shape[0]):
        u[j] = -params[0] * pos[j] - params[1] * vel[j]
    if t >= 0.1:
        u[0] = np.nan


@njit
def stuck_from_the_start(t, pos, vel, cur, params, state, u):
    """stuck_after_a_tenth's loop from t = 0 on: it never returns from its first call."""
    for j in range(u.shape[0]):
        u[j] = params[0] * (params[2] - pos[j]) - params[1] * vel[j]
    while t >= 0.0 and u[0] == u[0]:
        u[0] += 1.0


@njit
def stuck_after_a_tenth(t, pos, vel, cur, params, state, u):
    """A PD to params[2] (rad, every joint) that never returns from t = 0.1 s on (a loop
    whose exit it never reaches: u[0] counts up by 1 and stays finite)."""
    for j in range(u.shape[0]):
        u[j] = params[0] * (params[2] - pos[j]) - params[1] * vel[j]
    while t >= 0.1 and u[0] == u[0]:
        u[0] += 1.0
