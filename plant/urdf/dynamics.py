"""The dynamics of a URDF chain (plant.urdf.parse) as numba kernels over its flat params
block: forward kinematics, the recursive Newton-Euler algorithm (inverse dynamics and the
bias), the composite-rigid-body algorithm (the mass matrix) and the chain's mechanism
(plant.interface), which the loops call through a function pointer like any chain's.

Every spatial quantity is in the base frame (base_link, fixed to the world) about its
origin, so that the passes add vectors without transforming them (Featherstone's
"spatial vectors in a fixed frame"): a motion m = (w, v) (rad/s, m/s of the body point at
the origin), a force f = (n, F) (N m about the origin, N), a body's inertia (mass kg,
first moment h = m c kg m, rotational inertia J about the origin kg m^2), so that its
momentum is I m = (J w + h x v, m v - h x w). Joint k's motion subspace is
S_k = (z, p x z) for a revolute joint about the unit axis z through the point p, (0, z) for
a prismatic one.

    kinematics: body poses, S_k and the bodies' inertias at q; the potential energy
    rnea:       tau = M(q) qdd + c(q, qd) + g(q)      (v_k = v_k-1 + S_k qd_k, a_0 = -gravity)
    crba:       M(q)_jk = S_j . (I^c_k S_k), j <= k, I^c_k the bodies k..n-1 together

The kernels never allocate: they take a caller's ``scratch`` (``scratch_size(n)`` floats);
the mechanism takes its scratch on its own stack frame (``_stack``), sized for
MAX_JOINTS, so that it is re-entrant and needs nothing from the loops.
"""
import math

import numpy as np
from hilrig.jit.kernel import kernel
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

MAX_JOINTS = 32         # the mechanism's scratch is sized for this many moving joints

# params block (plant.interface: the chain's own params, ``block``)
P_N = 0                 # number of moving joints n
P_GRAVITY = 1           # gravity in the base frame (3), m/s^2
P_JOINTS = 4            # then n rows of JOINT_STRIDE:
J_PRISMATIC = 0         # 1.0 prismatic, 0.0 revolute or continuous
J_AXIS = 1              # unit axis in the joint (= child body) frame (3)
J_ROTATION = 4          # joint frame in the previous body's frame: rotation (3x3, row-major)
J_ORIGIN = 13           # ... and origin (3), m
J_MASS = 16             # body mass, kg
J_COM = 17              # centre of mass in the body frame (3), m
J_INERTIA = 20          # inertia about the centre of mass, body frame (3x3, row-major), kg m^2
J_DAMPING = 29          # viscous joint damping, N m s/rad (N s/m)
JOINT_STRIDE = 30
# after the n joint rows: tip_link's frame in the last body's frame, rotation (3x3,
# row-major) then origin (3), m (plant.urdf.kinematics)
TIP_SIZE = 12

# scratch: per joint S (6), inertia (m, h 3, J 9: 13), force (6); then running values
S_MOTION = 0
S_INERTIA = 6
S_FORCE = 19
BODY_STRIDE = 25


def scratch_size(n: int) -> int:
    """Floats of scratch the kernels need for n joints."""
    return BODY_STRIDE * n + 24


def block(chain, gravity, damping) -> np.ndarray:
    """The params block of a parse.UrdfChain with ``gravity`` (3, m/s^2, base frame) and the
    joints' ``damping`` (n)."""
    n = chain.n
    out = np.zeros(P_JOINTS + JOINT_STRIDE * n + TIP_SIZE)
    out[P_N] = n
    out[P_GRAVITY:P_GRAVITY + 3] = gravity
    for k in range(n):
        row = out[P_JOINTS + JOINT_STRIDE * k:P_JOINTS + JOINT_STRIDE * (k + 1)]
        row[J_PRISMATIC] = 1.0 if chain.kinds[k] == "prismatic" else 0.0
        row[J_AXIS:J_AXIS + 3] = chain.axis[k]
        row[J_ROTATION:J_ROTATION + 9] = chain.rotation[k].ravel()
        row[J_ORIGIN:J_ORIGIN + 3] = chain.origin[k]
        row[J_MASS] = chain.mass[k]
        row[J_COM:J_COM + 3] = chain.com[k]
        row[J_INERTIA:J_INERTIA + 9] = chain.inertia[k].ravel()
        row[J_DAMPING] = damping[k]
    tip = P_JOINTS + JOINT_STRIDE * n
    out[tip:tip + 9] = chain.tip_frame[:3, :3].ravel()
    out[tip + 9:tip + 12] = chain.tip_frame[:3, 3]
    return out


