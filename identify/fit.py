"""``hil identify LOG... --config CONFIG``: the serial arm's parameters fitted to logs.

1. The logs (identify.data) are filtered and stacked; they must come from one plant
   (the model, lengths, drive and gear ratios of CONFIG).
2. Motor electrical constants (voltage drives whose logs have currents): per joint,
   nonlinear least squares (scipy.optimize.least_squares) of the simplified motor's
   current i = (V - K_e r qd) / R over R and K_e, the current of a row under that row's
   command (as hil sim and the emulated drives record it). The joint torque is then
   r K_m (V - K_e r qd) / R with the fitted constants (without currents: the config's),
   from the logged voltage, which carries no measurement noise. A torque drive's torque
   is the logged command.
3. The linear parameters (identify.regressor): least squares on the base parameters of the
   named columns; the columns not named are held at CONFIG's values. With Coulomb friction
   (fitted, or nonzero in CONFIG) a joint's rows where it moves slower than REVERSAL_RATE
   are dropped: it may stick there, held by less than the Coulomb level. K_m (motor.kt)
   scales the drive's torque as the link parameters scale the arm's: it is fitted (one
   more linear column per joint, -r i) only where the torques of the parameters held at
   CONFIG's values fix the scale (_scale_fixed), else reported not identifiable alone
   and held. A base parameter whose column, scaled by its value in CONFIG, adds less
   than RANK_TOL of the torques' norm to what the others explain (|R_kk| of the pivoted
   QR) is *not identifiable* from these logs: no number is given, it is held at CONFIG's
   value. Rows are weighted per joint by the residual's standard deviation (two passes);
   the covariance is sigma^2 (Y^T Y)^-1.
4. The fitted config: CONFIG's TOML with the fitted values (the parameters not
   identifiable alone held at CONFIG's, the others so that every base parameter takes its
   fitted value), as plant.mass, com = h/m and inertia J_C = I - h^2/m.
5. The Stribeck hump (friction.static, friction.stribeck_velocity; _stribeck): per joint,
   nonlinear least squares of the linear fit's torque residual on every row between
   STUCK_RATE and SLOW_RATE against (static - coulomb) times the hump's filtered column
   (Samples.hump), the linear fit held; the linear fit leaves out the rows slower than
   HUMP_WIDTH v_s and runs twice (CONFIG's v_s, then the fitted one). Not identifiable
   with fewer than MIN_SLOW_ROWS independent rows in that band, or when v_s's standard
   deviation exceeds it.
"""
from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.linalg
import scipy.optimize
from hilrig.errors import ConfigError
from hilrig.identify.data import Log, Samples, default_cutoff, filtered_both, read
from hilrig.identify.regressor import (
    COMMON,
    FRICTION_KEYS,
    MOTOR_KEYS,
    Arm,
    BaseParameters,
    base_parameters,
    column_names,
    columns,
    preference,
    standard_values,
    width,
)
from hilrig.plant.factory import plant_model
from hilrig.schema import Config
from hilrig.settings.config import apply_override, locate, read_bounded, resolve, toml_value

if sys.version_info >= (3, 11):
    import tomllib
else:   # pragma: no cover
    import tomli as tomllib

ELECTRICAL = {"motor.resistance": "R_a, Ohm", "motor.back_emf_constant": "K_e, V s/rad"}
KT = "motor.kt"              # the torque constant K_m (config key plant.motor.torque_constant)
ALIASES = {"motor.torque_constant": KT}
STRIBECK_KEYS = ("friction.static", "friction.stribeck_velocity")   # fitted together
SLOW_RATE = 0.3       # rad/s: the Stribeck fit's rows are slower than this
VS_GRID = 12          # points of the Stribeck fit's first scan of v_s (log-spaced)
STUCK_RATE = 0.01     # rad/s: slower than this a joint may be stuck: in no fit
VS_MIN = 0.5 * STUCK_RATE   # rad/s: the least Stribeck velocity fitted (SLOW_RATE the
                            # largest): a narrower hump lies in the rows left out
MIN_SLOW_ROWS = 20    # rows per joint between STUCK_RATE and SLOW_RATE the hump needs
HUMP_WIDTH = 3.0      # with the hump, the linear fit leaves out the rows slower than this
                      # many Stribeck velocities (exp(-9): the hump is gone)
RANK_TOL = 1e-2
REVERSAL_RATE = 0.05  # rad/s: a joint with Coulomb friction slower than this may stick,
                      # and friction is not the Coulomb level there: its rows are dropped
