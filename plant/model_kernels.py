"""The plant's own rigid-body model, callable from a compiled control law (docs/PLUGINS.md,
"The plant's model in your law").

A law that sets ``controller.with_model = true`` gets the plant's **model block** appended
to its params: ``params[k:]``, k = len(controller.params). Inside its njit code it passes
that block to these kernels, which read nothing else and allocate nothing (their scratch
is on their own stack frame; the outputs are the caller's arrays, e.g. views of the law's
``state`` through ``hilrig.plant.packed.matrix_view``)::

    dof(model) -> n                          the model's joints
    mass_matrix(model, q, mass)              M(q), n x n (kg m^2, kg m, kg)
    bias(model, q, qd, out)                  c(q, qd) + g(q) + D qd, n (N m, N)
    mass_and_bias(model, q, qd, mass, out)   both in one pass
    inverse_dynamics(model, q, qd, qdd, out) M(q) qdd + bias: the joint forces (N m, N)
                                             that give the mechanism qdd (motors excluded)
    tip_pose(model, q, rotation, position)   the tip frame in the base frame: rotation
                                             (3 x 3, its axes as columns), origin (3, m)
    tip_jacobian(model, q, jacobian)         6 x n, [v; w] = J qd: v the tip origin's
                                             velocity (m/s), w the angular velocity
                                             (rad/s), both in the base frame

q, qd, qdd are the plant's coordinates (rad or m, base to tip); the built-in controllers'
computed-torque feed-forward calls the same kernels. The model is the plant's own
(its params at the config's values; motors, jams and faults are not in it), for:

- a URDF arm (plant.model = "urdf", docs/URDF.md): the tip is ``plant.tip_link``'s frame;
- paper 000's planar serial arm (plant.model = "serial_arm", plant/serial_arm.py): the
  base frame has x down (along gravity), y horizontal in the arm's plane, z = x X y;
  the tip frame sits at the end of the last link, its x along the link.

The 3RRR and the flexible plants have no such block (``block`` refuses in one line); a
kernel given a block of another kind (``KIND_NONE``) writes NaN.

Layout of a block: ``[kind, the kind's params...]``: KIND_URDF, then the URDF chain's
params (plant.urdf.dynamics.block); KIND_SERIAL_ARM, then the torque-driven serial
arm's plant params (plant.layout's header, its model block).
"""
from __future__ import annotations

import math

import numpy as np
from hilrig.errors import ConfigError
from hilrig.jit.kernel import kernel
from hilrig.plant import serial_arm
from hilrig.plant.layout import H_BODY, H_NQ
from hilrig.plant.packed import matrix_view
from hilrig.plant.serial_arm import _offsets
from hilrig.plant.urdf import dynamics, kinematics
from hilrig.plant.urdf.dynamics import SCRATCH, _stack

MASS_SCRATCH = SCRATCH + 2 * dynamics.MAX_JOINTS   # mass_matrix's: a zero qd and a bias too

KIND_NONE = 0.0
KIND_URDF = 1.0
KIND_SERIAL_ARM = 2.0


def block(cfg) -> np.ndarray:
    """The model block of a resolved config's plant (module docstring); ConfigError in one
    line when its model has none."""
    from hilrig.plant.factory import plant_model

    model = plant_model(cfg.plant.model)
    if model.model_block is None:
        raise ConfigError(f"plant.model = {cfg.plant.model!r} has no rigid-body model for "
                          "controllers (plant.model_kernels: the URDF arm and the serial arm "
                          "have one)")
    return model.model_block(cfg)


@kernel
def dof(model):
    """The number of joints n of the model block (0 for KIND_NONE)."""
    kind = model[0]
    if kind == KIND_URDF:
        return int(model[1 + dynamics.P_N])
    if kind == KIND_SERIAL_ARM:
        return int(model[1 + H_NQ])
    return 0


@kernel
def _nan_vector(out):
    for i in range(out.shape[0]):
        out[i] = math.nan


@kernel
def _nan_matrix(out):
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = math.nan


@kernel
def mass_and_bias(model, q, qd, mass, bias):
    """M(q) into ``mass`` (n x n) and c(q, qd) + g(q) + D qd into ``bias`` (n)."""
    s = _stack(SCRATCH)
    kind = model[0]
    if kind == KIND_URDF:
        p = model[1:]
        dynamics.mass_and_bias(p, q, qd, mass, bias, s)
        _add_damping(p, qd, bias)
    elif kind == KIND_SERIAL_ARM:
        p = model[1:]
        serial_arm.mass_and_bias(p, q, qd, mass, bias, matrix_view(s, 0, 3, int(p[H_NQ])))
    else:
        _nan_matrix(mass)
        _nan_vector(bias)


