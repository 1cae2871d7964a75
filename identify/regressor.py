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
columns taken in the order of ``preference``, the others expressed through them
(``BaseParameters``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
from hilrig.errors import ConfigError
from hilrig.plant.factory import plant_model
from hilrig.schema import Config

# What each fitted name means: the config key, and the column's kind (regressor columns).
# The serial arm's own (Arm.names), then those of the drives and joints of any arm (COMMON).
ARM_NAMES = {
    "plant.inertia": "I_j = J_Cj + m_j a_j^2, kg m^2 (about the joint)",
    "plant.com": "h_j = m_j a_j, kg m (first moment)",
    "plant.mass": "m_j, kg",
    "plant.damping": "b_j, N m s/rad (joint viscous)",
}
COMMON = {
    "motor.rotor_inertia": "J_m, kg m^2 (column r^2 qdd)",
    "motor.viscous_friction": "D_m, N m s/rad on the motor shaft (column r^2 qd)",
    "friction.viscous": "N m s/rad, joint side",
    "friction.coulomb": "N m, joint side (column sign qd)",
}
LINEAR = {**ARM_NAMES, **COMMON}
MOTOR_KEYS = ("motor.rotor_inertia", "motor.viscous_friction")
FRICTION_KEYS = ("friction.viscous", "friction.coulomb")
RIGID_KEYS = ("plant.inertia", "plant.com", "plant.mass")


@dataclass(frozen=True)
class Arm:
    """The planar serial arm's regressor (the plant trait "planar_arm_regressor"): lengths L
    (m), gravity g (m/s^2), gear ratios r (None: a torque drive).

    It is one of the arm regressors identify/ fits through one protocol (the other: a
    PlantModel's ``regressor``, e.g. plant.urdf.regressor.UrdfRegressor): ``n``, ``ratio``,
    ``names`` (its own linear parameters, in the order they are kept as base parameters),
    ``default`` (those fitted by default), ``keys`` (the [plant] keys the logs and CONFIG
    must share), ``width(name)``, ``columns(names, q, qd, qdd)`` ({name: n N x width}),
    ``values(cfg)`` (a config's values of its names), ``column_names(name)``, ``unit(label)`` and ``write(plant,
    values, cfg)`` (the fitted values into CONFIG's raw [plant] table)."""

    length: np.ndarray
    gravity: float
    ratio: np.ndarray | None = None

    names = ARM_NAMES
    default = tuple(ARM_NAMES)
    keys = ("length",)

    @staticmethod
    def of(cfg: Config) -> "Arm":
        """The arm of a resolved config."""
        ratio = None if cfg.plant.drive == "torque" else np.asarray(cfg.plant.motor.gear_ratio)
        return Arm(np.asarray(cfg.plant.length, float), float(cfg.plant.gravity), ratio)

    @property
    def n(self) -> int:
        return len(self.length)

    def width(self, name: str) -> int:
        return self.n

    def columns(self, names: list[str], q, qd, qdd) -> dict:
        out = {}
        if any(name in RIGID_KEYS for name in names):
            rigid = _mu_gc_columns(self, q, qd, qdd) @ _mu_gc_map(self)
            for name in RIGID_KEYS:
                at = {"plant.mass": 0, "plant.com": 1, "plant.inertia": 2}[name] * self.n
                out[name] = rigid[:, at:at + self.n]
        if "plant.damping" in names:
            out["plant.damping"] = _diagonal(qd, np.ones(self.n))
        return out

    @staticmethod
    def values(cfg: Config) -> dict:
        p = cfg.plant
        m, a = np.asarray(p.mass, float), np.asarray(p.com, float)
        return {"plant.mass": m, "plant.com": m * a,
                "plant.inertia": np.asarray(p.inertia, float) + m * a * a,
                "plant.damping": np.asarray(p.damping, float)}

    def column_names(self, name: str) -> list[str]:
        return [f"{name}[{j + 1}]" for j in range(self.n)]

    @staticmethod
    def unit(label: str) -> str | None:
        return None      # identify.fit's UNITS names them

    def write(self, plant: dict, values: dict, cfg: Config) -> None:
        """The fitted (m, h, I) as plant.mass, com = h/m and inertia J_C = I - h^2/m (those
        not fitted CONFIG's), the damping (at least 0). ConfigError when they are not
        physical (J_C or a mass not positive, a negative com)."""
        if any(name in values for name in RIGID_KEYS):
            full = {**self.values(cfg), **values}
            m, h, inertia = full["plant.mass"], full["plant.com"], full["plant.inertia"]
            with np.errstate(divide="ignore", invalid="ignore"):
                com, jc = h / m, inertia - h * h / m
            for what, value, bad in (("plant.mass", m, m <= 0), ("plant.com", com, com < 0),
                                     ("plant.inertia", jc, ~(jc > 0))):
                if bad.any():
                    j = int(np.argmax(bad))
                    raise ConfigError(f"the fit is not physical: {what}[{j + 1}] would be "
                                      f"{value[j]:.4g} (fit other parameters, or excite the "
                                      "arm more)")
            plant.update(mass=m.tolist(), com=com.tolist(), inertia=jc.tolist())
        if "plant.damping" in values:
            plant["damping"] = np.maximum(values["plant.damping"], 0.0).tolist()


def preference(arm) -> tuple:
    """The linear names of ``arm`` in the order columns that act alike are kept as base
    parameters: its own, then the drives' and joints' (COMMON)."""
    return tuple(arm.names) + tuple(COMMON)


def width(arm, name: str) -> int:
    """Columns of ``name``: the arm's own width, n for the COMMON names."""
    return arm.width(name) if name in arm.names else arm.n


def standard_values(arm, cfg: Config) -> dict:
    """The standard parameter values of CONFIG, one array per name of ``preference(arm)``
    (kg, kg m, kg m^2, N m s/rad, N m): the arm's own, the motors' and the joints'
    friction ([friction], unset keys from the plant's friction_defaults or 0)."""
    values = dict(arm.values(cfg))
    n = arm.n
    motor = cfg.plant.motor if cfg.plant.drive != "torque" else None
    for key in MOTOR_KEYS:
        values[key] = np.zeros(n) if motor is None else \
            np.broadcast_to(np.asarray(getattr(motor, key.split(".")[1]), float), (n,)).copy()
    model = plant_model(cfg.plant.model)
    defaults = model.friction_defaults(cfg) if model.friction_defaults is not None \
        else (np.zeros(n), np.zeros(n))
    for key, default in zip(FRICTION_KEYS, defaults):
        value = getattr(cfg.friction, key.split(".")[1])
        values[key] = np.asarray(default, float).copy() if value is None else \
            np.broadcast_to(np.asarray(value, float), (n,)).copy()
    return values


def _diagonal(signal: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """One column per joint j holding scale_j signal[:, j] in joint j's rows."""
    n, N = signal.shape[1], len(signal)
    block = np.zeros((n * N, n))
    for j in range(n):
        block[j * N:(j + 1) * N, j] = scale[j] * signal[:, j]
    return block


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


def columns(arm, names: list[str], q, qd, qdd, sign=None) -> np.ndarray:
    """The regressor (n*N rows, joint by joint; the columns of each name in turn) of the
    linear ``names`` at the samples q, qd, qdd (N x n each); ``sign`` (N x n): the
    Coulomb column's signal, by default sign(qd)."""
    own = arm.columns([name for name in names if name in arm.names], q, qd, qdd)
    out = []
    for name in names:
        if name in own:
            out.append(own[name])
            continue
        r2 = np.ones(arm.n) if arm.ratio is None or name not in MOTOR_KEYS else arm.ratio ** 2
        signal = {"motor.rotor_inertia": qdd, "motor.viscous_friction": qd,
                  "friction.viscous": qd,
                  "friction.coulomb": np.sign(qd) if sign is None else sign}[name]
        out.append(_diagonal(signal, r2))
    return np.concatenate(out, axis=1) if out else np.zeros((arm.n * len(q), 0))


def column_names(arm, names: list[str]) -> list[str]:
    """A label for every column of ``columns(arm, names, ...)``: ``name[j]`` (1-based
    joints), or the arm's own labels."""
    return [label for name in names for label in (
        arm.column_names(name) if name in arm.names
        else [f"{name}[{j + 1}]" for j in range(arm.n)])]


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