UNITS = {"plant.inertia": "kg m^2", "plant.com": "kg m", "plant.mass": "kg",
         "plant.damping": "N m s/rad", "motor.rotor_inertia": "kg m^2",
         "motor.viscous_friction": "N m s/rad", "friction.viscous": "N m s/rad",
         "friction.coulomb": "N m", "motor.resistance": "Ohm",
         "motor.back_emf_constant": "V s/rad", KT: "N m/A", "friction.static": "N m",
         "friction.stribeck_velocity": "rad/s"}


@dataclass
class Fit:
    """What ``identify`` found.

    ``cutoff``: the position filter's, Hz; ``names``: the linear columns fitted (regressor
    names, in the order of identify.regressor.preference) and ``bp`` their base parameters; ``labels`` one per base
    parameter (its column and the dependent columns folded into it); ``beta``/``std`` its
    value and standard deviation (NaN where ``identifiable`` is False); ``electrical``:
    name[j] -> (value, std); ``torque_constant``: motor.kt[j] -> (value, std), or the
    reason K_m is not identifiable alone (str); ``residual_rms``: torque residual per joint (N m),
    ``current_rms`` (A, or None);
    ``pi``: the standard values of ``names``' columns written to the config; ``raw``: the
    fitted config as a raw dict (None when the fit is not physical: ``unphysical`` says
    why); ``arm``; ``prior`` (CONFIG's standard values of names).
    """

    cutoff: float
    names: list
    bp: BaseParameters
    labels: list
    beta: np.ndarray
    std: np.ndarray
    identifiable: np.ndarray
    electrical: dict
    residual_rms: np.ndarray
    current_rms: np.ndarray | None
    pi: np.ndarray
    prior: np.ndarray
    arm: Arm
    raw: dict | None = None
    dependent_labels: list = field(default_factory=list)
    torque_constant: dict = field(default_factory=dict)
    unphysical: str = ""
    delay: int = 0
    stribeck: dict = field(default_factory=dict)

    def base_of(self, cfg: Config) -> np.ndarray:
        """The base parameters another config's plant has (e.g. the true one of a test)."""
        values = standard_values(self.arm, cfg)
        return self.bp.beta(np.concatenate([values[n] for n in self.names]))

    def report(self) -> str:
        """The lines ``hil identify`` prints."""
        lines = [f"positions filtered at {self.cutoff:g} Hz (zero-phase Butterworth), "
                 "rates and accelerations by central differences; the commands act "
                 f"{self.delay} tick(s) after their rows (the link's)",
                 "base parameters (linear least squares; value +- standard deviation):"]
        width = max(len(label) for label in self.labels) if self.labels else 0
        for label, value, std, ok in zip(self.labels, self.beta, self.std, self.identifiable):
            unit = self.arm.unit(label) or UNITS[label.split("[")[0]]
            lines.append(f"  {label:<{width}}  " + (f"{value:.6g} +- {std:.2g} {unit}" if ok
                                                     else "not identifiable (not excited by "
                                                          "these logs: the regressor's rank)"))
        for label in self.dependent_labels:
            lines.append(f"  {label}")
        if self.torque_constant:
            lines.append("motor torque constants (linear least squares with the "
                         "parameters above):")
            for name, found in self.torque_constant.items():
                lines.append(f"  {name}: {found}" if isinstance(found, str)
                             else f"  {name}  {found[0]:.6g} +- {found[1]:.2g} {UNITS[KT]}")
        if self.stribeck:
            lines.append(f"Stribeck friction (nonlinear least squares on the rows between "
                         f"{STUCK_RATE:g} and {SLOW_RATE:g} rad/s, the parameters above held):")
            for name, found in self.stribeck.items():
                lines.append(f"  {name}: {found}" if isinstance(found, str)
                             else f"  {name}  {found[0]:.6g} +- {found[1]:.2g} "
                                  f"{UNITS[name.split('[')[0]]}")
        if self.electrical:
            lines.append("motor electrical constants (nonlinear least squares on the currents):")
            for name, (value, std) in self.electrical.items():
                lines.append(f"  {name}  {value:.6g} +- {std:.2g} {UNITS[name.split('[')[0]]}")
        lines.append("residual RMS per joint: " + ", ".join(
            f"{r:.3g} N m" for r in self.residual_rms))
        if self.current_rms is not None:
            lines.append("current residual RMS per joint: " + ", ".join(
                f"{r:.3g} A" for r in self.current_rms))
        return "\n".join(lines)


