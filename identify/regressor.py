"""The identification regressor of the planar serial arm (plant.serial_arm, paper 000) with
its drives, and its base parameters.

The joint torques are linear in the *standard parameters* of each link j: its mass m_j
(kg), first moment h_j = m_j a_j (kg m) and inertia about its joint I_j = J_Cj + m_j a_j^2
(kg m^2), once the lengths L_j and gravity g are known. With the absolute angles
phi = T q (T lower-triangular ones) the equations of plant.serial_arm are

    tau_abs_j = sum_k mu_jk [cos(phi_j - phi_k) phidd_k + sin(phi_j - phi_k) phid_k^2]
                + g gc_j sin(phi_j),              tau = T^T tau_abs + D qd,

    mu_jj = I_j + L_j^2 M_j,   mu_jk = L_j (h_k + L_k M_k) (j < k),   gc_j = h_j + L_j M_j,

with M_j = sum_{i>j} m_i: tau is linear in (mu, gc), and (mu, gc) are linear in (m, h, I),
so the regressor is Y = Y_mu,gc A, A the constant map (m, h, I) -> (mu, gc). The drives
and the joints add one column per joint and parameter: the viscous damping b_j
(plant.damping, qd_j), the reflected rotor inertia r_j^2 J_m (motor.rotor_inertia,
r_j^2 qdd_j), the motor's viscous friction r_j^2 D_m (motor.viscous_friction, r_j^2 qd_j)
and the joint-side friction of the [friction] table, friction.viscous (qd_j, the same
column as the damping's: only their sum acts) and friction.coulomb (sign qd_j; from logs,
the filtered sign of identify.data.Samples). Units: rad, rad/s, rad/s^2, N m.

Rows are stacked joint by joint (all samples of joint 1, then joint 2, ...). Not all
standard parameters act on the torques independently (m_1 not at all; m_j of the outer
links only through the sums M_j): the *base parameters* are found as Gautier's, by QR
with column pivoting of the regressor at random states (its rank), the independent
columns taken in the order of PREFERENCE, the others expressed through them
(``BaseParameters``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

# What each fitted name means: the config key, and the column's kind (regressor columns).
LINEAR = {
    "plant.inertia": "I_j = J_Cj + m_j a_j^2, kg m^2 (about the joint)",
    "plant.com": "h_j = m_j a_j, kg m (first moment)",
    "plant.mass": "m_j, kg",
    "plant.damping": "b_j, N m s/rad (joint viscous)",
    "motor.rotor_inertia": "J_m, kg m^2 (column r^2 qdd)",
    "motor.viscous_friction": "D_m, N m s/rad on the motor shaft (column r^2 qd)",
    "friction.viscous": "N m s/rad, joint side",
    "friction.coulomb": "N m, joint side (column sign qd)",
}
# Among columns that act alike, the first in this order is kept as a base parameter.
PREFERENCE = tuple(LINEAR)
MOTOR_KEYS = ("motor.rotor_inertia", "motor.viscous_friction")
FRICTION_KEYS = ("friction.viscous", "friction.coulomb")
RIGID_KEYS = ("plant.inertia", "plant.com", "plant.mass")


@dataclass(frozen=True)
class Arm:
    """What the regressor needs of an arm: lengths L (m), gravity g (m/s^2), gear ratios r
    (None: a torque drive)."""

    length: np.ndarray
    gravity: float
    ratio: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.length)


def standard_values(plant, friction) -> dict:
    """The standard parameter values of a config's [plant] and [friction] tables, one
    array per LINEAR name (kg, kg m, kg m^2, N m s/rad, N m); an unset friction key is 0
    (the serial arm has no other default)."""
    m = np.asarray(plant.mass, float)
    a = np.asarray(plant.com, float)
    values = {"plant.mass": m, "plant.com": m * a,
              "plant.inertia": np.asarray(plant.inertia, float) + m * a * a,
              "plant.damping": np.asarray(plant.damping, float),
              "motor.rotor_inertia": np.asarray(plant.motor.rotor_inertia, float),
              "motor.viscous_friction": np.asarray(plant.motor.viscous_friction, float)}
    for key in FRICTION_KEYS:
        value = getattr(friction, key.split(".")[1])
        values[key] = np.zeros(len(m)) if value is None else \
            np.broadcast_to(np.asarray(value, float), (len(m),)).copy()
    return values


def _mu_gc_map(arm: Arm) -> np.ndarray:
    """A: (m, h, I) of every link (3n, link-major: m_1..m_n, h_1..h_n, I_1..I_n) -> (mu
    upper triangle, row by row, then gc), the linear map of the module's docstring."""
    n, L = arm.n, arm.length
    pairs = [(j, k) for j in range(n) for k in range(j, n)]
    A = np.zeros((len(pairs) + n, 3 * n))
    for col in range(3 * n):
        v = np.zeros(3 * n)
        v[col] = 1.0
        m, h, inertia = v[:n], v[n:2 * n], v[2 * n:]
        outboard = np.array([m[i + 1:].sum() for i in range(n)])
        for row, (j, k) in enumerate(pairs):
            A[row, col] = inertia[j] + L[j] ** 2 * outboard[j] if j == k \
                else L[j] * (h[k] + L[k] * outboard[k])
        A[len(pairs):, col] = h + L * outboard
    return A


