"""The scalar fast paths against the generic kernels that serve every other plant.

3-link arm: serial_arm.accel3 (plant.dynamics.derivative of a 3-link arm) and the
fused RK4 step (plant.rk4_arm3, taken by plant.integrators.step) against
serial_arm.mass_and_bias + motor.apply_drive + jam.restructured_accel, integrated
by an RK4 written here, in every jam state and drive. 3RRR: plant.rrr3_scalar's
RK4 step and projection against RK4 over rrr3.constrained_accel and rrr3.project,
along the paper's runs and where S is singular. They must agree to rounding
(1e-13 of the magnitudes).
"""
import numpy as np
import pytest
from conftest import arm_config, config
from hilrig.plant import rrr3, rrr3_scalar, serial_arm
from hilrig.plant.factory import plant_from_config
from hilrig.plant.family import for_plant
from hilrig.plant.faults import fault_row
from hilrig.plant.integrators import METHOD_RK4, step
from hilrig.plant.jam import finish_jams, restructured_accel
from hilrig.plant.layout import BLOCKED, H_BODY, JAM_PHASE, JAM_QDD, JAM_T_END, JAMMING
from hilrig.plant.motor import apply_drive
from hilrig.plant.stepping import apply_schedule
from hilrig.plant.trig import MAX_INCREMENT, SINCOS_LIMIT, SMALL_INCREMENT, moved, sincos
from hilrig.rt.sim import simulate
from numba import njit

MOTOR = {"rotor_inertia": [2e-4, 3e-4, 1e-4], "resistance": [2.0, 2.5, 3.0],
         "torque_constant": [0.5, 0.4, 0.3], "back_emf_constant": [0.4, 0.5, 0.3],
         "viscous_friction": [1e-3, 2e-3, 5e-4], "gear_ratio": [50.0, 40.0, 30.0]}
TOL = 1e-13

# jam states: (phase, prescribed qdd in rad/s^2) per joint; None = healthy
JAM_STATES = {
    "healthy": (None, None, None),
    "joint 1 jamming": ((JAMMING, -4.0), None, None),
    "joint 2 jamming": (None, (JAMMING, 3.0), None),
    "joint 2 blocked": (None, (BLOCKED, 0.0), None),
    "joint 3 jamming": (None, None, (JAMMING, 7.5)),
    "joints 1, 3 jamming and blocked": ((JAMMING, 2.0), None, (BLOCKED, 0.0)),
    "joints 2, 3 blocked and jamming": (None, (BLOCKED, 0.0), (JAMMING, -5.0)),
    "all blocked": ((BLOCKED, 0.0), (BLOCKED, 0.0), (BLOCKED, 0.0)),
}


def make_plant(drive, jam_state):
    motor = {"motor": MOTOR} if drive != "torque" else {}
    plant = plant_from_config(arm_config(damping=[1.0, 2.0, 3.0], drive=drive, **motor))
    for k, jam in enumerate(jam_state):
        if jam is not None:
            plant.jams[k, JAM_PHASE], plant.jams[k, JAM_QDD] = jam
            plant.jams[k, JAM_T_END] = 10.0
    return plant


def generic_derivative(plant, x, u):
    p = plant.params
    mass, bias, force, dx = np.zeros((3, 3)), np.zeros(3), np.zeros(3), np.zeros(6)
    serial_arm.mass_and_bias(p, x[:3], x[3:], mass, bias, np.zeros((5, 3)))
    apply_drive(p, plant.jams, x, u, mass, bias, force, np.zeros(0))
    health = restructured_accel(mass, bias, force, plant.jams, dx[3:], np.zeros((5, 3)))
    dx[:3] = x[3:]
    return dx, health


def generic_rk4(plant, x, u, h):
    k1 = generic_derivative(plant, x, u)[0]
    k2 = generic_derivative(plant, x + 0.5 * h * k1, u)[0]
    k3 = generic_derivative(plant, x + 0.5 * h * k2, u)[0]
    k4 = generic_derivative(plant, x + h * k3, u)[0]
    return x + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def random_state(plant, rng):
    """A state consistent with the jam phases (blocked joints at rest)."""
    x = np.concatenate([rng.uniform(-3, 3, 3), rng.uniform(-4, 4, 3)])
    x[3:][plant.jams[:, JAM_PHASE] == BLOCKED] = 0.0
    return x