def parse_names(text: str | None, cfg: Config, currents: bool) -> list[str]:
    """The parameters ``--fit`` names (comma-separated config keys; ``motor.x`` or
    ``plant.motor.x`` for the [plant.motor] keys, ``motor.kt`` or
    ``motor.torque_constant`` for K_m), or the defaults of the plant: the link inertias,
    first moments and masses and the joint damping, the [friction] keys viscous and
    coulomb where CONFIG gives them a nonzero value, plus for a voltage drive the rotor
    inertia and motor friction and, with currents, R and K_e. ConfigError (one line) for
    a name that does not exist or cannot be fitted here."""
    voltage = cfg.plant.drive != "torque"
    arm = regressor_of(cfg)
    values = standard_values(arm, cfg)
    if text is None:
        names = list(arm.default)
        if voltage:
            names += list(MOTOR_KEYS) + (list(ELECTRICAL) if currents else [])
        names += [key for key in FRICTION_KEYS if np.any(values[key])]
        static = cfg.friction.static
        if static is not None and np.any(np.asarray(static) > values["friction.coulomb"]):
            names += list(STRIBECK_KEYS)
        return names
    names = []
    for item in text.split(","):
        name = item.strip()
        name = name.removeprefix("plant.") if name.startswith("plant.motor.") else name
        if name:
            names.append(ALIASES.get(name, name))
    known = list(preference(arm)) + list(ELECTRICAL) + [KT] + list(STRIBECK_KEYS)
    for name in names:
        if name in STRIBECK_KEYS and "friction.coulomb" not in names and not np.any(
                values["friction.coulomb"]):
            raise ConfigError(f"--fit {name}: the Stribeck hump rises above the Coulomb "
                              "level; fit friction.coulomb with it (or set it in CONFIG)")
        if name not in known:
            raise ConfigError(f"--fit {name}: not a parameter hil identify fits on "
                              f"plant.model = {cfg.plant.model!r}; it fits {', '.join(known)}")
        if name in MOTOR_KEYS + tuple(ELECTRICAL) + (KT,) and not voltage:
            raise ConfigError(f"--fit {name}: the plant is torque-driven (plant.drive = "
                              "'torque'): it has no motors")
        if name in ELECTRICAL and not currents:
            raise ConfigError(f"--fit {name}: needs the motor currents, and the logs have none")
    if not names:
        raise ConfigError("--fit: names no parameter")
    if any(name in STRIBECK_KEYS for name in names):     # the two come together
        names = [n for n in names if n not in STRIBECK_KEYS] + list(STRIBECK_KEYS)
    return names


def regressor_of(cfg: Config):
    """The arm regressor of CONFIG's plant (identify.regressor.Arm's protocol): the plant
    trait ``regressor`` of its PlantModel, or, for a plant that provides
    "planar_arm_regressor", identify.regressor.Arm. ConfigError (one line) for a plant
    with neither."""
    model = plant_model(cfg.plant.model)
    if model.regressor is not None:
        return model.regressor(cfg)
    if "planar_arm_regressor" in model.provides:
        return Arm.of(cfg)
    raise ConfigError(f"plant.model = {cfg.plant.model!r}: hil identify fits an arm whose "
                      "torques are linear in its parameters (a planar serial arm, a URDF "
                      "arm); this plant has no regressor")


def check_same_plant(logs: list[Log], cfg: Config, arm) -> None:
    """ConfigError (one line) unless every log ran the plant CONFIG describes: the same
    model, drive, gear ratios and the arm's own keys (``arm.keys``: the serial arm's
    lengths, a URDF arm's file and chain)."""
    what = ("plant.model", "plant.drive", "plant.motor.gear_ratio") + tuple(
        f"plant.{key}" for key in arm.keys)

    def plant_of(c: Config) -> tuple:
        p = c.plant
        own = tuple(getattr(p, key, None) for key in arm.keys)
        return (p.model, p.drive, tuple(p.motor.gear_ratio) if p.drive != "torque" else ()) \
            + tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in own)
    want = plant_of(cfg)
    for log in logs:
        got = plant_of(log.cfg)
        if got != want:
            k = next(i for i in range(len(what)) if got[i] != want[i])
            raise ConfigError(f"{log.path}: logs of different plants: {what[k]} is "
                              f"{got[k]!r} there, {want[k]!r} in the config")