def _mu_gc_columns(arm: Arm, q, qd, qdd) -> np.ndarray:
    """The regressor of (mu upper triangle, gc): (n*N rows, joint by joint) x columns."""
    n, N = arm.n, len(q)
    phi, phid, phidd = np.cumsum(q, 1), np.cumsum(qd, 1), np.cumsum(qdd, 1)
    pairs = [(j, k) for j in range(n) for k in range(j, n)]
    cols = np.zeros((len(pairs) + n, N, n))   # column, sample, absolute-joint torque
    for c, (j, k) in enumerate(pairs):
        if j == k:
            cols[c, :, j] = phidd[:, j]
            continue
        d = phi[:, j] - phi[:, k]
        cos, sin = np.cos(d), np.sin(d)
        cols[c, :, j] = cos * phidd[:, k] + sin * phid[:, k] ** 2
        cols[c, :, k] = cos * phidd[:, j] - sin * phid[:, j] ** 2
    for j in range(n):
        cols[len(pairs) + j, :, j] = arm.gravity * np.sin(phi[:, j])
    relative = np.flip(np.cumsum(np.flip(cols, 2), 2), 2)     # T^T: suffix sums
    return relative.transpose(2, 1, 0).reshape(n * N, -1)


def columns(arm: Arm, names: list[str], q, qd, qdd, sign=None) -> np.ndarray:
    """The regressor (n*N rows, joint by joint; one column per name and joint, name-major)
    of the LINEAR ``names`` at the samples q, qd, qdd (N x n each); ``sign`` (N x n): the
    Coulomb column's signal, by default sign(qd)."""
    n, N = arm.n, len(q)
    out = []
    rigid = None
    for name in names:
        if name in RIGID_KEYS:
            if rigid is None:
                rigid = _mu_gc_columns(arm, q, qd, qdd) @ _mu_gc_map(arm)
            at = {"plant.mass": 0, "plant.com": 1, "plant.inertia": 2}[name] * n
            out.append(rigid[:, at:at + n])
            continue
        r2 = np.ones(n) if arm.ratio is None or name not in MOTOR_KEYS else arm.ratio ** 2
        signal = {"plant.damping": qd, "motor.rotor_inertia": qdd,
                  "motor.viscous_friction": qd, "friction.viscous": qd,
                  "friction.coulomb": np.sign(qd) if sign is None else sign}[name]
        block = np.zeros((n * N, n))
        for j in range(n):
            block[j * N:(j + 1) * N, j] = r2[j] * signal[:, j]
        out.append(block)
    return np.concatenate(out, axis=1) if out else np.zeros((n * N, 0))


def column_names(names: list[str], n: int) -> list[str]:
    """``name[j]`` (1-based joints) for every column of ``columns(arm, names, ...)``."""
    return [f"{name}[{j + 1}]" for name in names for j in range(n)]


@dataclass(frozen=True)
class BaseParameters:
    """The base parameters of a set of columns: ``base`` (indices of the independent
    columns) and ``dependent`` (the others), with Y[:, dependent] = Y[:, base] K at every
    state, so that Y pi = Y[:, base] beta with beta = pi[base] + K pi[dependent]."""

    base: np.ndarray
    dependent: np.ndarray
    K: np.ndarray

    def beta(self, pi: np.ndarray) -> np.ndarray:
        """The base parameters of standard parameters ``pi``."""
        return pi[self.base] + self.K @ pi[self.dependent]

    def standard(self, beta: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """Standard parameters with base parameters ``beta``: the dependent ones held at
        ``prior``, the base ones beta - K prior[dependent] (the same torques)."""
        pi = prior.copy()
        pi[self.base] = beta - self.K @ prior[self.dependent]
        return pi


def base_parameters(arm: Arm, names: list[str], seed: int = 0, samples: int = 60,
                    tol: float = 1e-9) -> BaseParameters:
    """The base parameters of the LINEAR ``names``' columns (docstring): the rank r of the
    regressor at ``samples`` random states (QR with column pivoting, |R_kk| > tol |R_00|),
    then the independent columns, the first r that raise the rank in the order given."""
    rng = np.random.default_rng(seed)
    shape = (samples, arm.n)
    raw = columns(arm, names, rng.uniform(-np.pi, np.pi, shape), rng.uniform(-3, 3, shape),
                  rng.uniform(-10, 10, shape))
    Y = raw / np.maximum(np.linalg.norm(raw, axis=0), 1e-300)
    _, R, _ = scipy.linalg.qr(Y, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > tol * diag[0])) if len(diag) else 0
    base: list[int] = []
    for c in range(Y.shape[1]):
        if len(base) == rank:
            break
        trial = Y[:, base + [c]]
        if np.linalg.matrix_rank(trial, tol=tol * np.sqrt(len(trial))) == len(base) + 1:
            base.append(c)
    dependent = [c for c in range(Y.shape[1]) if c not in base]
    K = np.linalg.lstsq(raw[:, base], raw[:, dependent], rcond=None)[0] if dependent else \
        np.zeros((len(base), 0))
    return BaseParameters(np.array(base, int), np.array(dependent, int), K)