@kernel
def _add_damping(p, qd, out):
    """out += D qd: the URDF chain's joint damping (plant.urdf.dynamics.J_DAMPING)."""
    for k in range(int(p[dynamics.P_N])):
        out[k] += p[dynamics.P_JOINTS + dynamics.JOINT_STRIDE * k + dynamics.J_DAMPING] * qd[k]


@kernel
def mass_matrix(model, q, mass):
    """M(q) into ``mass`` (n x n)."""
    s = _stack(MASS_SCRATCH)
    kind = model[0]
    if kind == KIND_URDF or kind == KIND_SERIAL_ARM:
        n = dof(model)
        rest = s[:n]                    # the kernels want a bias and qd: 0
        for k in range(n):
            rest[k] = 0.0
        p = model[1:]
        if kind == KIND_URDF:
            dynamics.mass_and_bias(p, q, rest, mass, s[n:2 * n], s[2 * n:])
        else:
            serial_arm.mass_and_bias(p, q, rest, mass, s[4 * n:5 * n],
                                     matrix_view(s, n, 3, n))
    else:
        _nan_matrix(mass)


@kernel
def bias(model, q, qd, out):
    """c(q, qd) + g(q) + D qd into ``out`` (n): the joint forces that hold the mechanism
    at qdd = 0."""
    inverse_dynamics(model, q, qd, qd[:0], out)


@kernel
def inverse_dynamics(model, q, qd, qdd, out):
    """M(q) qdd + c(q, qd) + g(q) + D qd into ``out`` (n); an empty ``qdd`` stands for 0."""
    s = _stack(SCRATCH)
    kind = model[0]
    if kind == KIND_URDF:
        p = model[1:]
        dynamics.inverse_dynamics(p, q, qd, qdd, out, s)
        _add_damping(p, qd, out)
    elif kind == KIND_SERIAL_ARM:
        p = model[1:]
        n = int(p[H_NQ])
        mass = matrix_view(s, 3 * n, n, n)
        serial_arm.mass_and_bias(p, q, qd, mass, out, matrix_view(s, 0, 3, n))
        if len(qdd) > 0:
            for j in range(n):
                acc = out[j]
                for k in range(n):
                    acc += mass[j, k] * qdd[k]
                out[j] = acc
    else:
        _nan_vector(out)


@kernel
def tip_pose(model, q, rotation, position):
    """The tip frame at q: ``rotation`` (3 x 3) and ``position`` (3, m), base frame."""
    kind = model[0]
    if kind == KIND_URDF:
        s = _stack(SCRATCH)
        kinematics.tip_pose(model[1:], q, rotation, position, s)
    elif kind == KIND_SERIAL_ARM:
        p = model[1:]
        n = int(p[H_NQ])
        length = int(p[H_BODY]) + _offsets(n)[4]
        phi = x = y = 0.0
        for j in range(n):
            phi += q[j]
            x += p[length + j] * math.cos(phi)
            y += p[length + j] * math.sin(phi)
        c, sn = math.cos(phi), math.sin(phi)
        rotation[0, 0], rotation[0, 1], rotation[0, 2] = c, -sn, 0.0
        rotation[1, 0], rotation[1, 1], rotation[1, 2] = sn, c, 0.0
        rotation[2, 0], rotation[2, 1], rotation[2, 2] = 0.0, 0.0, 1.0
        position[0], position[1], position[2] = x, y, 0.0
    else:
        _nan_matrix(rotation)
        _nan_vector(position)


@kernel
def tip_jacobian(model, q, jacobian):
    """The tip's Jacobian at q into ``jacobian`` (6 x n, [v; w], base frame)."""
    kind = model[0]
    if kind == KIND_URDF:
        s = _stack(SCRATCH)
        kinematics.tip_jacobian(model[1:], q, jacobian, s)
    elif kind == KIND_SERIAL_ARM:
        p = model[1:]
        n = int(p[H_NQ])
        length = int(p[H_BODY]) + _offsets(n)[4]
        x = y = phi = 0.0
        for j in range(n):              # the tip
            phi += q[j]
            x += p[length + j] * math.cos(phi)
            y += p[length + j] * math.sin(phi)
        px = py = phi = 0.0
        for k in range(n):              # joint k at (px, py): v = z x (tip - joint)
            jacobian[0, k] = -(y - py)
            jacobian[1, k] = x - px
            for i in range(2, 5):
                jacobian[i, k] = 0.0
            jacobian[5, k] = 1.0
            phi += q[k]
            px += p[length + k] * math.cos(phi)
            py += p[length + k] * math.sin(phi)
    else:
        _nan_matrix(jacobian)
