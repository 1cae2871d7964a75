"""Planar serial arm in a vertical plane (paper 000), any number of links.

Frame: x points down (gravity along +x), y horizontal. q_1 is the absolute angle
of link 1 from the downward vertical, q_2..q_n are relative angles, all in rad.
Link i has mass m_i (kg), inertia J_Ci about its centre of mass (kg m^2), length
L_i (m), centre of mass at a_i (m) from its proximal joint; viscous damping b_i
(N m s/rad) acts at each joint.

Derivation (done here, not copied from the paper's appendix). With the absolute
angles phi = T q (T lower-triangular ones), the kinetic energy is
T = 1/2 phid^T Mt(phi) phid with

    Mt_jk = mu_jk cos(phi_j - phi_k),
    mu_jj = J_Cj + m_j a_j^2 + L_j^2 sum_{i>j} m_i,
    mu_jk = L_j (m_k a_k + L_k sum_{i>k} m_i)   (j < k, symmetric),

and the potential energy is V = -g sum_j gc_j cos(phi_j) with
gc_j = m_j a_j + L_j sum_{i>j} m_i. Lagrange's equations in phi give the
Christoffel matrix Ct_jk = mu_jk sin(phi_j - phi_k) phid_k, so in the relative
angles M = T^T Mt T, C = T^T Ct T (Mdot - 2C skew-symmetric), g = T^T gt with
gt_j = g gc_j sin(phi_j). Cost: n sin/cos pairs and O(n^2) products.
"""
from dataclasses import dataclass

import numpy as np
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.layout import H_BODY, H_NQ, HEALTHY, JAM_PHASE, JAM_QDD, JAMMING
from hilrig.plant.linalg import sym3_solve
from hilrig.plant.motor import drive3
from hilrig.plant.trig import sincos


@dataclass(frozen=True)
class SerialArmParams:
    """Geometry and inertia of a planar serial arm; arrays have one entry per link."""

    mass: np.ndarray          # m_i, kg
    inertia: np.ndarray       # J_Ci about the centre of mass, kg m^2
    length: np.ndarray        # L_i, m
    com: np.ndarray           # a_i, distance joint i -> centre of mass, m
    damping: np.ndarray       # b_i, N m s / rad
    gravity: float = 9.81     # m/s^2, along +x

    @property
    def n(self) -> int:
        return len(self.mass)

    def coupling(self) -> tuple[np.ndarray, np.ndarray]:
        """(mu, gc): the inertia couplings mu (n x n, kg m^2) and gravity moments gc (kg m)."""
        n = self.n
        m, L, a, J = self.mass, self.length, self.com, self.inertia
        outboard = np.array([m[i + 1:].sum() for i in range(n)])
        mu = np.zeros((n, n))
        for j in range(n):
            mu[j, j] = J[j] + m[j] * a[j] ** 2 + L[j] ** 2 * outboard[j]
            for k in range(j + 1, n):
                mu[j, k] = mu[k, j] = L[j] * (m[k] * a[k] + L[k] * outboard[k])
        gc = m * a + L * outboard
        return mu, gc

    def block(self) -> np.ndarray:
        """The model block of ``params``: [g, mu (n*n), gc (n), b (n), m, J_C, L, a]."""
        mu, gc = self.coupling()
        return np.concatenate([[self.gravity], mu.ravel(), gc, self.damping,
                               self.mass, self.inertia, self.length, self.com])


@kernel
def _offsets(n):
    """Offsets inside the model block (see SerialArmParams.block) for n links:
    (mu, gc, damping, mass, length, com)."""
    return 1, 1 + n * n, 1 + n * n + n, 1 + n * n + 2 * n, 1 + n * n + 4 * n, 1 + n * n + 5 * n


@kernel
def _absolute(q, qd, sn, cs, phid):
    """sin, cos of the absolute link angles and their rates."""
    phi = 0.0
    rate = 0.0
    for j in range(q.shape[0]):
        phi += q[j]
        rate += qd[j]
        sn[j] = np.sin(phi)
        cs[j] = np.cos(phi)
        phid[j] = rate


@kernel
def _to_relative(a, n):
    """A <- T^T A T in place (T lower-triangular ones): suffix sums over rows and columns."""
    for i in range(n):
        for j in range(n - 2, -1, -1):
            a[i, j] += a[i, j + 1]
    for j in range(n):
        for i in range(n - 2, -1, -1):
            a[i, j] += a[i + 1, j]


