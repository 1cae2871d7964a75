"""``hil excite CONFIG --out EXCITE.toml``: an exciting trajectory for identification.

The trajectory is controllers.reference's FOURIER reference: per joint a finite Fourier
series with L harmonics of the base frequency f (w = 2 pi f),

    q(t) = q_c + sum_l a_l/(w l) sin(w l t) - b_l/(w l) cos(w l t),

periodic with period 1/f, so that several periods can be averaged and the data are
band-limited to L f. The offset q_c is chosen so that q(0) is the plant's q0, and
sum_l a_l = 0, sum_l l b_l = 0 make the rate and the acceleration zero at t = 0: the
trajectory starts from rest where the arm is.

The coefficients minimise the condition number of the base regressor (identify.regressor,
the parameters ``hil identify`` fits by default, columns scaled to unit norm) on
SAMPLES_PER_HARMONIC x L points per period, together with the excitation's size (the cost
is log cond - log s, s the RMS torque of the regressor's weakest direction with the base
parameters at CONFIG's values: the condition number alone does not grow with the
amplitude, while the parameters' signal-to-noise ratio does), under |q - q0| <=
max_position, |qd| <= max_rate and |qdd| <= max_acceleration at those points
(scipy.optimize.minimize, SLSQP, from a start drawn with ``seed``: the same arguments give
the same trajectory).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
from hilrig.errors import ConfigError
from hilrig.identify.fit import parse_names, regressor_of
from hilrig.identify.regressor import (
    base_parameters,
    columns,
    preference,
    standard_values,
)
from hilrig.schema import Config
from hilrig.settings.config import resolve

SAMPLES_PER_HARMONIC = 16


@dataclass
class Excitation:
    """The trajectory found: coefficients a, b (n x L, rad/s), base frequency (Hz), offset
    q_c (rad), the condition number of the base regressor along it, and the config to run
    (raw dict)."""

    a: np.ndarray
    b: np.ndarray
    frequency: float
    offset: np.ndarray
    condition: float
    raw: dict


def trajectory(a: np.ndarray, b: np.ndarray, frequency: float, offset: np.ndarray,
               t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, qd, qdd (len(t) x n; rad, rad/s, rad/s^2) of the Fourier series (module
    docstring), as controllers.reference computes it for t >= t_start = 0."""
    w = 2.0 * math.pi * frequency
    wl = w * np.arange(1, a.shape[1] + 1)                       # L
    s, c = np.sin(np.outer(t, wl)), np.cos(np.outer(t, wl))    # N x L
    q = offset + s @ (a / wl).T - c @ (b / wl).T
    qd = c @ a.T + s @ b.T
    qdd = c @ (b * wl).T - s @ (a * wl).T
    return q, qd, qdd


def excite(cfg: Config, raw: dict, harmonics: int = 5, frequency: float = 0.1,
           max_position: float = 0.8, max_rate: float = 1.5, max_acceleration: float = 5.0,
           periods: int = 2, seed: int = 0) -> Excitation:
    """The exciting trajectory for ``cfg``'s arm (module docstring) and the config that runs
    it for ``periods`` periods: CONFIG's ``raw`` TOML (identify.fit.raw_of) with
    controller.reference = "fourier" and its keys, and sim.duration (rounded to whole
    steps of sim.dt). ConfigError (one line) for a config whose controller follows no
    reference or whose plant hil identify does not fit."""
    arm = regressor_of(cfg)
    if cfg.controller.type not in ("pd", "feedforward"):
        raise ConfigError(f"controller.type = {cfg.controller.type!r}: an exciting trajectory "
                          "is a reference; hil excite needs controller.type 'pd' or "
                          "'feedforward'")
    for name, value in (("--harmonics", harmonics), ("--frequency", frequency),
                        ("--max-position", max_position), ("--max-rate", max_rate),
                        ("--max-acceleration", max_acceleration), ("--periods", periods)):
        if not value > 0:
            raise ConfigError(f"{name} {value}: must be > 0")
    n, L = arm.n, harmonics
    q0 = np.asarray(cfg.plant.q0[:n], float)
    names = [name for name in preference(arm) if name in parse_names(None, cfg, currents=False)]
    base = base_parameters(arm, names).base
    t = np.arange(SAMPLES_PER_HARMONIC * L) / (SAMPLES_PER_HARMONIC * L * frequency)
    order = np.arange(1, L + 1)
    w = 2.0 * math.pi * frequency

    def unpack(x):
        a, b = x[:n * L].reshape(n, L), x[n * L:].reshape(n, L)
        return a, b, q0 + (b / (w * order)).sum(axis=1)

    values = standard_values(arm, cfg)
    prior = np.abs(base_parameters(arm, names).beta(np.concatenate([values[k] for k in names])))
    prior = np.where(prior > 1e-12, prior, 1.0)

    def regressor_at(x):
        a, b, offset = unpack(x)
        return columns(arm, names, *trajectory(a, b, frequency, offset, t))[:, base]

    def condition(x, Y=None):
        Y = regressor_at(x) if Y is None else Y
        sv = np.linalg.svd(Y / np.maximum(np.linalg.norm(Y, axis=0), 1e-12), compute_uv=False)
        return sv[0] / max(sv[-1], 1e-12)

    def cost(x):
        """log cond - log of the weakest direction's torque (RMS, N m, at CONFIG's values)."""
        Y = regressor_at(x)      # once: a URDF arm's regressor is the cost's dearest part
        weakest = np.linalg.svd(Y * prior, compute_uv=False)[-1] / math.sqrt(len(Y))
        return math.log(condition(x, Y)) - math.log(max(weakest, 1e-12))

    def limits(x):
        a, b, offset = unpack(x)
        q, qd, qdd = trajectory(a, b, frequency, offset, t)
        return np.concatenate([(max_position ** 2 - (q - q0) ** 2).ravel(),
                               (max_rate ** 2 - qd ** 2).ravel(),
                               (max_acceleration ** 2 - qdd ** 2).ravel()])

    def at_rest(x):
        a, b, _ = unpack(x)
        return np.concatenate([a.sum(axis=1), (b * order).sum(axis=1)])

    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-1.0, 1.0, 2 * n * L) * min(max_rate, max_position * w) / (2 * L)
    sol = scipy.optimize.minimize(cost, x0, method="SLSQP",
                                  constraints=[{"type": "ineq", "fun": limits},
                                               {"type": "eq", "fun": at_rest}],
                                  options={"maxiter": 80, "ftol": 1e-4})
    x = sol.x
    if limits(x).min() < -1e-6 or np.abs(at_rest(x)).max() > 1e-6:
        raise ConfigError("hil excite: no trajectory found within the limits (widen "
                          "--max-position, --max-rate or --max-acceleration, or change "
                          "--harmonics or --frequency)")
    a, b, offset = unpack(x)
    raw = copy.deepcopy(raw)
    raw.setdefault("controller", {}).update(
        reference="fourier", frequency=float(frequency), harmonics=int(L),
        fourier_a=a.ravel().tolist(), fourier_b=b.ravel().tolist(),
        target=offset.tolist(), t_start=0.0)
    dt = cfg.sim.dt
    raw.setdefault("sim", {})["duration"] = round(periods / frequency / dt) * dt   # whole steps
    resolve(raw)
    return Excitation(a, b, frequency, offset, condition(x), raw)
