"""The plant's model in the user's law (issue 23 item 5): plant.model_kernels gives a
compiled law the plant's own M, bias, inverse dynamics, tip pose and tip Jacobian for the
URDF arm and paper 000's serial arm, allocation-free; examples/computed_torque uses it."""
import math
import subprocess

import numpy as np
import pytest
from hilrig.controllers.factory import controller_from_config
from hilrig.errors import ConfigError
from hilrig.plant import model_kernels as mk
from hilrig.plant.factory import plant_from_config
from hilrig.plant.layout import H_BODY
from hilrig.plant.urdf import dynamics, parse
from hilrig.plant.urdf.model import chain
from hilrig.settings.config import load, resolve
from rt_helpers import ROOT, hil
from test_urdf import PAPER_ARM, ROBOTS, pinocchio_model, pinocchio_q, robot
from test_urdf import synthetic  # noqa: F401  (the fixture)

pin = pytest.importorskip("pinocchio")
EXAMPLE = ROOT / "examples" / "computed_torque"


def urdf_config(plant):
    return resolve({"plant": {"model": "urdf", "drive": "torque", **plant}})


def random_q(chain, rng):
    lower = np.where(np.isfinite(chain.lower), chain.lower, -math.pi)
    upper = np.where(np.isfinite(chain.upper), chain.upper, math.pi)
    return rng.uniform(lower, upper)


def pose_and_jacobian(model, q):
    n = mk.dof(model)
    rotation, position, jacobian = np.zeros((3, 3)), np.zeros(3), np.zeros((6, n))
    mk.tip_pose(model, q, rotation, position)
    mk.tip_jacobian(model, q, jacobian)
    return rotation, position, jacobian


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_tip_pose_and_jacobian_equal_pinocchios(name, synthetic, rng):
    """At 200 random q: tip_link's placement and its Jacobian (LOCAL_WORLD_ALIGNED: the tip
    origin's velocity and the angular velocity, base frame) equal Pinocchio's frame
    placement and frame Jacobian to 1e-10 (the tip behind fixed joints: the Panda's hand,
    the synthetic tool flange)."""
    cfg = urdf_config(robot(name, synthetic))
    model = mk.block(cfg)
    chain = parse.load(cfg.plant.urdf, cfg.plant.base_link, cfg.plant.tip_link)
    reference = pinocchio_model(chain)
    data = reference.createData()
    frame = reference.getFrameId(chain.tip_link)
    worst = 0.0
    for _ in range(200):
        q = random_q(chain, rng)
        rotation, position, jacobian = pose_and_jacobian(model, q)
        qp = pinocchio_q(reference, q)
        pin.forwardKinematics(reference, data, qp)
        placement = pin.updateFramePlacement(reference, data, frame)
        expected = pin.computeFrameJacobian(reference, data, qp, frame,
                                            pin.LOCAL_WORLD_ALIGNED)
        worst = max(worst, np.abs(rotation - placement.rotation).max(),
                    np.abs(position - placement.translation).max(),
                    np.abs(jacobian - expected).max())
    assert worst < 1e-10, worst
    assert np.abs(position).max() > 0.05 and np.abs(jacobian).max() > 0.05   # not trivial


def serial_arm_model():
    return mk.block(load("serial3_free"))


def finite_difference_jacobian(model, q, h=1e-6):
    """Central differences of the tip pose: v from the position, w from dR R^T."""
    n = len(q)
    out = np.zeros((6, n))
    rotation = pose_and_jacobian(model, q)[0]
    for k in range(n):
        step = np.zeros(n)
        step[k] = h
        r_plus, p_plus, _ = pose_and_jacobian(model, q + step)
        r_minus, p_minus, _ = pose_and_jacobian(model, q - step)
        out[:3, k] = (p_plus - p_minus) / (2 * h)
        w = (r_plus - r_minus) / (2 * h) @ rotation.T
        out[3:, k] = (w[2, 1] - w[1, 2]) / 2, (w[0, 2] - w[2, 0]) / 2, (w[1, 0] - w[0, 1]) / 2
    return out