@kernel
def mass_and_bias(p, q, qd, mass, bias, scratch):
    """M(q) (kg m^2) and bias = C(q, qd) qd + D qd + g(q) (N m) in relative angles.

    ``scratch`` is 2-D with at least 3 rows of n columns.
    """
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    grav = p[o]
    off_mu, off_gc, off_damp, _, _, _ = _offsets(n)
    mu = o + off_mu
    gc = o + off_gc
    damp = o + off_damp
    sn = scratch[0, :n]
    cs = scratch[1, :n]
    phid = scratch[2, :n]
    _absolute(q, qd, sn, cs, phid)
    for j in range(n):
        force = grav * p[gc + j] * sn[j]
        mass[j, j] = p[mu + j * n + j]
        for k in range(j + 1, n):
            c = p[mu + j * n + k]
            cos_jk = cs[j] * cs[k] + sn[j] * sn[k]
            sin_jk = sn[j] * cs[k] - cs[j] * sn[k]
            mass[j, k] = c * cos_jk
            mass[k, j] = c * cos_jk
            force += c * sin_jk * phid[k] * phid[k]
        for k in range(j):
            c = p[mu + k * n + j]
            force -= c * (sn[k] * cs[j] - cs[k] * sn[j]) * phid[k] * phid[k]
        bias[j] = force
    _to_relative(mass, n)
    for j in range(n - 2, -1, -1):
        bias[j] += bias[j + 1]
    for j in range(n):
        bias[j] += p[damp + j] * qd[j]


@kernel
def coriolis_matrix(p, q, qd, out, scratch):
    """Christoffel-form Coriolis matrix C(q, qd) (N m s) in relative angles.

    ``scratch`` is 2-D with at least 3 rows of n columns.
    """
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    sn = scratch[0, :n]
    cs = scratch[1, :n]
    phid = scratch[2, :n]
    off_mu = _offsets(n)[0]
    _absolute(q, qd, sn, cs, phid)
    for j in range(n):
        for k in range(n):
            mu = p[o + off_mu + j * n + k]
            out[j, k] = 0.0 if j == k else mu * (sn[j] * cs[k] - cs[j] * sn[k]) * phid[k]
    _to_relative(out, n)


@kernel
def gravity_torque(p, q, out):
    """g(q) = dV/dq in N m."""
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    gc = o + _offsets(n)[1]
    phi = 0.0
    for j in range(n):
        phi += q[j]
        out[j] = p[o] * p[gc + j] * np.sin(phi)
    for j in range(n - 2, -1, -1):
        out[j] += out[j + 1]


@kernel
def potential_energy(p, q):
    """V(q) = -g sum m_i x_Ci, J (zero with the centres of mass at the base height)."""
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    gc = o + _offsets(n)[1]
    phi = 0.0
    v = 0.0
    for j in range(n):
        phi += q[j]
        v -= p[o] * p[gc + j] * np.cos(phi)
    return v


@kernel
def centre_of_mass(p, q, out):
    """Overall centre of mass (x_C down, y_C horizontal), m, into out[0:2]."""
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    _, _, _, off_mass, off_length, off_com = _offsets(n)
    x_joint = 0.0
    y_joint = 0.0
    phi = 0.0
    mx = 0.0
    my = 0.0
    total = 0.0
    for i in range(n):
        phi += q[i]
        m = p[o + off_mass + i]
        a = p[o + off_com + i]
        mx += m * (x_joint + a * np.cos(phi))
        my += m * (y_joint + a * np.sin(phi))
        total += m
        x_joint += p[o + off_length + i] * np.cos(phi)
        y_joint += p[o + off_length + i] * np.sin(phi)
    out[0] = mx / total
    out[1] = my / total


# -- the paper's 3-link arm, unrolled ---------------------------------------------
# The per-step path of paper 000's arm: the same equations as mass_and_bias +
# plant.motor.apply_drive + plant.jam.restructured_accel, written in scalars
# (no loops over arrays, no scratch). What is constant over an integrator step
# (body3: the arm's constants; plant.motor.drive3: the drives' terms for the
# held input; jams3: the jam phases) is read once per step into tuples; each
# evaluation (accel3_scalar) works on scalars only, with the sines and cosines
# of the link angles (trig3) passed in, so a fused integrator (plant.rk4_arm3)
# keeps the whole RK4 step in registers. Valid for torque drive and the
# simplified motor model (no current states).


@kernel
def body3(p):
    """Constants of a 3-link arm: (g gc_1, g gc_2, g gc_3) in N m, the couplings
    (mu_11, mu_12, mu_13, mu_22, mu_23, mu_33) in kg m^2 (see SerialArmParams.coupling)
    and the joint damping (b_1, b_2, b_3) in N m s/rad."""
    o = int(p[H_BODY])
    grav = p[o]
    return ((grav * p[o + 10], grav * p[o + 11], grav * p[o + 12]),
            (p[o + 1], p[o + 2], p[o + 3], p[o + 5], p[o + 6], p[o + 9]),
            (p[o + 13], p[o + 14], p[o + 15]))


@kernel
def jams3(jams):
    """Jam state of a 3-link arm over a step: (free1, free2, free3) booleans and the
    prescribed accelerations (rad/s^2) of the jammed joints (0 for free ones)."""
    free = (jams[0, JAM_PHASE] == HEALTHY, jams[1, JAM_PHASE] == HEALTHY,
            jams[2, JAM_PHASE] == HEALTHY)
    return free, (_prescribed(jams, 0), _prescribed(jams, 1), _prescribed(jams, 2))


@kernel
def _prescribed(jams, k):
    return jams[k, JAM_QDD] if jams[k, JAM_PHASE] == JAMMING else 0.0