def _electrical(cfg: Config, s: Samples) -> tuple[dict, np.ndarray, np.ndarray]:
    """R and K_e per joint from the currents (module docstring, 2): ({name[j]: (value,
    std)}, their values as arrays (R, K_e)), and the current residual RMS per joint (A)."""
    m = cfg.plant.motor
    ratio = np.asarray(m.gear_ratio)
    out, R, Ke, rms = {}, np.array(m.resistance, float), np.array(m.back_emf_constant, float), []
    for j in range(len(ratio)):
        V, w, i = s.held[:, j], ratio[j] * s.qd[:, j], s.i[:, j]

        def residual(x, V=V, w=w, i=i):
            return i - (V - x[1] * w) / x[0]
        sol = scipy.optimize.least_squares(residual, [R[j], Ke[j]], x_scale="jac",
                                           bounds=([1e-9, 0.0], [np.inf, np.inf]))
        dof = max(len(i) - 2, 1)
        sigma2 = float(sol.fun @ sol.fun) / dof
        cov = sigma2 * np.linalg.pinv(sol.jac.T @ sol.jac)
        R[j], Ke[j] = sol.x
        out[f"motor.resistance[{j + 1}]"] = (R[j], math.sqrt(cov[0, 0]))
        out[f"motor.back_emf_constant[{j + 1}]"] = (Ke[j], math.sqrt(cov[1, 1]))
        rms.append(math.sqrt(sigma2 * dof / len(i)))
    return out, np.array([R, Ke]), np.array(rms)


def _torques(cfg: Config, s: Samples, R: np.ndarray, Ke: np.ndarray) -> np.ndarray:
    """The joint torques (N x n, N m) the drives put on the arm (module docstring, 2)."""
    if cfg.plant.drive == "torque":
        return s.u
    m = cfg.plant.motor
    ratio, Km = np.asarray(m.gear_ratio), np.asarray(m.torque_constant)
    return ratio * Km * (s.u - Ke * ratio * s.qd) / R


def raw_of(config_path: str, overrides: list[str] = ()) -> dict:
    """CONFIG's TOML as a raw dict with the ``--set`` overrides applied: what a written
    config copies."""
    raw = tomllib.loads(read_bounded(locate(config_path)))
    for item in overrides:
        apply_override(raw, item)
    return raw


def identify(paths: list, cfg: Config, fit: str | None = None, cutoff: float | None = None,
             raw: dict | None = None) -> Fit:
    """Fit ``cfg``'s plant to the logs at ``paths`` (module docstring); ``cutoff``: the
    position filter's, Hz (None: identify.data.default_cutoff); ``raw``: CONFIG as
    written (raw_of), which the fitted config copies."""
    logs = [read(p) for p in paths]
    check_same_plant(logs, cfg, regressor_of(cfg))
    units = {log.unit for log in logs}
    if len(units) > 1:
        raise ConfigError(f"{logs[-1].path}: its commands are in {logs[-1].unit}, "
                          f"{logs[0].path}'s in {logs[0].unit}: fit logs of one link kind")
    cutoff = default_cutoff(logs) if cutoff is None else cutoff
    delays = {log.delay for log in logs}
    if len(delays) > 1:
        raise ConfigError(f"{logs[-1].path}: its link's commands act {logs[-1].delay} "
                          f"tick(s) late, {logs[0].path}'s {logs[0].delay}: fit logs of "
                          "one link kind")
    return _identify(logs, cfg, fit, cutoff, raw)


