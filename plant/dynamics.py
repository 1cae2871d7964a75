"""State derivative of any plant: the one place that dispatches on the model id.

    x = [q, qd, i],  dx/dt = [qd, qdd, di/dt]

The mechanism gives M and bias, the drives (plant.motor) add rotor inertia,
motor damping and the drive force, and the model's solver turns them into
accelerations: the jam-restructured solve for serial chains, the constrained
solve for the 3RRR. A new model is one more branch here. The healthy 3-link arm
(the paper's) takes an unrolled fast path, serial_arm.accel3, which
tests/test_serial_arm.py checks against the generic path.
"""
from plant import jam, motor, rrr3, serial_arm
from plant.kernel import kernel
from plant.layout import (DRIVE_VOLTAGE_FULL, H_DRIVE, H_MODEL, H_NQ, HEALTHY, JAM_PHASE,
                          MODEL_RRR3, MODEL_SERIAL_ARM)


@kernel
def derivative(p, jams, t, x, u, dx, work):
    """dx/dt at time t (s) for input u (N m or V). ``work``: plant.layout.work_shape(nq).

    Returns a health figure: the smallest Cholesky pivot of the free joints'
    mass matrix (serial chains) or the rank of Phi M^-1 Phi^T (3RRR); <= 0 means
    the accelerations are invalid.
    """
    nq = int(p[H_NQ])
    model = int(p[H_MODEL])
    if model == MODEL_SERIAL_ARM and nq == 3 and int(p[H_DRIVE]) != DRIVE_VOLTAGE_FULL \
            and jams[0, JAM_PHASE] == HEALTHY and jams[1, JAM_PHASE] == HEALTHY \
            and jams[2, JAM_PHASE] == HEALTHY:
        for k in range(3):
            dx[k] = x[3 + k]
        return serial_arm.accel3(p, x, u, dx[3:6])
    mass = work[:nq, :nq]
    bias = work[nq, :nq]
    force = work[nq + 1, :nq]
    scratch = work[nq + 2:]
    q = x[:nq]
    qd = x[nq:2 * nq]
    qdd = dx[nq:2 * nq]
    dcurrent = dx[2 * nq:]
    if model == MODEL_SERIAL_ARM:
        serial_arm.mass_and_bias(p, q, qd, mass, bias, scratch)
    elif model == MODEL_RRR3:
        rrr3.mass_and_bias(p, q, qd, mass, bias)
    motor.apply_drive(p, x, u, mass, bias, force, dcurrent)
    if model == MODEL_SERIAL_ARM:
        health = jam.restructured_accel(mass, bias, force, jams, qdd, scratch)
    elif model == MODEL_RRR3:
        health = float(rrr3.constrained_accel(p, q, qd, mass, bias, force, qdd, scratch))
    else:
        health = -1.0
    for k in range(nq):
        dx[k] = qd[k]
    return health
