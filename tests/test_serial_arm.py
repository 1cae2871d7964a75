"""Serial arm (paper 000): M, C, g against an independent sympy Lagrangian; energy."""
import numpy as np
import pytest
import sympy as sp
from conftest import arm_config, replaced
from hilrig.plant import serial_arm
from hilrig.plant.factory import plant_from_config
from hilrig.rt.sim import simulate


def sympy_model(mass, inertia, length, com, gravity):
    """M(q), C(q, qd) (Christoffel), g(q) of a planar chain, from its energies in sympy.

    Written from the link kinematics directly (positions of the centres of mass
    in the x-down frame), independent of the absolute-angle formulation used by
    plant.serial_arm.
    """
    n = len(mass)
    q = sp.symbols(f"q1:{n + 1}")
    qd = sp.symbols(f"qd1:{n + 1}")
    kinetic = 0
    potential = 0
    x_joint, y_joint, phi = 0, 0, 0
    for i in range(n):
        phi = phi + q[i]
        xc = x_joint + com[i] * sp.cos(phi)
        yc = y_joint + com[i] * sp.sin(phi)
        vx = sum(sp.diff(xc, q[k]) * qd[k] for k in range(n))
        vy = sum(sp.diff(yc, q[k]) * qd[k] for k in range(n))
        omega = sum(qd[: i + 1])
        kinetic += sp.Rational(1, 2) * (mass[i] * (vx ** 2 + vy ** 2) + inertia[i] * omega ** 2)
        potential += -mass[i] * gravity * xc
        x_joint += length[i] * sp.cos(phi)
        y_joint += length[i] * sp.sin(phi)
    M = sp.Matrix(n, n, lambda i, j: sp.diff(kinetic, qd[i], qd[j]))
    C = sp.Matrix(n, n, lambda i, j: sum(
        sp.Rational(1, 2) * (sp.diff(M[i, j], q[k]) + sp.diff(M[i, k], q[j]) - sp.diff(M[j, k], q[i]))
        * qd[k] for k in range(n)))
    g = sp.Matrix([sp.diff(potential, q[i]) for i in range(n)])
    Mdot = sp.Matrix(n, n, lambda i, j: sum(sp.diff(M[i, j], q[k]) * qd[k] for k in range(n)))
    args = (q, qd)
    return (sp.lambdify(args, M), sp.lambdify(args, C), sp.lambdify(args, g),
            sp.lambdify(args, Mdot), sp.lambdify(args, kinetic + potential))


def ours(plant, q, qd):
    n = plant.nq
    mass = np.zeros((n, n))
    bias = np.zeros(n)
    coriolis = np.zeros((n, n))
    grav = np.zeros(n)
    scratch = np.zeros((3, n))
    serial_arm.mass_and_bias(plant.params, q, np.zeros(n), mass, bias, scratch)
    serial_arm.coriolis_matrix(plant.params, q, qd, coriolis, scratch)
    serial_arm.gravity_torque(plant.params, q, grav)
    return mass, coriolis, grav


ARMS = {
    "paper_3dof": dict(mass=[9.0, 7.0, 5.0], inertia=[1.5, 1.0, 0.6], length=[0.8, 0.7, 0.6],
                       com=[0.4, 0.35, 0.3]),
    "two_link": dict(mass=[2.0, 1.5], inertia=[0.02, 0.01], length=[0.4, 0.3], com=[0.2, 0.12]),
    "four_link": dict(mass=[4.0, 3.0, 2.0, 1.0], inertia=[0.3, 0.2, 0.1, 0.05],
                      length=[0.5, 0.45, 0.4, 0.3], com=[0.25, 0.2, 0.22, 0.1]),
}


@pytest.mark.slow
@pytest.mark.parametrize("arm", sorted(ARMS))
def test_matrices_match_independent_lagrangian(arm, rng):
    spec = ARMS[arm]
    plant = plant_from_config(arm_config(**spec))
    M_ref, C_ref, g_ref, Mdot_ref, _ = sympy_model(spec["mass"], spec["inertia"], spec["length"],
                                                   spec["com"], 9.81)
    n = len(spec["mass"])
    for _ in range(25):
        q = rng.uniform(-np.pi, np.pi, n)
        qd = rng.uniform(-4.0, 4.0, n)
        mass, coriolis, grav = ours(plant, q, qd)
        scale = np.abs(M_ref(q, qd)).max()
        assert np.abs(mass - M_ref(q, qd)).max() <= 1e-12 * scale
        assert np.abs(coriolis - C_ref(q, qd)).max() <= 1e-12 * scale * 4.0
        assert np.abs(grav - np.ravel(g_ref(q, qd))).max() <= 1e-12 * 100.0
        # physics of the matrices: M symmetric positive definite, Mdot - 2C skew-symmetric
        assert np.array_equal(mass, mass.T) or np.abs(mass - mass.T).max() < 1e-14 * scale
        assert np.linalg.eigvalsh(mass).min() > 0.0
        skew = np.asarray(Mdot_ref(q, qd)) - 2.0 * coriolis
        assert np.abs(skew + skew.T).max() <= 1e-11 * scale


