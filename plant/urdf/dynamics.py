"""The dynamics of a URDF chain (plant.urdf.parse) as numba kernels over its flat params
block: forward kinematics, the recursive Newton-Euler algorithm (inverse dynamics and the
bias), the composite-rigid-body algorithm (the mass matrix) and the chain's mechanism
(plant.interface), which the loops call through a function pointer like any chain's.

In forward and mass_and_bias every spatial quantity is in the base frame (base_link,
fixed to the world) about its origin, so that the passes add vectors without transforming
them (Featherstone's "spatial vectors in a fixed frame"): a motion m = (w, v) (rad/s, m/s
of the body point at the origin), a force f = (n, F) (N m about the origin, N), a body's
inertia (mass kg, first moment h = m c kg m, rotational inertia J about the origin
kg m^2, symmetric), so that its momentum is I m = (J w + h x v, m v - h x w). Joint k's
motion subspace is S_k = (z, p x z) for a revolute joint about the unit axis z through the
point p, (0, z) for a prismatic one.

    forward:          one pass base to tip: each body's pose, S_k and inertia I_k, its
                      velocity v_k = v_k-1 + S_k qd_k, acceleration a_k = a_k-1
                      + v_k x S_k qd_k (a_0 = -gravity) and force f_k = I_k a_k
                      + v_k x* I_k v_k; the potential energy
    mass_and_bias:    then tip to base the bias c(q, qd) + g(q) = S_k . sum_{j >= k} f_j
                      (RNEA) and, in the same pass, the composite inertias
                      I^c_k = sum_{j >= k} I_j and M(q)_jk = S_j . (I^c_k S_k), j <= k (CRBA)
    inverse_dynamics: tau = M(q) qdd + c(q, qd) + g(q) by RNEA in the bodies' own frames
                      (no mass matrix, no inertia rotated: what the feed-forward law calls)

Each joint's axis is z of its body's frame in the block (``block`` re-expresses every body
in such a frame, once), so a revolute joint's rotation mixes two columns of the pose.
The kernels never allocate: they take a caller's ``scratch`` (``scratch_size(n)`` floats);
the mechanism takes its scratch on its own stack frame (``_stack``), sized for
MAX_JOINTS, so that it is re-entrant and needs nothing from the loops.
"""
import math
from functools import lru_cache

import numpy as np
from hilrig.jit.kernel import fused_helper, inline_kernel, kernel
from hilrig.plant.trig import sincos
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

MAX_JOINTS = 32         # the mechanism's scratch is sized for this many moving joints

# params block (plant.interface: the chain's own params, ``block``). Body k's frame here is
# the URDF's child link frame of joint k turned so that the joint's axis is its z (aligned)
P_N = 0                 # number of moving joints n
P_GRAVITY = 1           # gravity in the base frame (3), m/s^2
P_JOINTS = 4            # then n rows of JOINT_STRIDE:
J_PRISMATIC = 0         # 1.0 prismatic, 0.0 revolute or continuous
J_ROTATION = 1          # joint frame in the previous body's frame: rotation (3x3, row-major)
J_ORIGIN = 10           # ... and origin (3), m
J_MASS = 13             # body mass, kg
J_COM = 14              # centre of mass in the body frame (3), m
J_INERTIA = 17          # inertia about the centre of mass, body frame: xx, yy, zz, xy, xz,
                        # yz, kg m^2
J_DAMPING = 23          # viscous joint damping, N m s/rad (N s/m)
JOINT_STRIDE = 24
# after the n joint rows: tip_link's frame in the last body's frame, rotation (3x3,
# row-major) then origin (3), m (plant.urdf.kinematics)
TIP_SIZE = 12

# scratch: per joint S (6), inertia (m, h 3, J xx yy zz xy xz yz: 10), force (6); then the
# running pose: rotation (9, row-major) and origin (3)
S_MOTION = 0
S_INERTIA = 6
S_FORCE = 16
BODY_STRIDE = 22


def scratch_size(n: int) -> int:
    """Floats of scratch the kernels need for n joints."""
    return BODY_STRIDE * n + 12


