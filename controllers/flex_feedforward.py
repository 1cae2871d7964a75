"""Paper 002's inverse-dynamics algorithm (§3) for the flexible P-R robot (plant.flex_rp.robot),
as a feed-forward controller with PD on the joint errors (``controller.type =
"flex_feedforward"``).

Before the run, on the grid t_k = k sim.dt over sim.duration:

1. Rigid inverse kinematics of the desired tip path
   x_E = cx - ax sin(w t - pi/2) = cx + ax cos(w t),  y_E = cy + ay sin(w t)
   (controller.path_centre = [cx, cy], path_amplitude = [ax, ay], path_rate = w; the
   paper's: [0.25, 0], [0.1, 0.1], 1 rad/s). With the tip at (L1 + L2 cos q,
   d + L2 sin q): cos q = (x_E - L1) / L2, q = s acos(...), d = y_E - L2 sin q, where
   s = +1 (controller.branch = "positive", q >= 0, the default) or -1 ("negative").
   Rates and accelerations from the Jacobian: q' = -x_E' / (L2 sin q),
   q'' = -(x_E'' / L2 + cos q q'^2) / sin q, d' = y_E' - L2 cos q q',
   d'' = y_E'' + L2 sin q q'^2 - L2 cos q q''.
   The paper's path starts stretched (x_E(0) = L1 + L2, q = 0), where the Jacobian is
   singular and both branches meet. There x_E' = 0 too and the limits are taken:
   x_E'' = -L2 q'^2 gives q'(0) = s sqrt(-x_E''(0) / L2) (1/sqrt(3) rad/s on the paper's
   path: the arm must already be turning) and x_E''' = -3 L2 q' q'' gives q''(0). A path
   outside the reach |x_E - L1| <= L2 is a ConfigError.
2. Rigid inverse dynamics: [F, tau] = M_r(q) [d'', q''] + c_r, with the rigid P-R robot
   (link 2 rigid with its payload: the flexible model at e = 0).
3. Flexible forward dynamics: the flexible plant (the config's own, torque-driven,
   stepped by plant.rosenbrock at sim.dt whatever sim.integrator says) under [F, tau],
   from the rigid start, gives the deflections e(t). The paper's robot is driven by the
   continuous force history, so each step holds the force of its midpoint,
   [F, tau](t_k + h/2), which matches the continuous input's effect on the step to
   second order (holding the step's first sample delays the whole response by h/2).
4. Flexible inverse dynamics: [F, tau] = rows d, q of M(Q) Q'' + bias(Q, Q') with
   Q = [d_r, q_r, e], Q'' = [d_r'', q_r'', e''] (the paper's Fig. 6). e'' is the
   derivative of the forward run's elastic rates e'(t_k) (central differences, second
   order one-sided at the ends: ``trajectory_acceleration``), the continuous robot's
   acceleration. It is not the model's acceleration evaluated at a grid state with the
   force of that instant: after a held step the fast modes sit in equilibrium with the
   previous force, and with the paper's massless hub (the hub turns against the small
   inertia of the elements next to it: damped modes at about -3e5 1/s at n = 5, -5e6 at
   n = 10) such a sample jumps with the force step, by far more than the elastic
   correction itself, and more so the finer the elements (tests/test_flex_continuous.py
   compares with a continuous-time solution of the paper's robot).

controller.feedforward chooses which pair the law adds: "rigid" (step 2) or "flexible"
(step 4, the paper's result). The law (compiled, ``law`` below) then commands, per joint,

    u = u_ff(t) + kp (r(t) - pos) + kd (r'(t) - vel)          (N, N m)

with r, r', u_ff interpolated linearly in the table and held at its last row after it.
Start the plant at the reference's first row (plant.start_joints, plant.start_rates:
``initial_state``; the paper's: [0, 0] and [0.1 - 0.3/sqrt(3), 1/sqrt(3)]).
"""
from __future__ import annotations

import dataclasses
import math
import types

import numpy as np
from hilrig.controllers.interface import LAW_SIGNATURE, Controller, ControllerSpec
from hilrig.errors import ConfigError
from hilrig.plant.flex_rp import robot as flex_rp
from hilrig.plant.factory import plant_from_config, plant_model
from hilrig.plant.model import PlantError
from hilrig.schema import Config, Key
from numba import cfunc