@kernel
def kinematics(p, q, s):
    """At coordinates q: S_k and each body's inertia in the base frame into the scratch
    ``s`` (module docstring); returns the potential energy of gravity (J). The last 12
    floats of the scratch end with the tip body's pose: rotation (row-major), origin."""
    n = int(p[P_N])
    pose = BODY_STRIDE * n        # running pose: R (9, row-major), origin (3)
    joint = pose + 12             # the joint frame (R, origin)
    for i in range(9):
        s[pose + i] = 1.0 if i % 4 == 0 else 0.0
    for i in range(3):
        s[pose + 9 + i] = 0.0
    gx, gy, gz = p[P_GRAVITY], p[P_GRAVITY + 1], p[P_GRAVITY + 2]
    potential = 0.0
    for k in range(n):
        r = P_JOINTS + JOINT_STRIDE * k
        b = BODY_STRIDE * k
        # joint frame = pose * (R0, r0)
        for i in range(3):
            acc = s[pose + 9 + i]
            for j in range(3):
                acc += s[pose + 3 * i + j] * p[r + J_ORIGIN + j]
                v = 0.0
                for m in range(3):
                    v += s[pose + 3 * i + m] * p[r + J_ROTATION + 3 * m + j]
                s[joint + 3 * i + j] = v
            s[joint + 9 + i] = acc
        ax, ay, az = p[r + J_AXIS], p[r + J_AXIS + 1], p[r + J_AXIS + 2]
        zx = s[joint] * ax + s[joint + 1] * ay + s[joint + 2] * az
        zy = s[joint + 3] * ax + s[joint + 4] * ay + s[joint + 5] * az
        zz = s[joint + 6] * ax + s[joint + 7] * ay + s[joint + 8] * az
        px, py, pz = s[joint + 9], s[joint + 10], s[joint + 11]
        if p[r + J_PRISMATIC] != 0.0:
            for i in range(9):
                s[pose + i] = s[joint + i]
            s[pose + 9] = px + zx * q[k]
            s[pose + 10] = py + zy * q[k]
            s[pose + 11] = pz + zz * q[k]
            s[b + S_MOTION], s[b + S_MOTION + 1], s[b + S_MOTION + 2] = 0.0, 0.0, 0.0
            s[b + S_MOTION + 3], s[b + S_MOTION + 4], s[b + S_MOTION + 5] = zx, zy, zz
        else:
            # pose = joint frame * Rot(axis, q) (Rodrigues: c I + sn [a]x + (1 - c) a a^T)
            c, sn = math.cos(q[k]), math.sin(q[k])
            t = 1.0 - c
            r00, r01, r02 = c + t * ax * ax, t * ax * ay - sn * az, t * ax * az + sn * ay
            r10, r11, r12 = t * ax * ay + sn * az, c + t * ay * ay, t * ay * az - sn * ax
            r20, r21, r22 = t * ax * az - sn * ay, t * ay * az + sn * ax, c + t * az * az
            for i in range(3):
                a0, a1, a2 = s[joint + 3 * i], s[joint + 3 * i + 1], s[joint + 3 * i + 2]
                s[pose + 3 * i] = a0 * r00 + a1 * r10 + a2 * r20
                s[pose + 3 * i + 1] = a0 * r01 + a1 * r11 + a2 * r21
                s[pose + 3 * i + 2] = a0 * r02 + a1 * r12 + a2 * r22
            s[pose + 9], s[pose + 10], s[pose + 11] = px, py, pz
            s[b + S_MOTION], s[b + S_MOTION + 1], s[b + S_MOTION + 2] = zx, zy, zz
            s[b + S_MOTION + 3] = py * zz - pz * zy
            s[b + S_MOTION + 4] = pz * zx - px * zz
            s[b + S_MOTION + 5] = px * zy - py * zx
        # the body's inertia in the base frame, about its origin
        m = p[r + J_MASS]
        cx, cy, cz = p[r + J_COM], p[r + J_COM + 1], p[r + J_COM + 2]
        wx = s[pose + 9] + s[pose] * cx + s[pose + 1] * cy + s[pose + 2] * cz
        wy = s[pose + 10] + s[pose + 3] * cx + s[pose + 4] * cy + s[pose + 5] * cz
        wz = s[pose + 11] + s[pose + 6] * cx + s[pose + 7] * cy + s[pose + 8] * cz
        potential -= m * (gx * wx + gy * wy + gz * wz)
        o = b + S_INERTIA
        s[o] = m
        s[o + 1], s[o + 2], s[o + 3] = m * wx, m * wy, m * wz
        cc = wx * wx + wy * wy + wz * wz
        for i in range(3):
            for j in range(3):
                acc = 0.0           # (R Ic R^T)_ij
                for u in range(3):
                    ru = 0.0
                    for w in range(3):
                        ru += p[r + J_INERTIA + 3 * u + w] * s[pose + 3 * j + w]
                    acc += s[pose + 3 * i + u] * ru
                s[o + 4 + 3 * i + j] = acc
        s[o + 4] += m * (cc - wx * wx)
        s[o + 8] += m * (cc - wy * wy)
        s[o + 12] += m * (cc - wz * wz)
        s[o + 5] -= m * wx * wy
        s[o + 7] -= m * wx * wy
        s[o + 6] -= m * wx * wz
        s[o + 10] -= m * wx * wz
        s[o + 9] -= m * wy * wz
        s[o + 11] -= m * wy * wz
    return potential