def _identify(logs: list[Log], cfg: Config, fit: str | None, cutoff: float,
              raw: dict | None) -> Fit:
    """``identify`` on the logs read, with the cut-off chosen."""
    arm = regressor_of(cfg)
    unit, delay = logs[0].unit, logs[0].delay
    both = [filtered_both(log, cutoff) for log in logs]
    samples = Samples.stack([decimated for decimated, _ in both])
    currents = samples.i is not None and cfg.plant.drive != "torque" and unit == "V"
    torque_mode = unit == "N m" and cfg.plant.drive != "torque"
    names = parse_names(fit, cfg, currents or (torque_mode and fit is not None))
    for name in names:
        if torque_mode and name in ELECTRICAL:
            raise ConfigError(f"--fit {name}: the logs' drives took joint torques "
                              f"(link.type = {logs[0].cfg.link.type!r}, torque mode): their "
                              "current loop hides R and K_e")
    electrical, current_rms = {}, None
    m = cfg.plant.motor
    R, Ke = np.asarray(m.resistance, float), np.asarray(m.back_emf_constant, float)
    if any(n in ELECTRICAL for n in names):
        electrical, (R, Ke), current_rms = _electrical(cfg, samples)
        electrical = {k: v for k, v in electrical.items() if k.split("[")[0] in names}
        R = R if "motor.resistance" in names else np.asarray(m.resistance, float)
        Ke = Ke if "motor.back_emf_constant" in names else np.asarray(m.back_emf_constant, float)
    values = standard_values(arm, cfg)
    free = [n for n in preference(arm) if n in names]
    held = [n for n in preference(arm) if n not in names and _acts(n, cfg)]

    def targets(s: Samples) -> tuple[np.ndarray, np.ndarray]:
        """The drive torques (N x n, N m) and, joint by joint, what is left of them
        after the torques of the columns held at CONFIG's values."""
        torque = s.u if unit == "N m" else _torques(cfg, s, R, Ke)
        left = torque.T.ravel()
        if held:
            left = left - columns(arm, held, s.q, s.qd, s.qdd, s.sign) @ np.concatenate(
                [values[n] for n in held])
        return torque, left
    tau, y = targets(samples)
    q, qd, qdd, sign = samples.q, samples.qd, samples.qdd, samples.sign
    coulomb = "friction.coulomb" in names or np.any(values["friction.coulomb"])
    hump = STRIBECK_KEYS[0] in names
    vs = np.asarray(cfg.friction.stribeck_velocity, float) * np.ones(arm.n)
    every = np.repeat(np.arange(arm.n), len(q))
    prior = np.concatenate([values[n] for n in free]) if free else np.zeros(0)
    bp = base_parameters(arm, free)
    found: dict = {}
    Y_base = columns(arm, free, q, qd, qdd, sign)[:, bp.base]
    if hump:      # every row (the hump is narrow): its torques and columns, once
        dense = Samples.stack([every for _, every in both])
        torque, left = targets(dense)
        model = columns(arm, free, dense.q, dense.qd, dense.qdd, dense.sign)[:, bp.base]
    for _ in range(2 if hump else 1):     # with the hump: again, clear of the fitted one
        rate = np.maximum(REVERSAL_RATE, HUMP_WIDTH * vs) if hump else REVERSAL_RATE
        keep = _away_from_reversals(samples, rate) if coulomb else np.ones(len(y), bool)
        joint = every[keep]
        Y_all, y_all = Y_base, y
        beta0 = bp.beta(prior)
        norm = float(np.linalg.norm(y[keep]))
        kt, fixed = {}, False
        if KT in names:
            km0 = np.asarray(m.torque_constant, float)
            drive = np.zeros((len(y), arm.n))      # the torque per unit K_m of each joint, A
            drive[np.arange(len(y)), every] = (tau / km0).T.ravel()
            fixed = _scale_fixed(Y_all[keep], (drive * km0)[keep], norm)
            if fixed:
                Y_all = np.concatenate([Y_all, -drive], axis=1)
                y_all = y - drive @ km0
                beta0 = np.concatenate([beta0, km0])
        beta, std, ok, rms = _linear(Y_all[keep], y_all[keep], beta0, joint, arm.n, norm)
        if hump:      # on every row: the hump is narrow
            fitted_left = left + (torque * (beta[len(bp.base):] / km0 - 1.0)).T.ravel() \
                if KT in names and fixed else left      # the drive torques at the fitted K_m
            residual = (fitted_left - model @ beta[:len(bp.base)]).reshape(arm.n, -1).T
            found, hump_values = _stribeck(dense, residual, cfg, _coulomb(
                arm, free, bp, beta, std, ok, values["friction.coulomb"]),
                len(dense.q) / len(samples.q), found)
            vs = hump_values["friction.stribeck_velocity"]
    if KT in names:
        for j in range(arm.n):
            at = len(bp.base) + j
            kt[f"{KT}[{j + 1}]"] = (beta[at], std[at]) if fixed and ok[at] else (
                ("not identifiable (not excited by these logs: the regressor's rank)"
                 if fixed else
                 "not identifiable alone (K_m scales the drive's torques as the fitted "
                 "parameters scale the arm's: with every torque fitted, only the ratios "
                 "of the K_m show; hold a link parameter at a known value, or take K_m "
                 "from the data sheet)") + f"; held at {m.torque_constant[j]:.6g}")
        beta, std, ok = beta[:len(bp.base)], std[:len(bp.base)], ok[:len(bp.base)]
    labels, dependent_labels = _labels(bp, column_names(arm, free), prior)
    pi = bp.standard(beta, prior)
    result = Fit(cutoff, free, bp, labels, np.where(ok, beta, np.nan),
                 np.where(ok, std, np.nan), ok, electrical, rms, current_rms, pi, prior, arm,
                 dependent_labels=dependent_labels, torque_constant=kt, delay=delay,
                 stribeck=found)
    constants = {k.split("[")[0]: (R if k.startswith("motor.resistance") else Ke)
                 for k in electrical}
    if any(not isinstance(v, str) for v in kt.values()):
        constants["motor.torque_constant"] = np.array(
            [v[0] if not isinstance(v, str) else m.torque_constant[j]
             for j, v in enumerate(kt.values())])
    if found:
        constants.update(hump_values)
    try:
        result.raw = fitted_raw(cfg, raw or {}, arm, free, pi, constants)
    except ConfigError as exc:     # reported when a config is asked for (hil identify --out)
        result.unphysical = str(exc)
    return result