def family_step(plant, x, u, h):
    """plant.integrators.step of x from t = 0 over h (s), RK4, compiled for the plant's family
    (plant.family.for_plant), as the loops and Plant.step compile it: without ``mech`` it
    would compile the code of every model (40-75 s) for these tests alone."""
    return step(plant.params, plant.jams, 0.0, x, u, h, plant.work, plant.stages, METHOD_RK4,
                for_plant(plant))


def close(fast, generic):
    return np.abs(fast - generic).max() <= TOL * max(1.0, np.abs(generic).max())


@pytest.mark.slow
@pytest.mark.parametrize("drive", ["torque", "voltage"])
@pytest.mark.parametrize("jam_state", sorted(JAM_STATES))
def test_unrolled_accelerations_equal_generic_path(drive, jam_state, rng):
    plant = make_plant(drive, JAM_STATES[jam_state])
    for _ in range(20):
        x = random_state(plant, rng)
        u = rng.uniform(-10, 10, 3)
        generic, generic_health = generic_derivative(plant, x, u)
        fast = np.zeros(3)
        health = serial_arm.accel3(plant.params, x, u, fast, plant.jams)
        assert close(fast, generic[3:])
        assert close(plant.derivative(x, u), generic)   # the dispatch takes the fast path
        # health: the smallest pivot of the free joints (inf when none is free)
        if np.isfinite(generic_health):
            assert health == pytest.approx(generic_health, rel=TOL)
        else:
            assert health == generic_health
        for k, jam in enumerate(JAM_STATES[jam_state]):
            if jam is not None:    # prescribed joints move exactly as prescribed
                assert fast[k] == (jam[1] if jam[0] == JAMMING else 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("drive", ["torque", "voltage"])
@pytest.mark.parametrize("jam_state", sorted(JAM_STATES))
def test_fused_rk4_step_equals_generic_rk4(drive, jam_state, rng):
    plant = make_plant(drive, JAM_STATES[jam_state])
    for _ in range(10):
        x = random_state(plant, rng)
        u = rng.uniform(-10, 10, 3)
        expected = generic_rk4(plant, x, u, 1e-3)
        health = family_step(plant, x, u, 1e-3)
        assert health > 0.0
        assert close(x, expected)


# actuator faults (plant.actuator_faults) by drive: (kind, joint 0-based, parameters)
ACTUATOR_FAULTS = {
    "torque": [("free_swing", 0, {}), ("torque_offset", 1, {"torque": 2.5}),
               ("effectiveness", 2, {"factor": 0.4}), ("friction", 2, {"viscous": 0.7})],
    "voltage": [("winding_short", 0, {}), ("supply_sag", 1, {"factor": 0.5, "max_voltage": 3.0}),
                ("effectiveness", 1, {"factor": 0.6}), ("winding_open", 2, {}),
                ("friction", 0, {"viscous": 0.7}), ("torque_offset", 2, {"torque": -1.5})],
}


@pytest.mark.parametrize("drive", ["torque", "voltage"])
def test_the_fast_paths_take_actuator_faults_as_the_generic_path(drive, rng):
    """Every actuator fault, several on one joint, on the unrolled accelerations and the
    fused RK4 step: the generic path's numbers (plant.motor.apply_drive)."""
    plant = make_plant(drive, (None, (JAMMING, 3.0), None))
    table = np.array([fault_row(kind, joint, 0.0, np.inf, params)
                      for kind, joint, params in ACTUATOR_FAULTS[drive]])
    apply_schedule(plant.params, plant.jams, table, 0.0, plant.x, 0.0)
    for _ in range(10):
        x = random_state(plant, rng)
        u = rng.uniform(-10, 10, 3)
        generic, _ = generic_derivative(plant, x, u)
        fast = np.zeros(3)
        serial_arm.accel3(plant.params, x, u, fast, plant.jams)
        assert close(fast, generic[3:])
        expected = generic_rk4(plant, x, u, 1e-3)
        assert family_step(plant, x, u, 1e-3) > 0.0
        assert close(x, expected)


def test_fused_rk4_splits_a_step_at_a_jam_end(rng):
    """Joint 2's jamming phase ends 0.3 ms into a 1 ms step: RK4 to the end, block, RK4 on."""
    plant = make_plant("torque", (None, (JAMMING, -2.0), None))
    plant.jams[1, JAM_T_END] = 3e-4
    x = random_state(plant, rng)
    u = rng.uniform(-10, 10, 3)
    reference_jams = plant.jams.copy()
    expected = generic_rk4(plant, x, u, 3e-4)
    finish_jams(plant.jams, expected, 3, 3e-4, 1e-12)
    expected = generic_rk4(plant, expected, u, 7e-4)
    plant.jams[:] = reference_jams
    family_step(plant, x, u, 1e-3)
    assert plant.jams[1, JAM_PHASE] == BLOCKED and x[4] == 0.0
    assert close(x, expected)


@pytest.mark.parametrize("largest", [SMALL_INCREMENT, MAX_INCREMENT])
def test_moved_angles_equal_sin_and_cos(largest, rng):
    """The angle-addition series of the fused step: sin(a + d), cos(a + d) to rounding,
    with the short series (|d| <= SMALL_INCREMENT, also at its bound) and the long one."""
    a = rng.uniform(-np.pi, np.pi, 2000)
    d = np.concatenate([rng.uniform(-largest, largest, 1996), [-largest, largest],
                        np.nextafter([-SMALL_INCREMENT, SMALL_INCREMENT], [-1.0, 1.0])])
    for ak, dk in zip(a, d):
        s, c = moved(np.sin(ak), np.cos(ak), dk)
        assert abs(s - np.sin(ak + dk)) <= 4e-16 and abs(c - np.cos(ak + dk)) <= 4e-16


@njit(cache=True)
def _sincos_of(a, s, c):
    for i in range(a.shape[0]):
        s[i], c[i] = sincos(a[i])


@pytest.mark.parametrize("low, high, ulps", [(0.0, 10.0, 1), (0.0, SINCOS_LIMIT, 2),
                                             (SINCOS_LIMIT * (1 + 1e-12), 1e9, 0)])
def test_sincos_agrees_with_libm(low, high, ulps, rng):
    """plant.trig.sincos: within 1 ulp of libm's sin and cos up to 10 rad, 2 ulp up to
    SINCOS_LIMIT (random angles, multiples of pi/4 and points next to multiples of
    pi/2, where the reduction cancels), libm itself beyond."""
    a = rng.uniform(low, high, 200_000) * rng.choice([-1.0, 1.0], 200_000)
    if low == 0.0:
        a = np.concatenate([a, np.arange(-40, 41) * np.pi / 4,
                            np.arange(-40, 41) * np.pi / 2 + 1e-9, [0.0, -0.0, 5e-324]])
    s, c = np.empty_like(a), np.empty_like(a)
    _sincos_of(a, s, c)
    sin_ulps = np.abs(s - np.sin(a)) / np.spacing(np.abs(np.sin(a)))
    cos_ulps = np.abs(c - np.cos(a)) / np.spacing(np.abs(np.cos(a)))
    assert sin_ulps.max() <= ulps and cos_ulps.max() <= ulps


@pytest.mark.parametrize("h", [1e-3, 0.02])
def test_fused_rk4_step_for_fast_links(h, rng):
    """Link rates up to 150 rad/s: increments beyond MAX_INCREMENT call sin and cos."""
    plant = make_plant("voltage", JAM_STATES["healthy"])
    for _ in range(10):
        x = np.concatenate([rng.uniform(-3, 3, 3), rng.uniform(-150, 150, 3)])
        u = rng.uniform(-10, 10, 3)
        expected = generic_rk4(plant, x, u, h)
        family_step(plant, x, u, h)
        assert close(x, expected)


# -- the 3RRR: rrr3_scalar against rrr3's generic kernels ------------------------------
def rrr3_states(name, every=37):
    """States x (with the commands u held from them) along a paper run, through its
    singular passes."""
    a = simulate(config(name, "sim.duration=3")).arrays
    rows = range(0, len(a["t"]), every)
    return [(np.concatenate([a["q"][k], a["qd"][k]]), a["u"][k]) for k in rows]


def generic_rrr3_rk4(plant, x, u, h):
    """RK4 over plant.derivative, which takes rrr3.constrained_accel for the 3RRR."""
    k1 = plant.derivative(x, u)
    k2 = plant.derivative(x + 0.5 * h * k1, u)
    k3 = plant.derivative(x + 0.5 * h * k2, u)
    k4 = plant.derivative(x + h * k3, u)
    return x + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


@pytest.mark.parametrize("overrides", [("rrr3_forward",), ("rrr3_pd",),
                                       ("rrr3_pd", "plant.baumgarte=false"),
                                       ("rrr3_pd", "plant.drive=torque")])
def test_fused_rrr3_step_equals_generic_rk4(overrides):
    name, *rest = overrides
    plant = plant_from_config(config(name, *rest))
    for x, u in rrr3_states(name):
        expected = generic_rrr3_rk4(plant, x, u, 1e-3)
        assert rrr3_scalar.rk4(plant.params, x, u, 1e-3, plant.work, 0.0, plant.jams) == 3.0
        assert close(x, expected)


@pytest.mark.parametrize("name", ["rrr3_forward", "rrr3_pd"])
def test_scalar_projection_equals_generic_projection(name, rng):
    plant = plant_from_config(config(name))
    for x, _ in rrr3_states(name):
        x += np.concatenate([rng.normal(0, 1e-6, 6), rng.normal(0, 1e-3, 6)])  # off both manifolds
        expected = x.copy()
        taken = rrr3.project(plant.params, expected, np.zeros((16, 6)))
        assert rrr3_scalar.project(plant.params, x, plant.work) == taken
        assert close(x, expected)


@pytest.mark.parametrize("name", ["rrr3_forward", "rrr3_pd"])
def test_fused_step_and_projection_equal_the_step_then_the_projection(name):
    """rk4(..., projected=True) starts the projection from sines and cosines moved
    from the step's own: the same result, to rounding, as the step followed by
    ``project`` (and by the generic rrr3.project); on the manifold after."""
    plant = plant_from_config(config(name))
    for x, u in rrr3_states(name):
        expected = generic_rrr3_rk4(plant, x, u, 1e-3)
        rrr3.project(plant.params, expected, np.zeros((16, 6)))
        separate = x.copy()
        rrr3_scalar.rk4(plant.params, separate, u, 1e-3, plant.work, 0.0, plant.jams)
        rrr3_scalar.project(plant.params, separate, plant.work)
        assert rrr3_scalar.rk4(plant.params, x, u, 1e-3, plant.work, 1.0, plant.jams) == 3.0
        assert close(x, separate) and close(x, expected)
        assert rrr3.residual(plant.params, x, np.zeros((16, 6))) < 1e-12


def degenerate_leg_state(plant):
    """A pose where B_1 = A_1: Phi_q's first row vanishes, S is singular (rank 2)."""
    q = np.array([-0.1259, 1.3727, 3.2675, 0.0, 0.0, 0.020707])
    o = plant.params[int(plant.params[H_BODY]):]  # the model block
    l1, b, alpha = o[rrr3.R_L1], o[rrr3.R_B], o[rrr3.R_ALPHA]
    q[3] = o[rrr3.R_OX] + l1 * np.cos(q[0]) - b * np.cos(q[5] + alpha)
    q[4] = o[rrr3.R_OY] + l1 * np.sin(q[0]) - b * np.sin(q[5] + alpha)
    return np.concatenate([q, [0.3, -0.2, 0.1, 0.05, -0.04, 0.2]])


def test_singular_s_falls_back_to_the_generic_kernels():
    """Where S is singular the scalar kernels leave x alone and the generic ones
    (pseudo-inverse of S) take over: results equal the generic kernels' exactly."""
    plant = plant_from_config(config("rrr3_pd", "plant.drive=torque"))
    x = degenerate_leg_state(plant)
    probe = x.copy()
    assert rrr3_scalar.rk4(plant.params, probe, np.ones(3), 1e-3, plant.work, 0.0,
                           plant.jams) == -1.0
    assert np.array_equal(probe, x)
    u = np.array([1.0, -2.0, 0.5])
    expected = generic_rrr3_rk4(plant, x, u, 1e-3)
    family_step(plant, x, u, 1e-3)
    assert np.all(np.isfinite(x)) and close(x, expected)
    x = degenerate_leg_state(plant)
    expected = x.copy()
    rrr3.project(plant.params, expected, np.zeros((16, 6)))
    rrr3_scalar.project(plant.params, x, plant.work)
    assert np.array_equal(x, expected)