KEYS = {
    "kp": Key("floats", 0.0, length=2, scalar_ok=True, minimum=0.0,
              doc="PD gains on [d, q], >= 0: N/m, N m/rad"),
    "kd": Key("floats", 0.0, length=2, scalar_ok=True, minimum=0.0,
              doc="PD gains on [d', q'], >= 0: N s/m, N m s/rad"),
    "feedforward": Key("str", "flexible", choices=("rigid", "flexible"),
                       doc="rigid: the rigid model's inverse dynamics; flexible: the paper's "
                           "flexible inverse dynamics along the deflections it causes"),
    "branch": Key("str", "positive", choices=("positive", "negative"),
                  doc="inverse kinematics branch: q >= 0 or q <= 0; the plant must "
                      "start on it (plant.start_joints, plant.start_rates)"),
    "path_centre": Key("floats", [0.25, 0.0], length=2, doc="[cx, cy] of the tip path, m"),
    "path_amplitude": Key("floats", [0.1, 0.1], length=2, doc="[ax, ay], m"),
    "path_rate": Key("float", 1.0, positive=True, doc="w, rad/s"),
}

# params layout of the law: header, then rows of [d, q, d', q', F, tau]
L_ROWS, L_DT, L_KP, L_KD = 0, 1, 2, 4
L_TABLE = 6
ROW = 6


@dataclasses.dataclass(frozen=True)
class Path:
    """The desired tip path (controller.path_*): x_E = cx + ax cos(w t), y_E = cy + ay sin(w t)."""

    centre: tuple
    amplitude: tuple
    rate: float

    def tip(self, t: np.ndarray) -> np.ndarray:
        """(x, y) and their first three derivatives, shape (4, 2, len(t))."""
        (cx, cy), (ax, ay), w = self.centre, self.amplitude, self.rate
        c, s = np.cos(w * t), np.sin(w * t)
        return np.array([[cx + ax * c, cy + ay * s], [-ax * w * s, ay * w * c],
                         [-ax * w ** 2 * c, -ay * w ** 2 * s], [ax * w ** 3 * s, -ay * w ** 3 * c]])


def rigid_inverse_kinematics(plant, path: Path, t: np.ndarray, branch: str) -> np.ndarray:
    """Joint references [d, q, d', q', d'', q''] (rows; m, rad, ...) along the path at the
    times t (s), on the chosen branch (module docstring; the stretched pose by its limits)."""
    l1, l2 = plant.link1_length, plant.link2_length
    sign = 1.0 if branch == "positive" else -1.0
    t = np.asarray(t, dtype=float)
    (x, y), (xd, yd), (xdd, ydd), (xddd, _) = path.tip(t)
    # 1 - cos q = (L1 + L2 - x_E) / L2 without cancellation near the stretched pose:
    # x_E = cx + ax cos(w t), 1 - cos(w t) = 2 sin^2(w t / 2)
    (cx, _), (ax, _), w = path.centre, path.amplitude, path.rate
    gap = l1 + l2 - cx - ax
    if abs(gap) < 1e-12 * l2:
        gap = 0.0       # the path starts exactly stretched (up to the rounding of its keys)
    margin = (gap + 2.0 * ax * np.sin(0.5 * w * t) ** 2) / l2
    if np.any(margin < -1e-12) or np.any(margin > 2.0 + 1e-12):
        worst = float(t[np.argmax(np.maximum(-margin, margin - 2.0))])
        raise ConfigError(f"controller.path_*: the path leaves the reach of link 2 "
                          f"(|x_E - L1| > L2 = {l2} m at t = {worst:.3f} s)")
    margin = np.clip(margin, 0.0, 2.0)
    cos_q = 1.0 - margin
    q = sign * np.arctan2(np.sqrt(margin * (2.0 - margin)), cos_q)
    sin_q = np.sin(q)
    singular = np.abs(sin_q) < 1e-9
    safe = np.where(singular, 1.0, sin_q)
    qd = np.where(singular, 0.0, -xd / (l2 * safe))
    qdd = np.where(singular, 0.0, -(xdd / l2 + cos_q * qd ** 2) / safe)
    for k in np.flatnonzero(singular):      # stretched (or folded): the limits
        if abs(xd[k]) > 1e-9:
            raise ConfigError(f"controller.path_*: the path crosses the boundary of the "
                              f"reach at t = {t[k]:.3f} s with a radial speed; no joint "
                              "rates can follow it")
        curvature = -xdd[k] / (l2 * cos_q[k])
        if curvature < 0.0:
            raise ConfigError(f"controller.path_*: the path leaves the reach at "
                              f"t = {t[k]:.3f} s")
        qd[k] = sign * math.sqrt(curvature)
        qdd[k] = -xddd[k] / (3.0 * l2 * cos_q[k] * qd[k]) if qd[k] != 0.0 else 0.0
    d = y - l2 * sin_q
    dd = yd - l2 * cos_q * qd
    ddd = ydd + l2 * sin_q * qd ** 2 - l2 * cos_q * qdd
    return np.array([d, q, dd, qd, ddd, qdd])