def _away_from_reversals(samples: Samples, rate) -> np.ndarray:
    """The rows (joint by joint) a fit with Coulomb friction uses: those of a joint not
    slower than ``rate`` (rad/s, per joint or one for all; module docstring, 3)."""
    return (np.abs(samples.qd) >= rate).T.ravel()


def _coulomb(arm, free: list, bp: BaseParameters, beta: np.ndarray, std: np.ndarray,
             ok: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each joint's Coulomb level and its standard deviation (N m): the linear fit's where
    it is an identifiable base parameter, else CONFIG's (``held``) with none."""
    n = arm.n
    level, spread = held.astype(float).copy(), np.zeros(n)
    cols = column_names(arm, free)
    for j in range(n):
        name = f"friction.coulomb[{j + 1}]"
        if name in cols and cols.index(name) in bp.base:
            at = list(bp.base).index(cols.index(name))
            if ok[at]:
                level[j], spread[j] = beta[at], std[at]
    return level, spread


def _stribeck(samples: Samples, residual: np.ndarray, cfg: Config,
              coulomb: tuple[np.ndarray, np.ndarray], correlated: float,
              before: dict | None = None) -> tuple[dict, dict]:
    """friction.static and friction.stribeck_velocity per joint (module docstring, 5):
    ({name[j]: (value, std) or why not}, the values for the fitted config), from the
    linear fit's torque ``residual`` (N x n, N m) on each joint's rows between STUCK_RATE
    and SLOW_RATE, where the hump (static - coulomb) exp(-(qd/v_s)^2) sign(qd), filtered
    as the commands (Samples.hump), is all that is left. ``samples``: every row of the
    logs, whose residuals are ``correlated`` rows at a time (the decimation step of the
    linear fit's): the covariance from the Jacobian is scaled by it. ``before``: a
    previous pass's result, where it starts (else at CONFIG's values)."""
    level, level_std = coulomb
    f = cfg.friction
    n = len(level)
    static0 = np.asarray(f.static if f.static is not None else level, float) * np.ones(n)
    vs0 = np.asarray(f.stribeck_velocity, float) * np.ones(n)
    static, vs, out = static0.copy(), vs0.copy(), {}
    for j in range(n):
        rate = np.abs(samples.qd[:, j])
        rows = (rate >= STUCK_RATE) & (rate < SLOW_RATE)
        if rows.sum() < MIN_SLOW_ROWS * correlated:
            why = (f"not identifiable (about {rows.sum() / correlated:.0f} independent rows "
                   f"between {STUCK_RATE:g} and {SLOW_RATE:g} rad/s in these logs, it needs "
                   f"{MIN_SLOW_ROWS}: reverse the joint slowly)")
            out[f"friction.static[{j + 1}]"] = f"{why}; held at {static0[j]:.6g}"
            out[f"friction.stribeck_velocity[{j + 1}]"] = f"{why}; held at {vs0[j]:.6g}"
            continue
        r = residual[rows, j]

        def projected(log_vs, j=j, rows=rows, r=r):
            """The hump's height at v_s = exp(log_vs) by linear least squares (>= 0) and
            the squared residual left (variable projection: the height eliminated)."""
            h = samples.hump(math.exp(log_vs), j)[rows]
            height = max(float(h @ r) / max(float(h @ h), 1e-300), 0.0)
            left = r - height * h
            return float(left @ left), height
        before_vs = before.get(f"friction.stribeck_velocity[{j + 1}]") if before else None
        start = before_vs[0] if isinstance(before_vs, tuple) else min(vs0[j], SLOW_RATE / 3)
        # a coarse scan of log v_s over its bounds and the start, then Brent's method on
        # the bracket around the best
        grid = np.union1d(np.linspace(math.log(VS_MIN), math.log(SLOW_RATE), VS_GRID),
                          [math.log(start)])
        costs = [projected(g)[0] for g in grid]
        best = int(np.argmin(costs))
        sol = scipy.optimize.minimize_scalar(
            lambda g: projected(g)[0], method="bounded",
            bounds=(grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]),
            options={"xatol": 1e-4})
        x = np.array([projected(sol.x)[1], math.exp(sol.x)])
        at_bound = min(abs(sol.x - grid[0]), abs(sol.x - grid[-1])) < 1e-3
        h = samples.hump(x[1], j)[rows]
        fun = r - x[0] * h
        jac = -np.stack([h, x[0] * samples.hump(x[1], j, derivative=True)[rows]], axis=1)
        dof = max(len(r) - 2, 1)
        cov = correlated * float(fun @ fun) / dof * np.linalg.pinv(jac.T @ jac)
        resolved = x[0] > 0.0 and np.linalg.matrix_rank(jac) == 2    # a hump that acts
        if at_bound or not resolved or not math.sqrt(cov[1, 1]) < x[1]:
            why = ("not identifiable (no hump above the Coulomb level in these logs)"
                   if not resolved else
                   "not identifiable (the hump is not resolved by these logs: v_s "
                   f"{x[1]:.3g} +- {math.sqrt(cov[1, 1]):.2g} rad/s"
                   + (f", at the bound of {VS_MIN:g} to {SLOW_RATE:g} rad/s)" if at_bound
                      else ")"))
            out[f"friction.static[{j + 1}]"] = f"{why}; held at {static0[j]:.6g}"
            out[f"friction.stribeck_velocity[{j + 1}]"] = f"{why}; held at {vs0[j]:.6g}"
            continue
        static[j], vs[j] = level[j] + x[0], x[1]
        out[f"friction.static[{j + 1}]"] = (static[j], math.sqrt(cov[0, 0] + level_std[j] ** 2))
        out[f"friction.stribeck_velocity[{j + 1}]"] = (vs[j], math.sqrt(cov[1, 1]))
    values = {"friction.static": np.maximum(static, level),
              "friction.stribeck_velocity": vs}
    return out, values


