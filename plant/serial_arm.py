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

from plant.kernel import kernel
from plant.layout import (DRIVE_TORQUE, H_BODY, H_DRIVE, H_MOTOR, H_NQ, MOT_DM, MOT_JM,
                          MOT_KE, MOT_KM, MOT_RA, MOT_RATIO, MOTOR_STRIDE)


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


@kernel
def _drive_terms(p, j, qd, u):
    """(reflected inertia, damping, generalised force) that joint j's drive adds
    (simplified motor or torque input): the scalar form of plant.motor.apply_drive."""
    if int(p[H_DRIVE]) == DRIVE_TORQUE:
        return 0.0, 0.0, u
    row = int(p[H_MOTOR]) + j * MOTOR_STRIDE
    r = p[row + MOT_RATIO]
    km_ra = p[row + MOT_KM] / p[row + MOT_RA]
    return (r * r * p[row + MOT_JM], r * r * (p[row + MOT_DM] + km_ra * p[row + MOT_KE]),
            r * km_ra * u)


@kernel
def accel3(p, x, u, qdd):
    """Accelerations of a healthy 3-link arm, unrolled: the same equations as
    mass_and_bias + plant.motor.apply_drive + an LDL^T solve, in scalars.

    The per-step path of the paper's arm: no loops over arrays, about a third of
    the generic path's cost. Valid for torque drive and the simplified motor model.
    """
    o = int(p[H_BODY])
    grav = p[o]
    m11, m12, m13 = p[o + 1], p[o + 2], p[o + 3]
    m22, m23, m33 = p[o + 5], p[o + 6], p[o + 9]
    p1 = x[0]
    p2 = p1 + x[1]
    p3 = p2 + x[2]
    w1 = x[3]
    w2 = w1 + x[4]
    w3 = w2 + x[5]
    s1, c1 = np.sin(p1), np.cos(p1)
    s2, c2 = np.sin(p2), np.cos(p2)
    s3, c3 = np.sin(p3), np.cos(p3)
    t12 = m12 * (c1 * c2 + s1 * s2)
    t13 = m13 * (c1 * c3 + s1 * s3)
    t23 = m23 * (c2 * c3 + s2 * s3)
    v12 = m12 * (s1 * c2 - c1 * s2)
    v13 = m13 * (s1 * c3 - c1 * s3)
    v23 = m23 * (s2 * c3 - c2 * s3)
    f1 = grav * p[o + 10] * s1 + v12 * w2 * w2 + v13 * w3 * w3
    f2 = grav * p[o + 11] * s2 - v12 * w1 * w1 + v23 * w3 * w3
    f3 = grav * p[o + 12] * s3 - v13 * w1 * w1 - v23 * w2 * w2
    # M = T^T Mt T and bias = T^T f (suffix sums), plus damping and drives
    a33 = m33
    a23 = t23 + m33
    a13 = t13 + t23 + m33
    a22 = m22 + 2.0 * t23 + m33
    a12 = t12 + m22 + 2.0 * t23 + t13 + m33
    a11 = m11 + m22 + m33 + 2.0 * (t12 + t13 + t23)
    j1, d1, u1 = _drive_terms(p, 0, x[3], u[0])
    j2, d2, u2 = _drive_terms(p, 1, x[4], u[1])
    j3, d3, u3 = _drive_terms(p, 2, x[5], u[2])
    a11 += j1
    a22 += j2
    a33 += j3
    damp = o + 13
    y1 = u1 - (f1 + f2 + f3) - (p[damp] + d1) * x[3]
    y2 = u2 - (f2 + f3) - (p[damp + 1] + d2) * x[4]
    y3 = u3 - f3 - (p[damp + 2] + d3) * x[5]
    # LDL^T of the symmetric 3 x 3
    e1 = a11
    l21 = a12 / e1
    l31 = a13 / e1
    e2 = a22 - l21 * l21 * e1
    l32 = (a23 - l31 * l21 * e1) / e2
    e3 = a33 - l31 * l31 * e1 - l32 * l32 * e2
    z2 = y2 - l21 * y1
    z3 = y3 - l31 * y1 - l32 * z2
    qdd[2] = z3 / e3
    qdd[1] = z2 / e2 - l32 * qdd[2]
    qdd[0] = y1 / e1 - l21 * qdd[1] - l31 * qdd[2]
    return min(e1, e2, e3)
