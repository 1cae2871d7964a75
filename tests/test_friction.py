"""Joint friction of the serial chains (plant.friction, plant.stick_slip, docs/FRICTION.md):
a joint held by friction stays still below its breakaway and moves above it, the energy
books close, viscous friction agrees with an independent reference, a sliding joint
decelerates at coulomb / I, and bad keys are one line."""
import numpy as np
import pytest
from hilrig.errors import ConfigError
from hilrig.plant.factory import plant_from_config
from hilrig.plant.urdf import parse
from hilrig.rt.sim import simulate
from hilrig.settings.config import resolve

from conftest import arm_config

pin = pytest.importorskip("pinocchio")


def arm(friction: dict, sim: dict | None = None, **plant):
    """Paper 000's 3-link arm, torque-driven, no joint damping of its own, with [friction]."""
    raw = {"plant": {"model": "serial_arm", "damping": [0.0, 0.0, 0.0], **plant},
           "sim": sim or {}, "friction": friction}
    return resolve(raw)


def ur5(friction: dict, sim: dict | None = None, **plant):
    return resolve({"plant": {"model": "urdf", "urdf": "ur5", **plant}, "sim": sim or {},
                    "friction": friction})


def held_then_moved(cfg, joint: int, below: float, above: float, steps: int = 300):
    """Step the plant ``steps`` ms with ``below`` N m on ``joint`` (0-based), then as many
    with ``above``: (q after the first part, q0, the plant after the second)."""
    plant = plant_from_config(cfg)
    q0 = plant.q.copy()
    u = np.zeros(plant.nact)
    u[joint] = below
    for _ in range(steps):
        plant.step(u, 1e-3)
    held = plant.x.copy()
    u[joint] = above
    for _ in range(steps):
        plant.step(u, 1e-3)
    return held, q0, plant


def test_a_joint_held_by_friction_stays_still_below_breakaway_and_moves_above_it():
    """The arm hanging at rest (no gravity torque there), breakaway 8 N m on every joint:
    7.9 N m on the shoulder for 0.3 s leaves every q and qd exactly as they were; 12 N m
    breaks the shoulder away, and it turns the way it is pushed."""
    cfg = arm({"coulomb": 5.0, "static": 8.0}, q0=[0.0, 0.0, 0.0])
    held, q0, plant = held_then_moved(cfg, 0, 7.9, 12.0)
    assert np.array_equal(held[:3], q0) and np.array_equal(held[3:6], np.zeros(3))
    assert plant.q[0] > 1e-3 and plant.qd[0] > 0.0
    assert 1 not in plant.stuck_joints()


def test_a_urdf_arm_held_against_gravity_stays_still_and_its_base_breaks_away():
    """The UR5 under gravity, breakaway 200 N m on the base joint and 400 N m on the others
    (more than gravity's torques at q0): 150 N m on the base joint holds the arm exactly
    still for 0.3 s (gravity included); 260 N m turns the base, the others held."""
    q0 = [0.3, -1.0, 1.2, -0.5, 0.4, 0.0]
    cfg = ur5({"coulomb": [150.0] + [300.0] * 5, "static": [200.0] + [400.0] * 5}, q0=q0)
    held, start, plant = held_then_moved(cfg, 0, 150.0, 260.0)
    assert np.array_equal(held[:6], start) and np.array_equal(held[6:12], np.zeros(6))
    assert plant.q[0] > start[0] + 1e-3
    assert plant.stuck_joints() == [2, 3, 4, 5, 6]


def test_a_sliding_joint_decelerates_at_coulomb_over_its_inertia_then_stops_for_good():
    """One link, no gravity, sliding at 2 rad/s against 3 N m of Coulomb friction:
    qd(t) = 2 - 3 t / I exactly (RK4 integrates a constant deceleration exactly) until it
    stops, at q = 2^2 I / (2 * 3) to one step's travel, then stays stopped."""
    cfg = resolve({"plant": {"model": "serial_arm", "mass": [2.0], "inertia": [0.1],
                             "length": [0.5], "com": [0.25], "damping": [0.0], "gravity": 0.0,
                             "q0": [0.0], "qd0": [2.0]},
                   "friction": {"coulomb": 3.0}})
    inertia = 0.1 + 2.0 * 0.25 ** 2
    rate = 3.0 / inertia
    plant = plant_from_config(cfg)
    h, t = 1e-3, 0.0
    stop = 2.0 / rate
    while t + h < stop - h:
        plant.step([0.0], h)
        t += h
        assert plant.qd[0] == pytest.approx(2.0 - rate * t, abs=1e-12)
    for _ in range(200):
        plant.step([0.0], h)
    assert plant.qd[0] == 0.0 and plant.stuck_joints() == [1]
    assert plant.q[0] == pytest.approx(2.0 ** 2 / (2.0 * rate), abs=2.0 * h * rate * h + 1e-12)


def energy_residual(cfg):
    """(|E_end - E_0 - input work + friction dissipation|, the dissipation), J, over a run,
    from its logged rows: the input work per step u_k (q_k+1 - q_k) (u held over the
    step), Coulomb's coulomb |q_k+1 - q_k| and viscous's trapezoid of viscous qd^2."""
    a = simulate(cfg).arrays
    q, qd, u, energy = a["q"], a["qd"], a["u"], a["energy"]
    dq = np.diff(q, axis=0)
    h = cfg.sim.dt
    work = np.sum(u[:-1] * dq)
    viscous = np.asarray(cfg.friction.viscous)
    coulomb = np.asarray(cfg.friction.coulomb)
    dissipated = np.sum(coulomb * np.abs(dq)) \
        + np.sum(viscous * 0.5 * h * (qd[:-1] ** 2 + qd[1:] ** 2))
    return abs(energy[-1] - energy[0] - work + dissipated), dissipated, np.ptp(q[:, 0])