def test_kernel_accelerations_match_lagrangian(rng):
    """The full derivative (with damping and torques) solves M qdd + C qd + b qd + g = u."""
    spec = ARMS["paper_3dof"]
    plant = plant_from_config(arm_config(**spec, damping=[1.0, 2.0, 3.0]))
    M_ref, C_ref, g_ref, _, _ = sympy_model(spec["mass"], spec["inertia"], spec["length"],
                                            spec["com"], 9.81)
    for _ in range(10):
        q, qd, u = rng.uniform(-3, 3, 3), rng.uniform(-3, 3, 3), rng.uniform(-20, 20, 3)
        x = np.concatenate([q, qd])
        qdd = plant.derivative(x, u)[3:]
        rhs = u - np.asarray(C_ref(q, qd)) @ qd - np.array([1.0, 2.0, 3.0]) * qd \
            - np.ravel(g_ref(q, qd))
        expected = np.linalg.solve(np.asarray(M_ref(q, qd)), rhs)
        assert np.allclose(qdd, expected, rtol=1e-11, atol=1e-11)


def energy_drift(integrator, dt=0.001, duration=10.0):
    """max |E(t) - E(0)| relative to the energy above the rest state (E(0) - V(q = 0))."""
    cfg = arm_config(q0=[0.444134, -0.444134, 0.529083], damping=0.0)
    cfg = replaced(cfg, "sim", integrator=integrator, dt=dt, duration=duration)
    energy = simulate(cfg).arrays["energy"]
    rest = serial_arm.potential_energy(plant_from_config(cfg).params, np.zeros(3))
    return np.abs(energy - energy[0]).max() / (energy[0] - rest)


def test_energy_conserved_without_damping():
    drift = energy_drift("accurate")
    rk4_drift = energy_drift("rk4")
    print(f"\nrelative energy drift over 10 s, b = 0, u = 0: accurate {drift:.2e}, "
          f"RK4 at 1 ms {rk4_drift:.2e}")
    assert drift < 1e-9
    assert rk4_drift < 1e-5


def test_damping_dissipates_exactly_what_it_removes():
    """With damping, dE/dt = -sum b_i qd_i^2 (no input): the energy record follows it."""
    cfg = arm_config(q0=[0.444134, -0.444134, 0.529083], damping=[15.0, 5.0, 1.0])
    cfg = replaced(cfg, "sim", integrator="accurate", duration=2.0, dt=1e-4)
    a = simulate(cfg).arrays
    power = -(np.array([15.0, 5.0, 1.0]) * a["qd"] ** 2).sum(axis=1)
    dissipated = np.concatenate([[0.0], np.cumsum(0.5 * (power[1:] + power[:-1]) * np.diff(a["t"]))])
    assert np.abs((a["energy"] - a["energy"][0]) - dissipated).max() < 1e-6 * np.abs(a["energy"]).max()


@pytest.mark.parametrize("drive", ["torque", "voltage"])
def test_unrolled_three_link_path_equals_generic_path(drive, rng):
    """serial_arm.accel3 (the healthy 3-link fast path) against mass_and_bias +
    motor.apply_drive + the restructured solve, which serve every other arm."""
    from hilrig.plant.jam import restructured_accel
    from hilrig.plant.motor import apply_drive
    motor = {"rotor_inertia": 2e-4, "resistance": 2.0, "torque_constant": 0.5,
             "back_emf_constant": 0.4, "viscous_friction": 1e-3, "gear_ratio": 50.0}
    plant = plant_from_config(arm_config(damping=[1.0, 2.0, 3.0], drive=drive, motor=motor))
    p = plant.params
    for _ in range(20):
        x = np.concatenate([rng.uniform(-3, 3, 3), rng.uniform(-4, 4, 3)])
        u = rng.uniform(-10, 10, 3)
        fast = np.zeros(3)
        serial_arm.accel3(p, x, u, fast)
        mass, bias, force, generic = np.zeros((3, 3)), np.zeros(3), np.zeros(3), np.zeros(3)
        serial_arm.mass_and_bias(p, x[:3], x[3:], mass, bias, np.zeros((5, 3)))
        apply_drive(p, plant.jams, x, u, mass, bias, force, np.zeros(0))
        restructured_accel(mass, bias, force, plant.jams, generic, np.zeros((5, 3)))
        assert np.allclose(fast, generic, rtol=1e-12, atol=1e-12)
