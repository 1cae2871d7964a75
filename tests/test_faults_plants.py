"""Actuator faults beyond the serial chains (issue 24, items 1 and 7): on the 3RRR's actuated
joints (the generic constrained solve and the fused RK4 step `hil run` and `hil sim` take)
and on the flexible chain's joints on the ground (its contact tick); a kind a plant does
not model is one line naming plant and kind."""
import re

import numpy as np
import pytest
from conftest import config
from hilrig.errors import ConfigError
from hilrig.plant import rrr3_scalar
from hilrig.plant.factory import motor_params, plant_from_config
from hilrig.plant.faults import fault_row, live_row
from hilrig.plant.flex_chain import chain as fc
from hilrig.plant.flex_chain.model import chain_params
from hilrig.plant.flex_chain.tick import energy_books
from hilrig.plant.motor import apply_drive
from hilrig.plant.stepping import apply_schedule
from hilrig.rt.session import Session
from hilrig.rt.sim import simulate
from rt_helpers import read_complete

H = 1e-3
# a 3RRR state off rest (rrr3_pd's q0; rates of the actuated joints and the platform)
X = np.array([-0.1259, 1.3727, 3.2675, 0.59363, 0.60145, 0.020707,
              0.7, -1.3, 0.4, 0.05, -0.02, 0.3])
U = np.array([5.0, 12.0, -3.0])


def rrr3(drive: str = "voltage", faults=()):
    """rrr3_pd's plant with ``faults`` ((kind, joint 0-based, params) ...) active."""
    cfg = config("rrr3_pd", f"plant.drive='{drive}'")
    plant = plant_from_config(cfg)
    if faults:
        table = np.array([fault_row(kind, joint, 0.0, np.inf, params)
                          for kind, joint, params in faults])
        apply_schedule(plant.params, plant.jams, table, 0.0, plant.x, 0.0)
    return cfg, plant


def generic_rk4(plant, x, u):
    """RK4 over plant.derivative: the generic path (rrr3.constrained_accel with
    plant.motor.apply_drive and its actuator faults)."""
    k1 = plant.derivative(x, u)
    k2 = plant.derivative(x + 0.5 * H * k1, u)
    k3 = plant.derivative(x + 0.5 * H * k2, u)
    k4 = plant.derivative(x + H * k3, u)
    return x + H / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def fused(plant, x, u):
    """The fused RK4 step of the 3RRR (plant.rrr3_scalar.rk4) with the plant's faults."""
    x = x.copy()
    assert rrr3_scalar.rk4(plant.params, x, np.asarray(u, float), H, plant.work, 0.0,
                           plant.jams) == 3.0
    return x


def close(a, b, tol=1e-11):
    return np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max())


@pytest.mark.parametrize("kind, params, same_as", [
    ("free_swing", {}, lambda u: [u[0], 0.0, u[2]]),
    ("effectiveness", {"factor": 0.25}, lambda u: [u[0], 0.25 * u[1], u[2]]),
    ("torque_offset", {"torque": 3.5}, lambda u: [u[0], u[1] + 3.5, u[2]]),
])
def test_a_torque_driven_3rrr_joint_takes_the_torque_its_faulty_drive_gives(kind, params,
                                                                            same_as):
    """Joint 2 of the torque-driven 3RRR under the fault moves as the healthy 3RRR under
    the torque the fault leaves (none, a quarter, 3.5 N m more): the constrained
    accelerations equal to the bit, and the fused step follows the generic one."""
    _, faulty = rrr3("torque", [(kind, 1, params)])
    _, healthy = rrr3("torque")
    assert np.array_equal(faulty.derivative(X, U), healthy.derivative(X, np.array(same_as(U))))
    assert not np.array_equal(faulty.derivative(X, U), healthy.derivative(X, U))
    assert close(fused(faulty, X, U), generic_rk4(faulty, X, U))
    assert close(fused(faulty, X, U), fused(healthy, X, same_as(U)))


def test_raised_friction_on_a_3rrr_joint_is_its_viscous_torque():
    _, faulty = rrr3("torque", [("friction", 1, {"viscous": 2.0})])
    _, healthy = rrr3("torque")
    assert close(faulty.derivative(X, U), healthy.derivative(X, U - [0.0, 2.0 * X[7], 0.0]),
                 1e-13)
    assert close(fused(faulty, X, U), generic_rk4(faulty, X, U))


def test_a_shorted_3rrr_winding_brakes_with_r2_km_ke_qd_over_r():
    """The voltage-driven 3RRR: joint 2's shorted winding gives the torque
    -r^2 K_m K_e qd / R_a whatever the command (the winding sees 0 V), so the joint moves
    as under a healthy drive commanded 0 V; the other joints keep their drives."""
    cfg, faulty = rrr3("voltage", [("winding_short", 1, {})])
    m = motor_params(cfg)
    r, km, ke, ra = m.gear_ratio[1], m.torque_constant[1], m.back_emf_constant[1], m.resistance[1]
    mass, bias, force, dcurrent = np.eye(6), np.zeros(6), np.zeros(6), np.zeros(3)
    apply_drive(faulty.params, faulty.jams, X, U, mass, bias, force, dcurrent)
    braking = force[1] - bias[1] + r * r * m.viscous_friction[1] * X[7]
    assert braking == pytest.approx(-r * r * km * ke * X[7] / ra, rel=1e-13)
    _, healthy = rrr3("voltage")
    assert close(faulty.derivative(X, U), healthy.derivative(X, np.array([U[0], 0.0, U[2]])),
                 1e-13)
    assert close(fused(faulty, X, U), generic_rk4(faulty, X, U))
    assert close(fused(faulty, X, U), fused(healthy, X, [U[0], 0.0, U[2]]))