def generalised_forces(params: np.ndarray, Q: np.ndarray, Qd: np.ndarray,
                       Qdd: np.ndarray) -> np.ndarray:
    """Rows d, q of M(Q) Q'' + bias(Q, Q') for each row of Q, Qd, Qdd (N, N m)."""
    nq = Q.shape[1]
    mass, bias = np.zeros((nq, nq)), np.zeros(nq)
    out = np.zeros((len(Q), 2))
    for k in range(len(Q)):
        flex_rp.mechanism(Q[k], Qd[k], params, mass, bias)
        out[k] = mass[:2] @ Qdd[k] + bias[:2]
    return out


def trajectory_acceleration(rates: np.ndarray, h: float) -> np.ndarray:
    """The accelerations of a run whose rates (rows on a grid of step h, s) are given: the
    rates' derivative along the run by central differences, second-order one-sided at
    the first and last rows (units of the rates per second). With a held input this is
    the motion's own acceleration, where the model's acceleration at a grid state jumps
    with the input's step (module docstring, step 4)."""
    return np.gradient(rates, h, axis=0, edge_order=2)


@dataclasses.dataclass
class Feedforward:
    """What the algorithm computed on the grid t (s): the rigid references (rows d, q, d',
    q', d'', q''), the rigid and flexible feed-forward [F, tau] (N, N m), and the flexible
    forward run under the rigid forces (its Q, Q' and the accelerations along it, Q'')."""

    t: np.ndarray
    rigid: np.ndarray
    force_rigid: np.ndarray
    force_flexible: np.ndarray
    forward_q: np.ndarray
    forward_qd: np.ndarray
    forward_qdd: np.ndarray


def compute(cfg: Config) -> Feedforward:
    """Steps 1-4 of the module docstring for a resolved flex_rp config."""
    plant_table, c, sim = cfg.plant, cfg.controller, cfg.sim
    h = sim.dt
    n = int(round(sim.duration / h))
    path = Path(tuple(c.path_centre), tuple(c.path_amplitude), c.path_rate)
    # the rigid references and forces on the half grid: t_k at even rows, midpoints odd
    half = rigid_inverse_kinematics(plant_table, path, np.arange(2 * n + 1) * (0.5 * h),
                                    c.branch)
    params = flex_rp.params(plant_table)
    nq = 2 + 2 * plant_table.elements
    zero = np.zeros((2 * n + 1, nq))
    Q, Qd, Qdd = zero.copy(), zero.copy(), zero.copy()
    Q[:, :2], Qd[:, :2], Qdd[:, :2] = half[0:2].T, half[2:4].T, half[4:6].T
    half_forces = generalised_forces(params, Q, Qd, Qdd)    # e = 0: the rigid model
    force_rigid, midpoint = half_forces[0::2], half_forces[1::2]
    ref, Q, Qd, Qdd = half[:, 0::2], Q[0::2], Qd[0::2], Qdd[0::2]
    torque_plant = dataclasses.replace(plant_table, drive="torque", q0=tuple(Q[0]),
                                       qd0=tuple(Qd[0]), start_joints=None, start_rates=None)
    plant = plant_from_config(cfg.replace(plant=torque_plant))
    fq, fqd = np.zeros((n + 1, nq)), np.zeros((n + 1, nq))
    try:
        for k in range(n + 1):
            fq[k], fqd[k] = plant.q, plant.qd
            if k < n:
                plant.step(midpoint[k], h, "rosenbrock")
    except PlantError as exc:
        raise ConfigError(f"controller.type = 'flex_feedforward': the flexible forward run "
                          f"under the rigid forces failed ({exc})") from exc
    fqdd = trajectory_acceleration(fqd, h)
    Q[:, 2:], Qd[:, 2:], Qdd[:, 2:] = fq[:, 2:], fqd[:, 2:], fqdd[:, 2:]
    force_flexible = generalised_forces(params, Q, Qd, Qdd)
    return Feedforward(np.arange(n + 1) * h, ref, force_rigid, force_flexible, fq, fqd, fqdd)


def initial_state(cfg: Config) -> tuple[list, list]:
    """The reference's first joints [d, q] and rates [d', q'] (plant.start_joints and
    plant.start_rates for a plant that starts on the path, link 2 straight)."""
    c = cfg.controller
    path = Path(tuple(c.path_centre), tuple(c.path_amplitude), c.path_rate)
    ref = rigid_inverse_kinematics(cfg.plant, path, np.zeros(1), c.branch)[:, 0]
    return ref[0:2].tolist(), ref[2:4].tolist()


