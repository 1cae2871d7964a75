"""Jammed joints (paper 000 §2-3): the jam law, the published equilibria, restructuring."""
import numpy as np
import pytest
import sympy as sp
from conftest import arm_config, config, replaced
from hilrig.plant.factory import plant_from_config
from hilrig.plant.layout import BLOCKED, HEALTHY, JAMMING
from hilrig.rt.sim import simulate

PAPER_Q0 = [0.444134, -0.444134, 0.529083]


@pytest.mark.parametrize("integrator", ["rk4", "accurate"])
def test_jammed_velocity_falls_linearly_to_zero(integrator):
    a = simulate(config("serial3_jam1", "sim.duration=2.5", f"sim.integrator={integrator}")).arrays
    t, qd1, q1 = a["t"], a["qd"][:, 0], a["q"][:, 0]
    joint, t1, t2 = a["jam_events"][0]
    assert (joint, t1, t2) == (1, 2.0, pytest.approx(2.1))
    start = np.searchsorted(t, t1 - 1e-9)
    v1 = qd1[start]
    assert abs(v1) > 1e-3  # the joint was moving when it jammed
    during = (t >= t1) & (t <= t2 + 1e-9)
    expected = v1 * (1.0 - (t[during] - t1) / (t2 - t1))
    assert np.abs(qd1[during] - expected).max() < 1e-9 * abs(v1) + 1e-12
    after = t >= t2 - 1e-9
    assert np.all(qd1[after] == 0.0)
    assert np.ptp(q1[after]) == 0.0
    # the angle travelled during the jam is the area under the linear ramp
    assert q1[after][0] - q1[start] == pytest.approx(0.5 * v1 * (t2 - t1), rel=1e-9)


def test_jam_ending_between_steps_is_switched_exactly():
    """A jamming phase that ends inside a step: the step is split, qd = 0 from t2 on."""
    cfg = config("serial3_jam1", "sim.duration=2.3", "faults.jam.duration=0.0355")
    fixed = simulate(cfg).arrays
    cfg = replaced(cfg, "sim", integrator="accurate")
    exact = simulate(cfg).arrays
    t2 = 2.0355
    assert np.all(fixed["qd"][fixed["t"] > t2, 0] == 0.0)
    assert np.all(fixed["qd"][fixed["t"] < t2 - 1e-9, 0][-30:] != 0.0)
    assert np.abs(fixed["q"] - exact["q"]).max() < 1e-9


def test_joint1_jam_reaches_paper_equilibrium():
    """Paper Fig. 4: q_e = [0.0645, -0.0645, 0.0] after joint 1 jams at t1 = 2 s."""
    a = simulate(config("serial3_jam1", "sim.duration=30")).arrays
    q = a["q"][-1]
    assert q[0] == pytest.approx(0.0645, abs=5e-5)          # the paper's printed digits
    assert np.all(a["q"][a["t"] >= 2.1, 0] == q[0])          # blocked at its jammed value
    assert abs(q[0] + q[1]) < 1e-6 and abs(q[2]) < 1e-6      # links 2, 3 hang straight down
    assert np.abs(a["qd"][-1]).max() < 1e-6


def test_joint2_jam_reaches_paper_equilibrium():
    """Paper Figs. 5-7: q2 blocked at -0.1525; q1 + q2 + q3 = 0, centre of mass below the base."""
    a = simulate(config("serial3_jam2")).arrays
    q = a["q"][-1]
    assert q[1] == pytest.approx(-0.1525, abs=5e-5)
    assert q[0] == pytest.approx(0.0473, abs=5e-5)
    assert q[2] == pytest.approx(0.105166, abs=5e-6)         # paper prints 0.1051 (rounded)
    assert abs(q.sum()) < 2e-5                                # still creeping (slow mode ~5 s)
    assert abs(a["com"][-1, 1]) < 1e-5                        # y_C = 0
    assert np.all(a["q"][a["t"] >= 0.6, 1] == q[1])


def test_free_arm_settles_at_zero():
    """Paper Fig. 3: without a fault the arm comes to rest hanging straight down "after
    about 15 s": within 1 % of its initial 0.53 rad by then, and still closing in."""
    a = simulate(config("serial3_free", "sim.duration=30")).arrays
    at = {T: np.abs(a["q"][int(T * 1000)]).max() for T in (15, 30)}
    assert at[15] < 0.01 and at[30] < 1e-3 and at[30] < at[15]
    assert abs(a["com"][-1, 1]) < 1e-3