def _acts(name: str, cfg: Config) -> bool:
    """Whether the column ``name`` acts on this config's plant (motor columns: a voltage
    drive)."""
    return name not in MOTOR_KEYS or cfg.plant.drive != "torque"


def _scale_fixed(Y: np.ndarray, drive: np.ndarray, norm: float) -> bool:
    """Whether K_m can be fitted with the columns Y: whether the drive torques (``drive``'s
    columns, one per joint, at CONFIG's K_m) are independent of Y's span, every direction
    of them adding more than RANK_TOL of the torques' norm ``norm``. When Y holds every
    torque acting on the arm, K_m and the parameters scaled together explain the logs
    equally well (Y beta = r K_m i has the solution (s beta, s K_m) for any s): only the
    torques of parameters held at CONFIG's values fix the scale."""
    left = drive - Y @ np.linalg.lstsq(Y, drive, rcond=None)[0] if Y.shape[1] else drive
    return bool(np.linalg.svd(left, compute_uv=False)[-1] > RANK_TOL * norm)


def _linear(Y: np.ndarray, y: np.ndarray, beta0: np.ndarray, joint: np.ndarray, n: int,
            norm: float):
    """Weighted least squares of y = Y beta (module docstring, 3), ``joint`` the joint of
    each row, ``norm`` the torques' norm (N m) the rank test compares with: (beta, std,
    identifiable, residual RMS per joint); the parameters not identifiable keep beta0."""
    scale = np.where(np.abs(beta0) > 1e-12, np.abs(beta0), 1.0)
    ok = np.zeros(Y.shape[1], bool)
    if Y.shape[1]:
        _, Rq, piv = scipy.linalg.qr(Y * scale, mode="economic", pivoting=True)
        strong = np.abs(np.diag(Rq)) > RANK_TOL * norm
        ok[piv[:int(np.argmin(strong)) if not strong.all() else len(strong)]] = True
    target = y - Y[:, ~ok] @ beta0[~ok]
    A = Y[:, ok]
    weights = np.ones(len(y))
    count = np.maximum(np.bincount(joint, minlength=n), 1)
    for _ in range(2):
        sol = np.linalg.lstsq(A * weights[:, None], target * weights, rcond=None)[0]
        res = target - A @ sol
        per_joint = np.sqrt(np.bincount(joint, res ** 2, minlength=n) / count)
        weights = 1.0 / np.maximum(per_joint, 1e-12)[joint]
    Aw, rw = A * weights[:, None], res * weights
    dof = max(len(y) - A.shape[1], 1)
    cov = float(rw @ rw) / dof * np.linalg.pinv(Aw.T @ Aw)
    beta, std = beta0.copy(), np.full(len(beta0), np.nan)
    beta[ok], std[ok] = sol, np.sqrt(np.diag(cov))
    return beta, std, ok, per_joint