def test_a_sagging_supply_and_an_open_winding_on_the_3rrr():
    """Supply sag (factor 0.5, at most 6 V): the joint moves as under the clamped voltage;
    an open winding: as a free-swinging joint (no torque, no back-EMF damping)."""
    _, sag = rrr3("voltage", [("supply_sag", 1, {"factor": 0.5, "max_voltage": 6.0})])
    _, healthy = rrr3("voltage")
    assert close(fused(sag, X, U), fused(healthy, X, [U[0], 6.0, U[2]]))
    assert close(fused(sag, X, U), generic_rk4(sag, X, U))
    _, opened = rrr3("voltage", [("winding_open", 1, {})])
    _, swinging = rrr3("voltage", [("free_swing", 1, {})])
    assert close(fused(opened, X, U), fused(swinging, X, U))
    assert close(fused(opened, X, U), generic_rk4(opened, X, U))
    assert not close(fused(opened, X, U), fused(healthy, X, [U[0], 0.0, U[2]]), 1e-6)


def test_a_3rrr_run_with_a_winding_fault_logs_as_hil_sim(tmp_path):
    """rrr3_pd with joint 2's winding shorted from 0.3 s: `hil sim` equals the healthy run
    before and not after, and `hil run --fast` logs the same rows, currents included."""
    over = ("sim.duration=0.6", "faults.winding_short.joint=2", "faults.winding_short.t1=0.3")
    cfg = config("rrr3_pd", *over)
    a = simulate(cfg).arrays
    healthy = simulate(config("rrr3_pd", "sim.duration=0.6")).arrays
    before = a["t"] < 0.3 - 1e-9
    assert np.array_equal(a["q"][before], healthy["q"][before])
    assert np.abs(a["q"][~before] - healthy["q"][~before]).max() > 1e-4
    assert np.all(np.abs(a["i"][~before, 1] + a["qd"][~before, 1] * 10.0 * 0.1 / 3.0) < 1e-12)
    Session(cfg, tmp_path / "run.mcap", fast=True).run()
    logged = read_complete(tmp_path / "run.mcap")[0]
    for key in ("q", "qd", "u", "i"):
        np.testing.assert_array_equal(logged[key], a[key], err_msg=key)


def test_the_flexible_chain_on_the_ground_takes_its_joints_faults(tmp_path):
    """chain_drop_ss_rt under constant joint torques (2, -1.5 N m), joint 1's drive
    free-swinging from 0.1 s, joint 2's at half effectiveness: the joint torques' work W_U
    is the sum of each tick's torques as the faults leave them times the joint's travel,
    and the energy books close, E - E(0) = W_N + W_T - W_D + W_U."""
    cfg = config("chain_drop_ss_rt", "sim.duration=0.3", "input.torque=[2.0, -1.5]",
                 "faults.free_swing.joint=1", "faults.free_swing.t1=0.1",
                 "faults.effectiveness.joint=2", "faults.effectiveness.factor=0.5")
    session = Session(cfg, tmp_path / "run.mcap", fast=True)
    session.run()
    a = read_complete(tmp_path / "run.mcap")[0]
    t, q, qd = a["t"], a["q"], a["qd"]
    tau = np.column_stack([np.where(t < 0.1 - 1e-9, 2.0, 0.0), np.full(len(t), -0.75)])
    work = np.sum(tau[:-1] * np.diff(q[:, :2], axis=0))
    w_n, w_t, w_d, w_u = energy_books(session.plant.params)
    assert w_u == pytest.approx(work, rel=1e-9)
    commanded = np.sum(a["u"][:-1] * np.diff(q[:, :2], axis=0))
    assert abs(w_u - commanded) > 0.05                       # the faults took work away
    chain = chain_params(cfg.plant).block()
    energy = [fc.energy(chain, q[k], qd[k]) for k in (0, -1)]
    assert energy[1] - energy[0] == pytest.approx(w_n + w_t - w_d + w_u, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("overrides, error", [
    (("rrr3_pd", "faults.brake.joint=1"),
     "faults.brake[0]: a brake stops its joint by the jam law, modelled for chains (serial "
     "arms, a user's chain), not for plant.model = 'rrr3'"),
    (("rrr3_pd", "faults.winding_open.joint=1", "plant.drive='torque'"),
     "faults.winding_open[0]: needs a motor model (plant.drive = 'voltage' or "
     "'voltage_full'), not a torque drive"),
    (("chain_drop_ss_rt", "faults.winding_short.joint=1"),
     "faults.winding_short[0]: needs a motor model"),
])
def test_what_a_plant_does_not_model_is_one_line_naming_plant_and_kind(overrides, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        config(*overrides)


def test_hil_sim_of_the_flexible_chain_refuses_faults_it_cannot_run():
    with pytest.raises(ConfigError, match=re.escape(
            "faults.free_swing: flex_chain under hil sim runs its own integrators under "
            "constant input.torque, without faults; `hil run --fast` steps it with them")):
        simulate(config("chain_drop_ss_rt", "sim.duration=0.01", "faults.free_swing.joint=1"))


def test_live_actuator_faults_reach_the_3rrr_but_a_brake_does_not():
    row = live_row("free_swing", 2, np.inf, {}, "position", 3, False, True, "voltage")
    assert row[1] == 1.0
    with pytest.raises(ValueError, match="brake: jams and brakes follow the jam law"):
        live_row("brake", 2, np.inf, {}, "position", 3, False, True, "voltage")
    with pytest.raises(ValueError, match="free_swing: actuator faults are not modelled"):
        live_row("free_swing", 2, np.inf, {}, "position", 3, False, False, "voltage")