def test_energy_conserved_once_blocked():
    """With b = 0, the arm with a blocked joint is a conservative system again."""
    cfg = config("serial3_jam2", "plant.damping=0.0", "sim.duration=6", "sim.integrator=accurate")
    a = simulate(cfg).arrays
    after = a["t"] >= 0.6 + 1e-9
    energy = a["energy"][after]
    kinetic_scale = np.ptp(energy) + np.abs(energy - energy.min()).max() + 1.0
    assert np.abs(energy - energy[0]).max() < 1e-9 * max(abs(energy[0]), kinetic_scale)


def test_jamming_phase_can_do_work_on_the_arm():
    """MODELS.md: the prescribed deceleration is a motion constraint, it may add energy."""
    cfg = config("serial3_jam2", "plant.damping=0.0", "sim.duration=0.7", "sim.integrator=accurate")
    a = simulate(cfg).arrays
    before = a["energy"][np.searchsorted(a["t"], 0.5 - 1e-9)]
    after = a["energy"][np.searchsorted(a["t"], 0.6 + 1e-9)]
    assert after != pytest.approx(before, rel=1e-6)


def test_two_joints_blocked_match_reduced_lagrangian(rng):
    """Beyond the paper: joints 1 and 3 blocked together leave a 1-DOF pendulum.

    Independent formulation: the Lagrangian of the arm with q1, q3 held constant,
    derived in sympy, gives qdd2; the restructured kernel must agree.
    """
    plant = plant_from_config(arm_config(damping=0.0))
    m, J, L, a = [9.0, 7.0, 5.0], [1.5, 1.0, 0.6], [0.8, 0.7, 0.6], [0.4, 0.35, 0.3]
    q1, q2, q3, w2 = sp.symbols("q1 q2 q3 w2")
    phi2, phi3 = q1 + q2, q1 + q2 + q3
    # link 1 is fixed; links 2 and 3 rotate rigidly together about joint 2 at rate w2
    x2, y2 = L[0] * sp.cos(q1) + a[1] * sp.cos(phi2), L[0] * sp.sin(q1) + a[1] * sp.sin(phi2)
    x3 = L[0] * sp.cos(q1) + L[1] * sp.cos(phi2) + a[2] * sp.cos(phi3)
    y3 = L[0] * sp.sin(q1) + L[1] * sp.sin(phi2) + a[2] * sp.sin(phi3)
    kin = sum(sp.Rational(1, 2) * (mi * ((sp.diff(x, q2) * w2) ** 2 + (sp.diff(y, q2) * w2) ** 2)
                                   + Ji * w2 ** 2) for mi, Ji, x, y in ((m[1], J[1], x2, y2),
                                                                         (m[2], J[2], x3, y3)))
    pot = -9.81 * (m[1] * x2 + m[2] * x3)
    inertia = sp.diff(kin, w2, w2)
    qdd2 = sp.lambdify((q1, q2, q3, w2), (-sp.diff(pot, q2) - sp.Rational(1, 2)
                                          * sp.diff(inertia, q2) * w2 ** 2) / inertia)
    plant.jams[[0, 2], 0] = BLOCKED
    for _ in range(20):
        q = rng.uniform(-2.5, 2.5, 3)
        w = rng.uniform(-3.0, 3.0)
        x = np.array([q[0], q[1], q[2], 0.0, w, 0.0])
        dx = plant.derivative(x, np.zeros(3))
        assert dx[3] == 0.0 and dx[5] == 0.0
        assert dx[4] == pytest.approx(qdd2(*q, w), rel=1e-11, abs=1e-11)


def test_clear_restores_a_healthy_joint():
    plant = plant_from_config(arm_config(q0=PAPER_Q0, damping=15.0))
    for _ in range(200):
        plant.step(np.zeros(3), 1e-3)
    plant.start_jam(2, 0.05)
    assert plant.jams[1, 0] == JAMMING and plant.jammed_joints() == [2]
    for _ in range(100):
        plant.step(np.zeros(3), 1e-3)
    assert plant.jams[1, 0] == BLOCKED and plant.qd[1] == 0.0
    held = plant.q[1]
    plant.clear_jam(2)
    assert plant.jams[1, 0] == HEALTHY and plant.jammed_joints() == []
    plant.step(np.zeros(3), 1e-3)
    assert plant.q[1] != held                 # moves again under gravity, from where it was
    assert abs(plant.q[1] - held) < 1e-3


def test_jam_rejects_bad_joint():
    plant = plant_from_config(arm_config())
    with pytest.raises(ValueError, match="joint must be 1..3"):
        plant.start_jam(4, 0.1)