def _labels(bp: BaseParameters, cols: list[str], prior: np.ndarray) -> tuple[list, list]:
    """A label per base parameter (its column plus the dependent ones folded into it, with
    their factors) and a line per dependent column (one folded into no base parameter
    acts on no joint: its column of the regressor is zero)."""
    labels = []
    for row, b in enumerate(bp.base):
        terms = [f"{'+' if bp.K[row, k] > 0 else '-'} {abs(bp.K[row, k]):.4g} {cols[d]}"
                 for k, d in enumerate(bp.dependent) if abs(bp.K[row, k]) > 1e-9]
        labels.append(" ".join([cols[b]] + terms))
    dependent = [f"{cols[d]}: " + ("not identifiable alone (it acts only in the base "
                                   "parameters above)" if np.any(np.abs(bp.K[:, k]) > 1e-9)
                                   else "not identifiable (it acts on no joint of this arm: "
                                   "its column of the regressor is zero)")
                 + f"; held at {prior[d]:.6g}" for k, d in enumerate(bp.dependent)]
    return labels, dependent


def fitted_raw(cfg: Config, raw: dict, arm, names: list, pi: np.ndarray,
               electrical: dict) -> dict:
    """CONFIG's ``raw`` TOML with the fitted values (module docstring, 4): the arm's own
    through ``arm.write``, the motors' and the joints' friction as their keys. ConfigError
    when the fitted values are not physical or not a config's (arm.write)."""
    raw = copy.deepcopy(raw) or {"plant": {"model": cfg.plant.model}}
    plant = raw.setdefault("plant", {})
    values, at = {}, 0
    for name in names:
        values[name] = pi[at:at + width(arm, name)]
        at += width(arm, name)
    arm.write(plant, {name: v for name, v in values.items() if name in arm.names}, cfg)
    for name in names:
        if name not in COMMON:
            continue
        table, key = name.split(".")
        if table == "motor":
            plant.setdefault("motor", {})[key] = values[name].tolist()
        elif table == "friction":
            raw.setdefault("friction", {})[key] = values[name].tolist()
    for name, value in electrical.items():     # motor constants, and the Stribeck hump's
        table = raw.setdefault("friction", {}) if name.startswith("friction.") else \
            plant.setdefault("motor", {})
        table[name.split(".")[1]] = np.asarray(value).tolist()
    resolve(raw)
    return raw


def to_toml(raw: dict, header: str = "") -> str:
    """A raw config as TOML: top-level values, then each table (nested ones as [a.b];
    lists of tables as [[a]])."""
    lines = [f"# {line}" for line in header.splitlines()]

    def table(node: dict, prefix: str) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict)
                   and not (isinstance(v, list) and v and isinstance(v[0], dict))}
        if prefix and (scalars or not node):
            lines.append(f"\n[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {toml_value(v)}")
        for k, v in node.items():
            name = f"{prefix}.{k}" if prefix else k
            if isinstance(v, dict):
                table(v, name)
            elif isinstance(v, list) and v and isinstance(v[0], dict):
                for item in v:
                    lines.append(f"\n[[{name}]]")
                    lines.extend(f"{a} = {toml_value(b)}" for a, b in item.items())
    table(raw, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def write_config(raw: dict, path: str | Path, header: str) -> None:
    """Write a raw config as TOML to ``path``, checked to load again."""
    Path(path).write_text(to_toml(raw, header), encoding="utf-8")