@cfunc(LAW_SIGNATURE, cache=True, error_model="numpy")
def law(t, pos, vel, cur, params, state, u):
    """u = u_ff(t) + kp (r - pos) + kd (r' - vel) from the table in params (layout above)."""
    rows = int(params[L_ROWS])
    s = t / params[L_DT]
    if s <= 0.0:
        k, f = 0, 0.0
    elif s >= rows - 1:
        k, f = rows - 2, 1.0
    else:
        k = int(s)
        f = s - k
    a = L_TABLE + k * ROW
    b = a + ROW
    for j in range(2):
        r = (1.0 - f) * params[a + j] + f * params[b + j]
        rd = (1.0 - f) * params[a + 2 + j] + f * params[b + 2 + j]
        ff = (1.0 - f) * params[a + 4 + j] + f * params[b + 4 + j]
        u[j] = ff + params[L_KP + j] * (r - pos[j]) + params[L_KD + j] * (rd - vel[j])


def build(cfg: Config, unit: str) -> Controller:
    """The feed-forward controller of a flex_rp config (steps 1-4, then the table)."""
    if unit != "N m":
        raise ConfigError("controller.type = 'flex_feedforward' commands joint force and "
                          "torque: it needs plant.drive = 'torque'")
    ff = compute(cfg)
    force = ff.force_flexible if cfg.controller.feedforward == "flexible" else ff.force_rigid
    header = np.zeros(L_TABLE)
    header[L_ROWS] = len(ff.t)
    header[L_DT] = cfg.sim.dt
    header[L_KP:L_KP + 2] = cfg.controller.kp
    header[L_KD:L_KD + 2] = cfg.controller.kd
    table = np.column_stack([ff.rigid[0], ff.rigid[1], ff.rigid[2], ff.rigid[3], force])
    return Controller(law, np.concatenate([header, table.ravel()]), np.zeros(1),
                      name="flex_feedforward")


def check(cfg: dict, voltage_driven: bool) -> None:
    """Rules across keys: a plant with paper 002's beam model, torque-driven, at least
    two grid rows."""
    if "beam_feedforward" not in plant_model(cfg["plant"]["model"]).provides:
        raise ConfigError("controller.type: 'flex_feedforward' is paper 002's algorithm for the "
                          f"flexible P-R robot; plant.model = {cfg['plant']['model']!r} is not it")
    if voltage_driven:
        raise ConfigError("controller.type: 'flex_feedforward' commands joint force and "
                          "torque; set plant.drive = 'torque'")
    if cfg["sim"]["duration"] < 2 * cfg["sim"]["dt"]:
        raise ConfigError("sim.duration: 'flex_feedforward' needs at least two steps")
    check_start(cfg)


START_TOLERANCE = 1e-9
"""How far (m, rad, m/s, rad/s) the plant's start may lie from the reference's first row."""


def check_start(cfg: dict) -> None:
    """The plant must start where the chosen branch's references start: its [d, q]
    (plant.start_joints, else q0's first two) and [d', q'] (plant.start_rates, else qd0's)
    equal the reference's first row to START_TOLERANCE. The paper's path starts at the
    stretched pose, where both branches meet with opposite rates: a start on the other
    branch (or at rest) leaves the path at once (by 0.69 m and 2.27 rad on the paper's
    path, open loop). One ConfigError line naming the values to set."""
    plant, c = cfg["plant"], cfg["controller"]
    path = Path(tuple(c["path_centre"]), tuple(c["path_amplitude"]), c["path_rate"])
    ref = rigid_inverse_kinematics(types.SimpleNamespace(**plant), path, np.zeros(1),
                                   c["branch"])[:, 0]
    for key, fallback, want in (("start_joints", "q0", ref[0:2]),
                                ("start_rates", "qd0", ref[2:4])):
        given = plant[key] if plant[key] is not None else plant[fallback][:2]
        if np.max(np.abs(np.asarray(given, dtype=float) - want)) > START_TOLERANCE:
            name = f"plant.{key}" if plant[key] is not None else f"plant.{fallback}[:2]"
            raise ConfigError(
                f"{name}: {list(given)} is not the start of controller.branch = "
                f"{c['branch']!r} (set plant.{key} = {[float(v) for v in want]}); the plant "
                "must start on the chosen branch's path")


SPEC = ControllerSpec("flex_feedforward", build, KEYS, check)