@kernel
def _momentum(s, o, w0, w1, w2, v0, v1, v2):
    """I m of the inertia at s[o:] (m, h, J) and the motion (w, v): (n, F) as a tuple."""
    m, h0, h1, h2 = s[o], s[o + 1], s[o + 2], s[o + 3]
    n0 = s[o + 4] * w0 + s[o + 5] * w1 + s[o + 6] * w2 + h1 * v2 - h2 * v1
    n1 = s[o + 7] * w0 + s[o + 8] * w1 + s[o + 9] * w2 + h2 * v0 - h0 * v2
    n2 = s[o + 10] * w0 + s[o + 11] * w1 + s[o + 12] * w2 + h0 * v1 - h1 * v0
    f0 = m * v0 - (h1 * w2 - h2 * w1)
    f1 = m * v1 - (h2 * w0 - h0 * w2)
    f2 = m * v2 - (h0 * w1 - h1 * w0)
    return n0, n1, n2, f0, f1, f2


@kernel
def rnea(p, qd, qdd, tau, s):
    """Inverse dynamics tau = M(q) qdd + c(q, qd) + g(q) (N m, N), without damping, from the
    scratch ``kinematics`` filled at q; an empty ``qdd`` stands for zero (tau is the bias)."""
    n = int(p[P_N])
    accelerating = len(qdd) > 0
    w0 = w1 = w2 = v0 = v1 = v2 = 0.0        # the body's spatial velocity
    a0 = a1 = a2 = 0.0                         # its spatial acceleration: a_0 = -gravity
    a3, a4, a5 = -p[P_GRAVITY], -p[P_GRAVITY + 1], -p[P_GRAVITY + 2]
    for k in range(n):
        b = BODY_STRIDE * k
        m0, m1, m2 = s[b], s[b + 1], s[b + 2]
        m3, m4, m5 = s[b + 3], s[b + 4], s[b + 5]
        rate = qd[k]
        w0 += m0 * rate
        w1 += m1 * rate
        w2 += m2 * rate
        v0 += m3 * rate
        v1 += m4 * rate
        v2 += m5 * rate
        # a += S qdd + v x (S qd)
        acc = qdd[k] if accelerating else 0.0
        e0, e1, e2 = m0 * rate, m1 * rate, m2 * rate
        e3, e4, e5 = m3 * rate, m4 * rate, m5 * rate
        a0 += m0 * acc + w1 * e2 - w2 * e1
        a1 += m1 * acc + w2 * e0 - w0 * e2
        a2 += m2 * acc + w0 * e1 - w1 * e0
        a3 += m3 * acc + w1 * e5 - w2 * e4 + v1 * e2 - v2 * e1
        a4 += m4 * acc + w2 * e3 - w0 * e5 + v2 * e0 - v0 * e2
        a5 += m5 * acc + w0 * e4 - w1 * e3 + v0 * e1 - v1 * e0
        # f = I a + v x* (I v)
        n0, n1, n2, f0, f1, f2 = _momentum(s, b + S_INERTIA, a0, a1, a2, a3, a4, a5)
        h0, h1, h2, l0, l1, l2 = _momentum(s, b + S_INERTIA, w0, w1, w2, v0, v1, v2)
        o = b + S_FORCE
        s[o] = n0 + w1 * h2 - w2 * h1 + v1 * l2 - v2 * l1
        s[o + 1] = n1 + w2 * h0 - w0 * h2 + v2 * l0 - v0 * l2
        s[o + 2] = n2 + w0 * h1 - w1 * h0 + v0 * l1 - v1 * l0
        s[o + 3] = f0 + w1 * l2 - w2 * l1
        s[o + 4] = f1 + w2 * l0 - w0 * l2
        s[o + 5] = f2 + w0 * l1 - w1 * l0
    f0 = f1 = f2 = f3 = f4 = f5 = 0.0          # the force the subtree below passes on
    for k in range(n - 1, -1, -1):
        b = BODY_STRIDE * k
        o = b + S_FORCE
        f0 += s[o]
        f1 += s[o + 1]
        f2 += s[o + 2]
        f3 += s[o + 3]
        f4 += s[o + 4]
        f5 += s[o + 5]
        tau[k] = s[b] * f0 + s[b + 1] * f1 + s[b + 2] * f2 + s[b + 3] * f3 \
            + s[b + 4] * f4 + s[b + 5] * f5