@inline_kernel
def trig3(q1, q2, q3):
    """(sin phi_1, cos phi_1, sin phi_2, cos phi_2, sin phi_3, cos phi_3) of the
    absolute link angles phi_j = q_1 + ... + q_j (q in rad)."""
    p1 = q1
    p2 = p1 + q2
    p3 = p2 + q3
    s1, c1 = sincos(p1)
    s2, c2 = sincos(p2)
    s3, c3 = sincos(p3)
    return s1, c1, s2, c2, s3, c3


@inline_kernel
def accel3_scalar(body, drive, jam, trig, w1, w2, w3):
    """Accelerations (rad/s^2) of a 3-link arm at qd = (w1, w2, w3) (rad/s), unrolled.

    ``body``: body3(p); ``drive``: plant.motor.drive3(p, u, jams); ``jam``: jams3(jams); ``trig``:
    trig3(q). Returns (qdd1, qdd2, qdd3, health), health being the smallest
    LDL^T pivot of the free joints' mass matrix (kg m^2; inf when no joint is
    free, <= 0: invalid).
    """
    gravity, coupling, joint_damping = body
    m11, m12, m13, m22, m23, m33 = coupling
    inertia, damping, force = drive
    free, prescribed = jam
    s1, c1, s2, c2, s3, c3 = trig
    v1 = w1
    v2 = v1 + w2
    v3 = v2 + w3
    t12 = m12 * (c1 * c2 + s1 * s2)
    t13 = m13 * (c1 * c3 + s1 * s3)
    t23 = m23 * (c2 * c3 + s2 * s3)
    v12 = m12 * (s1 * c2 - c1 * s2)
    v13 = m13 * (s1 * c3 - c1 * s3)
    v23 = m23 * (s2 * c3 - c2 * s3)
    f1 = gravity[0] * s1 + v12 * v2 * v2 + v13 * v3 * v3
    f2 = gravity[1] * s2 - v12 * v1 * v1 + v23 * v3 * v3
    f3 = gravity[2] * s3 - v13 * v1 * v1 - v23 * v2 * v2
    # M = T^T Mt T and bias = T^T f (suffix sums), plus damping and drives
    a33 = m33
    a23 = t23 + m33
    a13 = t13 + t23 + m33
    a22 = m22 + 2.0 * t23 + m33
    a12 = t12 + m22 + 2.0 * t23 + t13 + m33
    a11 = m11 + m22 + m33 + 2.0 * (t12 + t13 + t23)
    a11 += inertia[0]
    a22 += inertia[1]
    a33 += inertia[2]
    y1 = force[0] - (f1 + f2 + f3) - (joint_damping[0] + damping[0]) * w1
    y2 = force[1] - (f2 + f3) - (joint_damping[1] + damping[1]) * w2
    y3 = force[2] - f3 - (joint_damping[2] + damping[2]) * w3
    if not (free[0] and free[1] and free[2]):
        # jammed joints (plant.jam, eqs. 3-4): move M e_K qdd_K to the right-hand
        # side, then give the prescribed joints identity rows, so the solve below
        # covers the free joints' M_a
        g1, g2, g3 = prescribed
        if not free[0]:
            y2 -= a12 * g1
            y3 -= a13 * g1
        if not free[1]:
            y1 -= a12 * g2
            y3 -= a23 * g2
        if not free[2]:
            y1 -= a13 * g3
            y2 -= a23 * g3
        if not free[0]:
            y1, a11, a12, a13 = g1, 1.0, 0.0, 0.0
        if not free[1]:
            y2, a22, a12, a23 = g2, 1.0, 0.0, 0.0
        if not free[2]:
            y3, a33, a13, a23 = g3, 1.0, 0.0, 0.0
    qdd1, qdd2, qdd3, m1, m2, m3 = sym3_solve(a11, a12, a13, a22, a23, a33, y1, y2, y3)
    e1, e2, e3 = m1, m2 / m1, m3 / m2   # the LDL^T pivots
    if not (free[0] and free[1] and free[2]):
        # the identity rows return qdd_K to rounding (adj(A) y / det A): exactly
        qdd1 = qdd1 if free[0] else prescribed[0]
        qdd2 = qdd2 if free[1] else prescribed[1]
        qdd3 = qdd3 if free[2] else prescribed[2]
    health = _smaller(_smaller(e1 if free[0] else np.inf, e2 if free[1] else np.inf),
                      e3 if free[2] else np.inf)
    return qdd1, qdd2, qdd3, health


@inline_kernel
def _smaller(a, b):
    """min(a, b) without the NaN handling of min(): one instruction."""
    return a if a < b else b


@kernel
def accel3(p, x, u, qdd, jams=None):
    """Accelerations (rad/s^2) of a 3-link arm into qdd[0:3]: accel3_scalar on arrays.

    ``x`` = [q, qd], ``u`` in N m or V, ``jams`` the (3, 3) jam state (None:
    healthy). Returns the health figure of accel3_scalar.
    """
    jam = ((True, True, True), (0.0, 0.0, 0.0)) if jams is None else jams3(jams)
    qdd[0], qdd[1], qdd[2], health = accel3_scalar(body3(p), drive3(p, u, jams), jam,
                                                   trig3(x[0], x[1], x[2]), x[3], x[4], x[5])
    return health