def test_the_energy_books_close_with_friction_and_a_pushing_input():
    """Under gravity with a constant torque, viscous and Coulomb friction, sticking and
    slipping: T + V changes by the input work less what friction dissipated, to within
    1e-6 of the dissipation, second order in the step (halving it at least thirds the
    residual: a stick locks the joint plastically, plant.stick_slip, and the trapezoid of
    viscous qd^2 and the reversals' Coulomb work are O(h^2))."""
    books = []
    for dt in (1e-3, 5e-4):
        cfg = arm({"viscous": [0.5, 0.3, 0.2], "coulomb": [2.0, 1.5, 1.0]},
                  {"duration": 3.0, "dt": dt}, q0=[0.8, -0.4, 0.6])
        cfg = cfg.replace(input=type(cfg.input)(**{**cfg.input.to_dict(),
                                                   "torque": (4.0, 0.0, -1.0)}))
        books.append(energy_residual(cfg))
    (coarse, dissipated, travel), (fine, _, _) = books
    assert travel > 0.5 and dissipated > 1.0
    assert coarse < 1e-6 * dissipated, books
    assert fine < coarse / 3.0, books


def test_viscous_friction_on_a_urdf_arm_agrees_with_pinocchio_and_solve_ivp():
    """Only viscous friction (different per joint), gravity, no input: the UR5's RK4 run at
    1 ms equals scipy's solve_ivp (rtol 1e-12) on Pinocchio's aba with the same damping
    to RK4's accuracy."""
    from scipy.integrate import solve_ivp

    viscous = np.array([2.0, 3.0, 1.5, 0.5, 0.4, 0.3])
    q0 = np.array([0.3, -1.0, 1.2, -0.5, 0.4, 0.0])
    cfg = ur5({"viscous": viscous.tolist()}, {"duration": 1.0, "dt": 1e-3}, q0=q0.tolist())
    free = dict(position_min=(-np.inf,) * 6, position_max=(np.inf,) * 6, max_rate=(np.inf,) * 6)
    cfg = cfg.replace(safety=type(cfg.safety)(**{**cfg.safety.to_dict(), **free}))
    cfg = cfg.replace(input=type(cfg.input)(**{**cfg.input.to_dict(), "torque": (0.0,) * 6}))
    a = simulate(cfg).arrays
    model = pin.buildModelFromUrdf(parse.load("ur5").path)
    data = model.createData()
    assert model.nq == 6

    def rhs(t, y):
        q, qd = y[:6], y[6:]
        return np.concatenate([qd, pin.aba(model, data, q, qd, -viscous * qd)])

    ref = solve_ivp(rhs, (0.0, 1.0), np.concatenate([q0, np.zeros(6)]), method="DOP853",
                    rtol=1e-12, atol=1e-12, t_eval=a["t"])
    assert np.ptp(a["q"][:, 1]) > 0.1                      # it fell
    assert np.max(np.abs(a["q"] - ref.y[:6].T)) < 1e-8
    assert np.max(np.abs(a["qd"] - ref.y[6:].T)) < 1e-7


@pytest.mark.parametrize("friction, message", [
    ({"coulomb": -1.0}, r"friction\.coulomb"),
    ({"viscous": [1.0, 2.0]}, r"friction\.viscous"),
    ({"coulomb": 3.0, "static": 2.0}, r"friction\.static: joint 1's breakaway 2 is below"),
    ({"stribeck_velocity": 0.0}, r"friction\.stribeck_velocity"),
])
def test_bad_friction_keys_are_one_line(friction, message):
    with pytest.raises(ConfigError, match=message) as caught:
        plant_from_config(arm(friction))
    assert "\n" not in str(caught.value)


def test_friction_on_a_model_or_integrator_that_cannot_take_it_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"plant.model 'rrr3' does not model joint friction"):
        plant_from_config(resolve({"plant": {"model": "rrr3"}, "friction": {"viscous": 1.0}}))
    with pytest.raises(ConfigError, match=r"'rosenbrock' cannot step Coulomb joint friction"):
        plant_from_config(arm({"coulomb": 1.0}, {"integrator": "rosenbrock"}))


def test_a_jam_holds_whatever_the_friction_and_friction_leaves_jam_reports_alone():
    """A joint friction holds is not a jammed joint; a jam started on it blocks it, and
    no torque breaks a blocked joint away: 500 N m on it and on the shoulder turn the
    shoulder, and the jammed elbow stays blocked, exactly."""
    plant = plant_from_config(arm({"coulomb": 5.0}, q0=[0.0, 0.0, 0.0]))
    plant.step([1.0, 0.0, 0.0], 1e-3)
    assert plant.stuck_joints() == [1, 2, 3] and plant.jammed_joints() == []
    plant.start_jam(2, 0.0)
    for _ in range(100):
        plant.step([500.0, 500.0, 0.0], 1e-3)
    assert plant.jammed_joints() == [2] and plant.qd[1] == 0.0 and plant.q[1] == 0.0
    assert plant.q[0] > 0.1 and 1 not in plant.stuck_joints()


def test_no_friction_keeps_the_fused_arm_path_and_adds_no_block():
    """Without [friction] the params carry no friction block (H_FRICTION = 0), so the
    3-link arm keeps its unrolled RK4 step."""
    from hilrig.plant.dynamics import is_arm3
    from hilrig.plant.layout import H_FRICTION

    plain = plant_from_config(arm_config())
    assert plain.params[H_FRICTION] == 0.0 and is_arm3(plain.params)
    rough = plant_from_config(arm({"viscous": 1.0}))
    assert rough.params[H_FRICTION] > 0.0 and not is_arm3(rough.params)