def aligning(axis: np.ndarray) -> np.ndarray:
    """A rotation Q (3 x 3) whose z column is the unit ``axis``: the identity for z, a
    signed permutation (exact) for the other coordinate axes."""
    a = np.asarray(axis, dtype=float)
    helper = np.array([1.0, 0.0, 0.0]) if abs(a[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    x = helper - (helper @ a) * a
    x /= np.linalg.norm(x)
    return np.column_stack([x, np.cross(a, x), a])


def block(chain, gravity, damping) -> np.ndarray:
    """The params block of a parse.UrdfChain with ``gravity`` (3, m/s^2, base frame) and the
    joints' ``damping`` (n) (a new array: its chain's part made once, ``_chain_block``)."""
    out = _chain_block(chain).copy()
    out[P_GRAVITY:P_GRAVITY + 3] = gravity
    out[P_JOINTS + J_DAMPING:P_JOINTS + JOINT_STRIDE * chain.n:JOINT_STRIDE] = damping
    return out


@lru_cache(maxsize=64)
def _chain_block(chain) -> np.ndarray:
    """The block of a chain without gravity and damping. Body k's frame F_k becomes
    F_k Q_k (Q_k = aligning(axis_k)): the joint's placement Q_k-1^T (R, o) Q_k, its centre
    of mass Q_k^T c, its inertia Q_k^T I Q_k and the tip frame Q_n-1^T T follow, since
    Rot(a, q) Q = Q Rot(Q^T a, q)."""
    n = chain.n
    out = np.zeros(P_JOINTS + JOINT_STRIDE * n + TIP_SIZE)
    out[P_N] = n
    before = np.eye(3)
    for k in range(n):
        turn = aligning(chain.axis[k])
        inertia = turn.T @ chain.inertia[k] @ turn
        row = out[P_JOINTS + JOINT_STRIDE * k:P_JOINTS + JOINT_STRIDE * (k + 1)]
        row[J_PRISMATIC] = 1.0 if chain.kinds[k] == "prismatic" else 0.0
        row[J_ROTATION:J_ROTATION + 9] = (before.T @ chain.rotation[k] @ turn).ravel()
        row[J_ORIGIN:J_ORIGIN + 3] = before.T @ chain.origin[k]
        row[J_MASS] = chain.mass[k]
        row[J_COM:J_COM + 3] = turn.T @ chain.com[k]
        row[J_INERTIA:J_INERTIA + 6] = (inertia[0, 0], inertia[1, 1], inertia[2, 2],
                                        inertia[0, 1], inertia[0, 2], inertia[1, 2])
        before = turn
    tip = P_JOINTS + JOINT_STRIDE * n
    out[tip:tip + 9] = (before.T @ chain.tip_frame[:3, :3]).ravel()
    out[tip + 9:tip + 12] = before.T @ chain.tip_frame[:3, 3]
    return out


@inline_kernel
def _place(p, r, angle, sn, c, r00, r01, r02, r10, r11, r12, r20, r21, r22, o0, o1, o2):
    """Body k's pose from body k-1's (rotation r, row-major, and origin o, base frame) at
    joint k's coordinate ``angle`` (rad or m; ``sn``, ``c`` its sine and cosine for a
    revolute joint), ``r`` its row in the block: the new rotation (9) and origin (3), then
    S_k (6)."""
    # the joint frame (its rotation's columns j0, j1, z) and origin x
    x0 = o0 + r00 * p[r + J_ORIGIN] + r01 * p[r + J_ORIGIN + 1] + r02 * p[r + J_ORIGIN + 2]
    x1 = o1 + r10 * p[r + J_ORIGIN] + r11 * p[r + J_ORIGIN + 1] + r12 * p[r + J_ORIGIN + 2]
    x2 = o2 + r20 * p[r + J_ORIGIN] + r21 * p[r + J_ORIGIN + 1] + r22 * p[r + J_ORIGIN + 2]
    b00, b01, b02 = p[r + J_ROTATION], p[r + J_ROTATION + 1], p[r + J_ROTATION + 2]
    b10, b11, b12 = p[r + J_ROTATION + 3], p[r + J_ROTATION + 4], p[r + J_ROTATION + 5]
    b20, b21, b22 = p[r + J_ROTATION + 6], p[r + J_ROTATION + 7], p[r + J_ROTATION + 8]
    a00 = r00 * b00 + r01 * b10 + r02 * b20
    a10 = r10 * b00 + r11 * b10 + r12 * b20
    a20 = r20 * b00 + r21 * b10 + r22 * b20
    a01 = r00 * b01 + r01 * b11 + r02 * b21
    a11 = r10 * b01 + r11 * b11 + r12 * b21
    a21 = r20 * b01 + r21 * b11 + r22 * b21
    z0 = r00 * b02 + r01 * b12 + r02 * b22
    z1 = r10 * b02 + r11 * b12 + r12 * b22
    z2 = r20 * b02 + r21 * b12 + r22 * b22
    if p[r + J_PRISMATIC] != 0.0:
        return (a00, a01, z0, a10, a11, z1, a20, a21, z2, x0 + z0 * angle, x1 + z1 * angle,
                x2 + z2 * angle, 0.0, 0.0, 0.0, z0, z1, z2)
    return (                                    # the joint frame times Rot(z, angle)
c * a00 + sn * a01, c * a01 - sn * a00, z0,
            c * a10 + sn * a11, c * a11 - sn * a10, z1,
            c * a20 + sn * a21, c * a21 - sn * a20, z2, x0, x1, x2,
            z0, z1, z2, x1 * z2 - x2 * z1, x2 * z0 - x0 * z2, x0 * z1 - x1 * z0)


@inline_kernel
def _momentum(m, h0, h1, h2, j00, j11, j22, j01, j02, j12, w0, w1, w2, v0, v1, v2):
    """I m of the inertia (m, h, J: xx yy zz xy xz yz) and the motion (w, v): (n, F)."""
    return (j00 * w0 + j01 * w1 + j02 * w2 + h1 * v2 - h2 * v1,
            j01 * w0 + j11 * w1 + j12 * w2 + h2 * v0 - h0 * v2,
            j02 * w0 + j12 * w1 + j22 * w2 + h0 * v1 - h1 * v0,
            m * v0 - (h1 * w2 - h2 * w1),
            m * v1 - (h2 * w0 - h0 * w2),
            m * v2 - (h0 * w1 - h1 * w0))


@kernel
def kinematics(p, q, s):
    """At coordinates q: each S_k into the scratch ``s`` (module docstring), and the last
    body's pose in its last 12 floats (rotation, row-major, then origin)."""
    n = int(p[P_N])
    r00 = r11 = r22 = 1.0
    r01 = r02 = r10 = r12 = r20 = r21 = o0 = o1 = o2 = 0.0
    for k in range(n):
        r00, r01, r02, r10, r11, r12, r20, r21, r22, o0, o1, o2, m0, m1, m2, m3, m4, m5 = \
            _place(p, P_JOINTS + JOINT_STRIDE * k, q[k], math.sin(q[k]), math.cos(q[k]), r00,
                   r01, r02, r10, r11, r12, r20, r21, r22, o0, o1, o2)
        b = BODY_STRIDE * k + S_MOTION
        s[b], s[b + 1], s[b + 2], s[b + 3], s[b + 4], s[b + 5] = m0, m1, m2, m3, m4, m5
    pose = BODY_STRIDE * n
    s[pose], s[pose + 1], s[pose + 2] = r00, r01, r02
    s[pose + 3], s[pose + 4], s[pose + 5] = r10, r11, r12
    s[pose + 6], s[pose + 7], s[pose + 8] = r20, r21, r22
    s[pose + 9], s[pose + 10], s[pose + 11] = o0, o1, o2


@fused_helper
def forward(p, q, qd, s):
    """The pass base to tip (module docstring) at (q, qd) and qdd = 0: S_k, I_k and f_k into
    the scratch ``s``; returns the potential energy of gravity (J). Everything of one body
    stays in registers (its pose, inertia, velocity and acceleration are locals); only
    what the pass tip to base reads is stored."""
    n = int(p[P_N])
    gx, gy, gz = p[P_GRAVITY], p[P_GRAVITY + 1], p[P_GRAVITY + 2]
    r00 = r11 = r22 = 1.0
    r01 = r02 = r10 = r12 = r20 = r21 = o0 = o1 = o2 = 0.0
    w0 = w1 = w2 = v0 = v1 = v2 = 0.0          # the body's spatial velocity
    a0 = a1 = a2 = 0.0                         # its spatial acceleration: a_0 = -gravity
    a3, a4, a5 = -gx, -gy, -gz
    potential = 0.0
    for k in range(n):       # the sines and cosines first, side by side (into the forces' slots)
        b = BODY_STRIDE * k + S_FORCE
        s[b], s[b + 1] = sincos(q[k])
    for k in range(n):
        r = P_JOINTS + JOINT_STRIDE * k
        b = BODY_STRIDE * k
        r00, r01, r02, r10, r11, r12, r20, r21, r22, o0, o1, o2, m0, m1, m2, m3, m4, m5 = \
            _place(p, r, q[k], s[b + S_FORCE], s[b + S_FORCE + 1], r00, r01, r02, r10, r11,
                   r12, r20, r21, r22, o0, o1, o2)
        # the body's inertia about the base origin: J = R Ic R^T + m (|c|^2 1 - c c^T)
        m = p[r + J_MASS]
        bx, by, bz = p[r + J_COM], p[r + J_COM + 1], p[r + J_COM + 2]
        cx = o0 + r00 * bx + r01 * by + r02 * bz
        cy = o1 + r10 * bx + r11 * by + r12 * bz
        cz = o2 + r20 * bx + r21 * by + r22 * bz
        potential -= m * (gx * cx + gy * cy + gz * cz)
        h0, h1, h2 = m * cx, m * cy, m * cz
        ixx, iyy, izz = p[r + J_INERTIA], p[r + J_INERTIA + 1], p[r + J_INERTIA + 2]
        ixy, ixz, iyz = p[r + J_INERTIA + 3], p[r + J_INERTIA + 4], p[r + J_INERTIA + 5]
        t00 = r00 * ixx + r01 * ixy + r02 * ixz        # R Ic
        t01 = r00 * ixy + r01 * iyy + r02 * iyz
        t02 = r00 * ixz + r01 * iyz + r02 * izz
        t10 = r10 * ixx + r11 * ixy + r12 * ixz
        t11 = r10 * ixy + r11 * iyy + r12 * iyz
        t12 = r10 * ixz + r11 * iyz + r12 * izz
        t20 = r20 * ixx + r21 * ixy + r22 * ixz
        t21 = r20 * ixy + r21 * iyy + r22 * iyz
        t22 = r20 * ixz + r21 * iyz + r22 * izz
        j00 = t00 * r00 + t01 * r01 + t02 * r02 + h1 * cy + h2 * cz
        j11 = t10 * r10 + t11 * r11 + t12 * r12 + h0 * cx + h2 * cz
        j22 = t20 * r20 + t21 * r21 + t22 * r22 + h0 * cx + h1 * cy
        j01 = t00 * r10 + t01 * r11 + t02 * r12 - h0 * cy
        j02 = t00 * r20 + t01 * r21 + t02 * r22 - h0 * cz
        j12 = t10 * r20 + t11 * r21 + t12 * r22 - h1 * cz
        # v += S qd; a += v x (S qd)
        rate = qd[k]
        e0, e1, e2, e3, e4, e5 = m0 * rate, m1 * rate, m2 * rate, m3 * rate, m4 * rate, m5 * rate
        w0 += e0
        w1 += e1
        w2 += e2
        v0 += e3
        v1 += e4
        v2 += e5
        a0 += w1 * e2 - w2 * e1
        a1 += w2 * e0 - w0 * e2
        a2 += w0 * e1 - w1 * e0
        a3 += w1 * e5 - w2 * e4 + v1 * e2 - v2 * e1
        a4 += w2 * e3 - w0 * e5 + v2 * e0 - v0 * e2
        a5 += w0 * e4 - w1 * e3 + v0 * e1 - v1 * e0
        # f = I a + v x* (I v)
        n0, n1, n2, f0, f1, f2 = _momentum(m, h0, h1, h2, j00, j11, j22, j01, j02, j12,
                                           a0, a1, a2, a3, a4, a5)
        l0, l1, l2, l3, l4, l5 = _momentum(m, h0, h1, h2, j00, j11, j22, j01, j02, j12,
                                           w0, w1, w2, v0, v1, v2)
        s[b + S_MOTION], s[b + S_MOTION + 1], s[b + S_MOTION + 2] = m0, m1, m2
        s[b + S_MOTION + 3], s[b + S_MOTION + 4], s[b + S_MOTION + 5] = m3, m4, m5
        o = b + S_INERTIA
        s[o], s[o + 1], s[o + 2], s[o + 3] = m, h0, h1, h2
        s[o + 4], s[o + 5], s[o + 6], s[o + 7], s[o + 8], s[o + 9] = j00, j11, j22, j01, j02, j12
        o = b + S_FORCE
        s[o] = n0 + w1 * l2 - w2 * l1 + v1 * l5 - v2 * l4
        s[o + 1] = n1 + w2 * l0 - w0 * l2 + v2 * l3 - v0 * l5
        s[o + 2] = n2 + w0 * l1 - w1 * l0 + v0 * l4 - v1 * l3
        s[o + 3] = f0 + w1 * l5 - w2 * l4
        s[o + 4] = f1 + w2 * l3 - w0 * l5
        s[o + 5] = f2 + w0 * l4 - w1 * l3
    pose = BODY_STRIDE * n
    s[pose], s[pose + 1], s[pose + 2] = r00, r01, r02
    s[pose + 3], s[pose + 4], s[pose + 5] = r10, r11, r12
    s[pose + 6], s[pose + 7], s[pose + 8] = r20, r21, r22
    s[pose + 9], s[pose + 10], s[pose + 11] = o0, o1, o2
    return potential


@fused_helper
def inverse_dynamics(p, q, qd, qdd, tau, s):
    """tau = M(q) qdd + c(q, qd) + g(q) (N m, N), without damping; an empty ``qdd`` stands
    for zero (tau is the bias). ``s``: scratch of scratch_size(n) floats.

    RNEA in the bodies' own frames (Featherstone's): no inertia is rotated, each body's
    velocity and acceleration come from its parent's through the joint's transform
    (rotation E = B Rz(q), B the placement's, and origin t in the parent's frame), and
    the forces go back through it; S_k = (e_z, 0) (revolute) or (0, e_z) (prismatic),
    so tau_k is one component of the force. About 35 % fewer operations than ``forward``
    in the base frame, which the mass matrix needs."""
    n = int(p[P_N])
    accelerating = len(qdd) > 0
    for k in range(n):       # the sines and cosines first, side by side (S's slots: unused)
        b = BODY_STRIDE * k + S_MOTION
        s[b], s[b + 1] = sincos(q[k])
    w0 = w1 = w2 = v0 = v1 = v2 = 0.0          # the body's velocity, in its frame
    a0 = a1 = a2 = 0.0                         # its acceleration: a_0 = -gravity
    a3, a4, a5 = -p[P_GRAVITY], -p[P_GRAVITY + 1], -p[P_GRAVITY + 2]
    for k in range(n):
        r = P_JOINTS + JOINT_STRIDE * k
        b = BODY_STRIDE * k
        sn, c = s[b + S_MOTION], s[b + S_MOTION + 1]
        e00, e01, e02, e10, e11, e12, e20, e21, e22, t0, t1, t2 = _joint(p, r, q[k], sn, c)
        # the parent's motion at this body's origin, then in this body's frame (E^T)
        u0 = v0 + w1 * t2 - w2 * t1
        u1 = v1 + w2 * t0 - w0 * t2
        u2 = v2 + w0 * t1 - w1 * t0
        x0 = a3 + a1 * t2 - a2 * t1
        x1 = a4 + a2 * t0 - a0 * t2
        x2 = a5 + a0 * t1 - a1 * t0
        w0, w1, w2 = (e00 * w0 + e10 * w1 + e20 * w2, e01 * w0 + e11 * w1 + e21 * w2,
                      e02 * w0 + e12 * w1 + e22 * w2)
        v0, v1, v2 = (e00 * u0 + e10 * u1 + e20 * u2, e01 * u0 + e11 * u1 + e21 * u2,
                      e02 * u0 + e12 * u1 + e22 * u2)
        a0, a1, a2 = (e00 * a0 + e10 * a1 + e20 * a2, e01 * a0 + e11 * a1 + e21 * a2,
                      e02 * a0 + e12 * a1 + e22 * a2)
        a3, a4, a5 = (e00 * x0 + e10 * x1 + e20 * x2, e01 * x0 + e11 * x1 + e21 * x2,
                      e02 * x0 + e12 * x1 + e22 * x2)
        # v += S qd; a += S qdd + v x (S qd)
        rate = qd[k]
        acc = qdd[k] if accelerating else 0.0
        if p[r + J_PRISMATIC] != 0.0:
            v2 += rate
            a3 += w1 * rate
            a4 -= w0 * rate
            a5 += acc
        else:
            w2 += rate
            a0 += w1 * rate
            a1 -= w0 * rate
            a2 += acc
            a3 += v1 * rate
            a4 -= v0 * rate
        # f = I a + v x* (I v), the inertia about this body's origin in its frame
        m = p[r + J_MASS]
        cx, cy, cz = p[r + J_COM], p[r + J_COM + 1], p[r + J_COM + 2]
        h0, h1, h2 = m * cx, m * cy, m * cz
        j00 = p[r + J_INERTIA] + h1 * cy + h2 * cz
        j11 = p[r + J_INERTIA + 1] + h0 * cx + h2 * cz
        j22 = p[r + J_INERTIA + 2] + h0 * cx + h1 * cy
        j01 = p[r + J_INERTIA + 3] - h0 * cy
        j02 = p[r + J_INERTIA + 4] - h0 * cz
        j12 = p[r + J_INERTIA + 5] - h1 * cz
        n0, n1, n2, f0, f1, f2 = _momentum(m, h0, h1, h2, j00, j11, j22, j01, j02, j12,
                                           a0, a1, a2, a3, a4, a5)
        l0, l1, l2, l3, l4, l5 = _momentum(m, h0, h1, h2, j00, j11, j22, j01, j02, j12,
                                           w0, w1, w2, v0, v1, v2)
        o = b + S_FORCE
        s[o] = n0 + w1 * l2 - w2 * l1 + v1 * l5 - v2 * l4
        s[o + 1] = n1 + w2 * l0 - w0 * l2 + v2 * l3 - v0 * l5
        s[o + 2] = n2 + w0 * l1 - w1 * l0 + v0 * l4 - v1 * l3
        s[o + 3] = f0 + w1 * l5 - w2 * l4
        s[o + 4] = f1 + w2 * l3 - w0 * l5
        s[o + 5] = f2 + w0 * l4 - w1 * l3
    f0 = f1 = f2 = f3 = f4 = f5 = 0.0          # the force the child passes on, its frame
    for k in range(n - 1, -1, -1):
        r = P_JOINTS + JOINT_STRIDE * k
        b = BODY_STRIDE * k
        o = b + S_FORCE
        f0 += s[o]
        f1 += s[o + 1]
        f2 += s[o + 2]
        f3 += s[o + 3]
        f4 += s[o + 4]
        f5 += s[o + 5]
        tau[k] = f5 if p[r + J_PRISMATIC] != 0.0 else f2
        e00, e01, e02, e10, e11, e12, e20, e21, e22, t0, t1, t2 = \
            _joint(p, r, q[k], s[b + S_MOTION], s[b + S_MOTION + 1])
        # into the parent's frame: f' = E f, n' = E n + t x f'
        f3, f4, f5 = (e00 * f3 + e01 * f4 + e02 * f5, e10 * f3 + e11 * f4 + e12 * f5,
                      e20 * f3 + e21 * f4 + e22 * f5)
        f0, f1, f2 = (e00 * f0 + e01 * f1 + e02 * f2 + t1 * f5 - t2 * f4,
                      e10 * f0 + e11 * f1 + e12 * f2 + t2 * f3 - t0 * f5,
                      e20 * f0 + e21 * f1 + e22 * f2 + t0 * f4 - t1 * f3)


@inline_kernel
def _joint(p, r, angle, sn, c):
    """Joint k's transform (``r`` its row in the block) at its coordinate ``angle`` (rad or
    m; ``sn``, ``c`` its sine and cosine): the rotation E (row-major) from body k's frame
    to body k-1's and body k's origin t in body k-1's frame (m)."""
    b00, b01, b02 = p[r + J_ROTATION], p[r + J_ROTATION + 1], p[r + J_ROTATION + 2]
    b10, b11, b12 = p[r + J_ROTATION + 3], p[r + J_ROTATION + 4], p[r + J_ROTATION + 5]
    b20, b21, b22 = p[r + J_ROTATION + 6], p[r + J_ROTATION + 7], p[r + J_ROTATION + 8]
    t0, t1, t2 = p[r + J_ORIGIN], p[r + J_ORIGIN + 1], p[r + J_ORIGIN + 2]
    if p[r + J_PRISMATIC] != 0.0:
        return (b00, b01, b02, b10, b11, b12, b20, b21, b22, t0 + b02 * angle,
                t1 + b12 * angle, t2 + b22 * angle)
    return (c * b00 + sn * b01, c * b01 - sn * b00, b02,
            c * b10 + sn * b11, c * b11 - sn * b10, b12,
            c * b20 + sn * b21, c * b21 - sn * b20, b22, t0, t1, t2)


@fused_helper
def mass_and_bias(p, q, qd, mass, bias, s):
    """M(q) into ``mass`` (n x n) and c(q, qd) + g(q) into ``bias`` (n), without damping, in
    one pass base to tip (``forward``) and one back, which sums the forces (RNEA) and the
    composite inertias (CRBA) together. ``s``: scratch of scratch_size(n) floats. Returns
    the potential energy (J)."""
    n = int(p[P_N])
    potential = forward(p, q, qd, s)
    f0 = f1 = f2 = f3 = f4 = f5 = 0.0          # the force the subtree below passes on
    m = h0 = h1 = h2 = j00 = j11 = j22 = j01 = j02 = j12 = 0.0    # its composite inertia
    for k in range(n - 1, -1, -1):
        b = BODY_STRIDE * k
        o = b + S_FORCE
        f0 += s[o]
        f1 += s[o + 1]
        f2 += s[o + 2]
        f3 += s[o + 3]
        f4 += s[o + 4]
        f5 += s[o + 5]
        m0, m1, m2, m3, m4, m5 = s[b], s[b + 1], s[b + 2], s[b + 3], s[b + 4], s[b + 5]
        bias[k] = m0 * f0 + m1 * f1 + m2 * f2 + m3 * f3 + m4 * f4 + m5 * f5
        o = b + S_INERTIA
        m += s[o]
        h0 += s[o + 1]
        h1 += s[o + 2]
        h2 += s[o + 3]
        j00 += s[o + 4]
        j11 += s[o + 5]
        j22 += s[o + 6]
        j01 += s[o + 7]
        j02 += s[o + 8]
        j12 += s[o + 9]
        n0, n1, n2, c0, c1, c2 = _momentum(m, h0, h1, h2, j00, j11, j22, j01, j02, j12,
                                           m0, m1, m2, m3, m4, m5)
        for j in range(k + 1):
            c = BODY_STRIDE * j
            value = s[c] * n0 + s[c + 1] * n1 + s[c + 2] * n2 + s[c + 3] * c0 \
                + s[c + 4] * c1 + s[c + 5] * c2
            mass[j, k] = value
            mass[k, j] = value
    return potential


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


SCRATCH = BODY_STRIDE * MAX_JOINTS + 12


@kernel
def mechanism(q, qd, p, mass, bias):
    """The URDF chain's mechanism (plant.interface.MECHANISM_SIGNATURE): M(q) into ``mass``,
    c(q, qd) + g(q) + damping qd into ``bias``; returns the potential energy (J)."""
    s = _stack(SCRATCH)
    potential = mass_and_bias(p, q, qd, mass, bias, s)
    for k in range(int(p[P_N])):
        bias[k] += p[P_JOINTS + JOINT_STRIDE * k + J_DAMPING] * qd[k]
    return potential
