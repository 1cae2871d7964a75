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

from plant.layout import H_BODY, H_NQ


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


# offsets inside the model block, for n links
@kernel
def _mu(n):
    return 1


@kernel
def _gc(n):
    return 1 + n * n


@kernel
def _damp(n):
    return 1 + n * n + n


@kernel
def _mass(n):
    return 1 + n * n + 2 * n


@kernel
def _length(n):
    return 1 + n * n + 4 * n


@kernel
def _com(n):
    return 1 + n * n + 5 * n


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
    sn = scratch[0, :n]
    cs = scratch[1, :n]
    phid = scratch[2, :n]
    _absolute(q, qd, sn, cs, phid)
    for j in range(n):
        force = grav * p[o + _gc(n) + j] * sn[j]
        for k in range(n):
            mu = p[o + _mu(n) + j * n + k]
            if j == k:
                mass[j, k] = mu
            else:
                mass[j, k] = mu * (cs[j] * cs[k] + sn[j] * sn[k])
                force += mu * (sn[j] * cs[k] - cs[j] * sn[k]) * phid[k] * phid[k]
        bias[j] = force
    _to_relative(mass, n)
    for j in range(n - 2, -1, -1):
        bias[j] += bias[j + 1]
    for j in range(n):
        bias[j] += p[o + _damp(n) + j] * qd[j]


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
    _absolute(q, qd, sn, cs, phid)
    for j in range(n):
        for k in range(n):
            mu = p[o + _mu(n) + j * n + k]
            out[j, k] = 0.0 if j == k else mu * (sn[j] * cs[k] - cs[j] * sn[k]) * phid[k]
    _to_relative(out, n)


@kernel
def gravity_torque(p, q, out):
    """g(q) = dV/dq in N m."""
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    phi = 0.0
    for j in range(n):
        phi += q[j]
        out[j] = p[o] * p[o + _gc(n) + j] * np.sin(phi)
    for j in range(n - 2, -1, -1):
        out[j] += out[j + 1]


@kernel
def potential_energy(p, q):
    """V(q) = -g sum m_i x_Ci, J (zero with the centres of mass at the base height)."""
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    phi = 0.0
    v = 0.0
    for j in range(n):
        phi += q[j]
        v -= p[o] * p[o + _gc(n) + j] * np.cos(phi)
    return v


@kernel
def centre_of_mass(p, q, out):
    """Overall centre of mass (x_C down, y_C horizontal), m, into out[0:2]."""
    n = int(p[H_NQ])
    o = int(p[H_BODY])
    x_joint = 0.0
    y_joint = 0.0
    phi = 0.0
    mx = 0.0
    my = 0.0
    total = 0.0
    for i in range(n):
        phi += q[i]
        m = p[o + _mass(n) + i]
        a = p[o + _com(n) + i]
        mx += m * (x_joint + a * np.cos(phi))
        my += m * (y_joint + a * np.sin(phi))
        total += m
        x_joint += p[o + _length(n) + i] * np.cos(phi)
        y_joint += p[o + _length(n) + i] * np.sin(phi)
    out[0] = mx / total
    out[1] = my / total
