"""State derivative of any plant: the one place that dispatches on the model id.

    x = [q, qd, i],  dx/dt = [qd, qdd, di/dt]

The mechanism gives M and bias, the drives (plant.motor) add rotor inertia,
motor damping and the drive force, a chain's joint friction (plant.friction) its sliding
joints' friction torque, and the model's solver turns them into
accelerations: the jam-restructured solve for serial chains, the constrained
solve for the 3RRR; a user's chain gives M and bias through its mechanism
(plant.interface) and takes the serial chains' solve. The 3-link arm (the
paper's) takes an unrolled fast path in any jam state, serial_arm.accel3, which
tests/test_fast_paths.py checks against the generic path (actuator faults included).
"""
import numpy as np
from hilrig.plant import friction, jam, motor, rrr3, serial_arm
from hilrig.jit.kernel import kernel
from hilrig.plant.family import CHAINS, compiled
from hilrig.plant.layout import (
    DRIVE_VOLTAGE_FULL,
    H_BODY,
    H_DRIVE,
    H_FRICTION,
    H_MODEL,
    H_NQ,
    MODEL_CHAIN,
    MODEL_RRR3,
    MODEL_SERIAL_ARM,
)


@kernel
def is_arm3(p):
    """True for a 3-link serial arm without current states or joint friction: the
    unrolled path's domain."""
    return int(p[H_MODEL]) == MODEL_SERIAL_ARM and int(p[H_NQ]) == 3 \
        and int(p[H_DRIVE]) != DRIVE_VOLTAGE_FULL and p[H_FRICTION] == 0.0


@kernel
def chain_mechanism(p, q, qd, mass, bias, mech):
    """M(q) and bias of a user's chain from its mechanism; returns its potential energy (J),
    or NaN when the plant has no mechanism (mech None, or not a chain)."""
    if mech is not None:
        if int(p[H_MODEL]) == MODEL_CHAIN:
            return mech(q, qd, p[int(p[H_BODY]):], mass, bias)
    return np.nan


@kernel
def derivative(p, jams, t, x, u, dx, work, mech=None):
    """dx/dt at time t (s) for input u (N m or V). ``work``: plant.layout.work_shape(nq).
    ``mech``: what the kernel is compiled for (plant.family: a user's chain's mechanism,
    a built-in family, or None for every built-in model; numba compiles the chain branch
    out where it is not a mechanism).

    Returns a health figure: the smallest Cholesky pivot of the free joints'
    mass matrix (serial chains, a user's chain) or the rank of Phi M^-1 Phi^T (3RRR);
    <= 0 means the accelerations are invalid.
    """
    nq = int(p[H_NQ])
    model = int(p[H_MODEL])
    if is_arm3(p):
        for k in range(3):
            dx[k] = x[3 + k]
        return compiled(mech, MODEL_SERIAL_ARM, serial_arm.accel3, -1.0, p, x, u, dx[3:6], jams)
    mass = work[:nq, :nq]
    bias = work[nq, :nq]
    force = work[nq + 1, :nq]
    scratch = work[nq + 2:]
    q = x[:nq]
    qd = x[nq:2 * nq]
    qdd = dx[nq:2 * nq]
    dcurrent = dx[2 * nq:]
    if model == MODEL_SERIAL_ARM:
        compiled(mech, MODEL_SERIAL_ARM, serial_arm.mass_and_bias, None, p, q, qd, mass, bias,
                 scratch)
    elif model == MODEL_RRR3:
        compiled(mech, MODEL_RRR3, rrr3.mass_and_bias, None, p, q, qd, mass, bias)
    elif np.isnan(compiled(mech, MODEL_CHAIN, chain_mechanism, np.nan, p, q, qd, mass, bias,
                           mech)):
        return -1.0     # a chain without its mechanism, or one that gave NaN
    motor.apply_drive(p, jams, x, u, mass, bias, force, dcurrent)
    if model == MODEL_SERIAL_ARM or model == MODEL_CHAIN:
        if p[H_FRICTION] != 0.0:
            friction.add_friction(p, jams, qd, bias)
        health = compiled(mech, CHAINS, jam.restructured_accel, -1.0, mass, bias, force, jams,
                          qdd, scratch)
    elif model == MODEL_RRR3:
        health = float(compiled(mech, MODEL_RRR3, rrr3.constrained_accel, -1.0, p, q, qd, mass,
                                bias, force, qdd, scratch))
    else:
        health = -1.0
    for k in range(nq):
        dx[k] = qd[k]
    return health
