"""DC motors and gears coupled to a mechanism (paper 003 §2.2-2.3)."""
import numpy as np
import pytest
from conftest import arm_config, replaced
from hilrig.plant import serial_arm
from hilrig.plant.factory import motor_params, plant_from_config
from hilrig.plant.rrr3 import coupled_mass_diag
from hilrig.rt.sim import simulate
from scipy.integrate import solve_ivp

MOTOR = dict(rotor_inertia=[2e-4, 1.5e-4, 1e-4], resistance=[2.0, 2.5, 3.0],
             inductance=[2e-3, 1e-3, 5e-4], torque_constant=[0.5, 0.4, 0.3],
             back_emf_constant=[0.5, 0.4, 0.3], viscous_friction=[1e-3, 2e-3, 1e-3],
             gear_ratio=[50.0, 40.0, 30.0])


def arm_with_motors(drive, **motor):
    cfg = arm_config(sim={"integrator": "accurate", "accurate_method": "Radau"},
                     q0=[0.444134, -0.444134, 0.529083], damping=[0.5, 0.4, 0.3], drive=drive,
                     motor={**MOTOR, **motor})
    return cfg, plant_from_config(cfg)


def stored_energy(cfg, plant, x):
    """Kinetic (links and rotors) + potential + magnetic energy, J."""
    n = 3
    q, qd, i = x[:n], x[n:2 * n], x[2 * n:]
    mass = np.zeros((n, n))
    serial_arm.mass_and_bias(plant.params, q, qd, mass, np.zeros(n), np.zeros((3, n)))
    motors = motor_params(cfg)
    kinetic = 0.5 * qd @ mass @ qd + 0.5 * np.sum(motors.reflected_inertia() * qd ** 2)
    return kinetic + serial_arm.potential_energy(plant.params, q) \
        + 0.5 * np.sum(motors.inductance * i ** 2)


@pytest.mark.slow
def test_power_balance_of_the_full_motor_model():
    """Electrical energy in = stored energy change + resistive and viscous losses (K_m = K_e)."""
    cfg, plant = arm_with_motors("voltage_full")
    motors = motor_params(cfg)
    damping = np.array(cfg.plant.damping) + motors.gear_ratio ** 2 * motors.viscous_friction

    def voltage(t):
        return np.array([6.0 * np.sin(3 * t), -4.0, 5.0 * np.cos(2 * t)])

    def augmented(t, y):
        x = y[:9]
        u = voltage(t)
        dx = plant.derivative(x, u, t)
        i, qd = x[6:], x[3:6]
        p_in = np.dot(u, i)
        p_loss = np.sum(motors.resistance * i ** 2) + np.sum(damping * qd ** 2)
        return np.concatenate([dx, [p_in, p_loss]])

    y0 = np.concatenate([plant.x, [0.0, 0.0]])
    sol = solve_ivp(augmented, (0.0, 2.0), y0, method="Radau", rtol=1e-11, atol=1e-12)
    assert sol.success
    x_end = sol.y[:9, -1]
    e_in, e_loss = sol.y[9, -1], sol.y[10, -1]
    change = stored_energy(cfg, plant, x_end) - stored_energy(cfg, plant, plant.x)
    assert abs(e_in) > 1.0 and abs(change) > 0.1  # the test exercises real energy flows
    assert e_in - e_loss - change == pytest.approx(0.0, abs=1e-7 * (abs(e_in) + abs(e_loss)))


def test_mismatched_constants_break_the_balance_by_the_conversion_term():
    """With K_m != K_e (as in paper 003: 3 N m/A vs 0.1 V s/rad) the motor is not
    power-consistent: instantaneous imbalance = (K_m - K_e) r qd i."""
    cfg, plant = arm_with_motors("voltage_full", torque_constant=[0.8, 0.4, 0.3])
    rng = np.random.default_rng(3)
    x = np.concatenate([plant.x[:3], rng.uniform(-1, 1, 3), rng.uniform(-2, 2, 3)])
    u = np.array([3.0, -2.0, 1.0])
    dx = plant.derivative(x, u)
    motors = motor_params(cfg)
    i, qd = x[6:], x[3:6]
    electrical_to_shaft = np.dot(u, i) - np.sum(motors.resistance * i ** 2) \
        - np.sum(motors.inductance * i * dx[6:])
    shaft_power = np.sum(motors.torque_constant * motors.gear_ratio * i * qd)
    gap = np.sum((motors.torque_constant - motors.back_emf_constant) * motors.gear_ratio * qd * i)
    assert shaft_power - electrical_to_shaft == pytest.approx(gap, rel=1e-12)


def test_simplified_model_is_the_limit_of_the_full_one():
    """L_a di/dt ~ 0 (eq. 8): the full model approaches it linearly as L_a -> 0."""
    def final_q(drive, inductance):
        cfg, _ = arm_with_motors(drive, inductance=[inductance] * 3)
        cfg = replaced(cfg, "plant.motor", inductance=(inductance,) * 3)
        cfg = replaced(cfg, "input", voltage=(6.0, -4.0, 5.0))
        cfg = replaced(cfg, "sim", duration=0.5, dt=0.01)
        return simulate(cfg).arrays["q"][-1]
    reference = final_q("voltage", 1e-3)
    errors = [np.abs(final_q("voltage_full", L) - reference).max() for L in (1e-2, 1e-3, 1e-4)]
    print("\n|q_full - q_simplified| at 0.5 s for L_a = 1e-2, 1e-3, 1e-4 H: "
          + ", ".join(f"{e:.2e}" for e in errors))
    assert errors[0] > 5 * errors[1] > 25 * errors[2]
    assert errors[2] < 1e-3


def test_rrr3_coupled_mass_matches_paper():
    """Paper 003 §5.1 (MODELS.md): M_s = diag(1.43144 x3, 2.103 x2, 0.022), c = 10, k = 10."""
    from conftest import config
    cfg = config("rrr3_forward")
    plant = plant_from_config(cfg)
    diag = np.zeros(6)
    coupled_mass_diag(plant.params, diag)
    assert diag == pytest.approx([1.43144, 1.43144, 1.43144, 2.103, 2.103, 0.022], abs=5e-6)
    motors = motor_params(cfg)
    assert motors.back_emf_damping() == pytest.approx([10.0] * 3)
    assert motors.torque_per_volt() == pytest.approx([10.0] * 3)