@kernel
def crba(p, mass, s):
    """The mass matrix M(q) (kg m^2, kg m, kg) from the scratch ``kinematics`` filled at q.
    Adds the bodies' inertias into composites, tip to base: s's inertias become I^c_k."""
    n = int(p[P_N])
    for k in range(n - 1, -1, -1):
        b = BODY_STRIDE * k
        o = b + S_INERTIA
        if k < n - 1:
            below = o + BODY_STRIDE
            for i in range(13):
                s[o + i] += s[below + i]
        n0, n1, n2, f0, f1, f2 = _momentum(s, o, s[b], s[b + 1], s[b + 2], s[b + 3],
                                           s[b + 4], s[b + 5])
        for j in range(k + 1):
            c = BODY_STRIDE * j
            value = s[c] * n0 + s[c + 1] * n1 + s[c + 2] * n2 + s[c + 3] * f0 \
                + s[c + 4] * f1 + s[c + 5] * f2
            mass[j, k] = value
            mass[k, j] = value


@intrinsic(prefer_literal=True)
def _stack(typingctx, size):
    """An array of ``size`` float64 (a literal int) on the calling kernel's stack frame:
    scratch that lives for one call, with no allocation, no reference count and no shared
    state (numba's carray would do, but cannot return an array in a kernel without its
    runtime)."""
    if not isinstance(size, types.IntegerLiteral):
        return None
    array_type = types.Array(types.float64, 1, "C")

    def codegen(context, builder, sig, args):
        n = size.literal_value
        data = cgutils.alloca_once(builder, ir.DoubleType(), size=n)
        array = context.make_array(array_type)(context, builder)
        intp = context.get_value_type(types.intp)
        context.populate_array(array, data=data, shape=[ir.Constant(intp, n)],
                               strides=[ir.Constant(intp, 8)], itemsize=ir.Constant(intp, 8),
                               meminfo=None)
        return array._getvalue()
    return array_type(size), codegen


SCRATCH = BODY_STRIDE * MAX_JOINTS + 24


@kernel
def mechanism(q, qd, p, mass, bias):
    """The URDF chain's mechanism (plant.interface.MECHANISM_SIGNATURE): M(q) into ``mass``,
    c(q, qd) + g(q) + damping qd into ``bias``; returns the potential energy (J)."""
    s = _stack(SCRATCH)
    n = int(p[P_N])
    potential = kinematics(p, q, s)
    rnea(p, qd, qd[:0], bias, s)
    crba(p, mass, s)
    for k in range(n):
        bias[k] += p[P_JOINTS + JOINT_STRIDE * k + J_DAMPING] * qd[k]
    return potential