@pytest.mark.parametrize("which", ["panda", "synthetic", "serial_arm"])
def test_the_jacobian_equals_finite_differences_of_the_tip_pose(which, synthetic, rng):
    """J q' is the tip's velocity: at 20 random q, J equals central differences of the tip
    position (v) and of its rotation (w from dR R^T) to 1e-7, for the URDF arm (with a
    prismatic joint in the synthetic one) and the built-in serial arm."""
    if which == "serial_arm":
        model = serial_arm_model()
    else:
        model = mk.block(urdf_config(robot(which, synthetic)))
    n = mk.dof(model)
    for _ in range(20):
        q = rng.uniform(-1.0, 1.0, n)
        jacobian = pose_and_jacobian(model, q)[2]
        assert np.abs(jacobian - finite_difference_jacobian(model, q)).max() < 1e-7


def test_the_model_kernels_are_the_plants_own(synthetic, rng):
    """For the URDF arm, M and the bias equal the plant's mechanism (M bit for bit; the
    bias with the joints' viscous friction, the URDF's damping, which the plant applies
    as [friction], to 1e-12), and the plant's derivative driven by inverse_dynamics(q, qd,
    a) accelerates at a (to 1e-9)."""
    cfg = urdf_config(robot("synthetic", synthetic))
    model = mk.block(cfg)
    plant = plant_from_config(cfg)
    p = plant.params[int(plant.params[H_BODY]):]
    n = plant.nq
    viscous = chain(cfg.plant).damping
    assert viscous.any()
    for _ in range(20):
        q, qd, qdd = rng.uniform(-0.3, 0.3, n), rng.uniform(-1, 1, n), rng.uniform(-3, 3, n)
        mass, bias, m2, b2, tau = (np.zeros((n, n)), np.zeros(n), np.zeros((n, n)),
                                   np.zeros(n), np.zeros(n))
        dynamics.mechanism(q, qd, p, mass, bias)
        bias += viscous * qd
        mk.mass_and_bias(model, q, qd, m2, b2)
        assert np.array_equal(mass, m2) and np.allclose(bias, b2, rtol=0, atol=1e-12)
        mk.mass_matrix(model, q, m2)
        mk.bias(model, q, qd, b2)
        assert np.array_equal(mass, m2) and np.allclose(bias, b2, rtol=0, atol=1e-12)
        mk.inverse_dynamics(model, q, qd, qdd, tau)
        plant.set_state(q, qd)
        assert np.abs(plant.derivative(u=tau)[n:] - qdd).max() < 1e-9


def test_the_serial_arm_and_its_urdf_have_the_same_model(tmp_path, rng):
    """Paper 000's arm (serial3_free) and the same arm written as a URDF, with a tip link at
    the end of link 3 and the URDF's base turned so that its x points down (the serial
    arm's frame): the same M, bias (gravity along +x), inverse dynamics, tip pose and tip
    Jacobian, to 1e-12."""
    cfg = load("serial3_free")
    arm = mk.block(cfg)
    path = tmp_path / "arm.urdf"
    damping = cfg.plant.damping[0]
    assert len(set(cfg.plant.damping)) == 1
    path.write_text(PAPER_ARM.replace("DAMPING", repr(damping)).replace(
        "</robot>", '<joint name="end" type="fixed"><parent link="l3"/><child link="tip"/>'
                    '<origin xyz="0.6 0 0"/></joint><link name="tip"/></robot>'))
    urdf = mk.block(resolve({"plant": {"model": "urdf", "urdf": str(path), "tip_link": "tip",
                                       "gravity": [cfg.plant.gravity, 0.0, 0.0]}}))
    for _ in range(20):
        q, qd, qdd = rng.uniform(-2, 2, 3), rng.uniform(-2, 2, 3), rng.uniform(-5, 5, 3)
        results = []
        for model in (arm, urdf):
            mass, bias, tau = np.zeros((3, 3)), np.zeros(3), np.zeros(3)
            mk.mass_and_bias(model, q, qd, mass, bias)
            mk.inverse_dynamics(model, q, qd, qdd, tau)
            results.append((mass, bias, tau, *pose_and_jacobian(model, q)))
        for mine, theirs in zip(*results):
            assert np.abs(mine - theirs).max() < 1e-12 * max(1.0, np.abs(theirs).max())


def test_a_plant_without_a_model_block_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^controller.with_model: plant.model = 'rrr3' has "
                                          r"no rigid-body model"):
        resolve({"plant": {"model": "rrr3"},
                 "controller": {"law": "numpy:zeros", "with_model": True}})
    with pytest.raises(ConfigError, match=r"^controller.type: 'feedforward' needs"):
        load("rrr3_pd", ["controller.type=feedforward"])


def laws():
    """The example's two laws as the loops build them (params + the model block)."""
    import sys

    sys.path.insert(0, str(EXAMPLE))
    try:
        return {name: controller_from_config(load(str(EXAMPLE / f"{name}.toml")), "N m")
                for name in ("panda_computed_torque", "panda_cartesian")}
    finally:
        sys.path.remove(str(EXAMPLE))


def test_the_example_laws_allocate_nothing():
    """The example laws, each calling the model kernels, allocate nothing on numba's heap
    per call (counted by numba's statistics; an allocating law, counted the same way, does).
    (Their LLVM text cannot be read instead: numba does not keep it for cached code.)"""
    from numba import njit
    from numba.core.runtime import _nrt_python as nrt
    from numba.core.runtime import rtsys

    from hilrig.controllers.interface import compile_law

    @njit
    def allocating(t, pos, vel, cur, params, state, u):
        u[:] = np.zeros(u.shape[0])

    built = laws()
    control = compile_law(allocating)
    pos, vel, cur, u = np.full(7, 0.1), np.full(7, -0.2), np.zeros(7), np.zeros(7)
    was_on = nrt.memsys_stats_enabled()
    nrt.memsys_enable_stats()
    try:
        def allocations(call):
            call()
            before = rtsys.get_allocation_stats().alloc
            for _ in range(10):
                call()
            return rtsys.get_allocation_stats().alloc - before
        for controller in built.values():
            assert allocations(lambda: controller(0.3, pos, vel, cur, u)) == 0
            assert np.all(np.isfinite(u)) and np.abs(u).max() > 1.0
        from hilrig.controllers.interface import Controller
        counted = Controller(control, np.zeros(0), np.zeros(0))
        assert allocations(lambda: counted(0.3, pos, vel, cur, u)) == 10
    finally:
        if not was_on:
            nrt.memsys_disable_stats()


@pytest.mark.system
def test_the_example_laws_run_by_hil_sim_track_their_references(tmp_path):
    """`hil sim` of the example configs (the user's laws in the compiled loop):
    joint-space computed torque tracks its sinusoids (0.3 rad, 0.5 Hz) within 2e-4 rad once
    the start-up transient (the reference starts moving, the arm at rest) is over; the
    Cartesian impedance law keeps the hand within 4 mm of its 10 cm circle, which it
    covers (the hand's span 0.2 m in x and y)."""
    for name in ("panda_computed_torque", "panda_cartesian"):
        proc = subprocess.run(hil("sim", f"{name}.toml", "--out", str(tmp_path / f"{name}.npz")),
                              cwd=EXAMPLE, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
    ct = np.load(tmp_path / "panda_computed_torque.npz")
    t, q = ct["t"], ct["q"]
    centre = np.array(load(str(EXAMPLE / "panda_computed_torque.toml")).controller.params[4:])
    reference = centre + 0.3 * np.sin(math.pi * t)[:, None]
    assert np.abs(q - reference)[t > 0.5].max() < 2e-4
    assert np.abs(q - reference).max() > 1e-3        # the transient is there: PD did work

    circle = np.load(tmp_path / "panda_cartesian.npz")
    model = mk.block(load(str(EXAMPLE / "panda_cartesian.toml")))
    tips = np.array([pose_and_jacobian(model, q)[1] for q in circle["q"]])
    t, w = circle["t"], 2 * math.pi * 0.25
    target = tips[0] + np.stack([0.1 * (np.cos(w * t) - 1), 0.1 * np.sin(w * t), 0 * t], axis=1)
    assert np.linalg.norm(tips - target, axis=1).max() < 4e-3
    assert np.ptp(tips[:, 0]) > 0.19 and np.ptp(tips[:, 1]) > 0.19
