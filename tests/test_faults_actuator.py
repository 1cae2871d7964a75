"""Actuator faults (issue 24, items 1, 2, 7): each follows the motor model's physics
(docs/FAULTS.md): a free-swinging joint takes no work from its drive, a shorted winding
brakes with r^2 K_m K_e qd / R_a, a sagging supply limits the torque a voltage drive
reaches, a brake follows the jam law of paper 000."""
import re

import numpy as np
import pytest
from conftest import config
from hilrig.errors import ConfigError
from hilrig.plant.factory import motor_params, plant_from_config
from hilrig.plant.faults import FAULT_COLUMNS, fault_row
from hilrig.plant.motor import apply_drive
from hilrig.plant.stepping import apply_schedule
from hilrig.rt.sim import simulate
from hilrig.settings.config import resolve

ARM = {"model": "serial_arm", "mass": [9.0, 7.0, 5.0], "inertia": [1.5, 1.0, 0.6],
       "length": [0.8, 0.7, 0.6], "com": [0.4, 0.35, 0.3], "damping": [0.0, 0.0, 0.0],
       "gravity": 9.81, "q0": [0.4, -0.4, 0.5]}
PD = {"type": "pd", "kp": [200.0, 200.0, 100.0], "kd": [20.0, 20.0, 10.0],
      "reference": "sinusoid", "target": [0.5, 0.5, 0.5]}


def arm(faults: dict, drive: str = "torque", duration: float = 2.0, **plant):
    return resolve({"plant": {**ARM, "drive": drive, **plant},
                    "sim": {"duration": duration, "dt": 0.001},
                    "controller": {**PD, "output": "torque" if drive == "torque" else "voltage"},
                    "faults": faults})


def test_a_free_swinging_joints_energy_books_close_with_the_others_driven():
    """No damping: the arm's energy changes by exactly the work of the drives of joints 1
    and 3 (u held over each step: u (q(t + h) - q(t))); joint 2's drive, which the law
    keeps commanding, adds none. The books of the healthy arm close with all three."""
    def books(a, joints):
        dq = np.diff(a["q"][:, joints], axis=0)
        work = np.sum(a["u"][:-1, joints] * dq)
        return a["energy"][-1] - a["energy"][0], work

    swinging = simulate(arm({"free_swing": {"joint": 2}})).arrays
    change, work13 = books(swinging, [0, 2])
    _, work123 = books(swinging, [0, 1, 2])
    assert np.abs(swinging["u"][:, 1]).max() > 10.0          # the law drives joint 2 hard
    assert abs(change - work13) < 1e-6 * max(abs(work13), 1.0)
    assert abs(change - work123) > 1.0                        # joint 2's command did nothing
    healthy = simulate(arm({})).arrays
    change, work123 = books(healthy, [0, 1, 2])
    assert abs(change - work123) < 1e-6 * max(abs(work123), 1.0)


def drive_terms(cfg, kind: str, x, u, **params):
    """apply_drive's (mass, bias, force, di/dt) for the plant of ``cfg`` with ``kind`` on
    joint 2 active (empty kind: healthy)."""
    plant = plant_from_config(cfg)
    nq = plant.nq
    table = np.array([fault_row(kind, 1, 0.0, np.inf, params)]) if kind else \
        np.zeros((0, FAULT_COLUMNS))
    apply_schedule(plant.params, plant.jams, table, 0.0, plant.x, 0.0)
    mass, bias = np.eye(nq), np.zeros(nq)
    force, dcurrent = np.zeros(nq), np.zeros(plant.nact)
    apply_drive(plant.params, plant.jams, np.asarray(x, float), np.asarray(u, float), mass,
                bias, force, dcurrent)
    return mass, bias, force, dcurrent


def test_a_shorted_winding_brakes_with_k_squared_omega_over_r_in_the_static_model():
    cfg = arm({}, drive="voltage")
    m = motor_params(cfg)
    x = [0.1, 0.2, 0.3, 0.7, -1.3, 0.4]
    _, _, force, _ = drive_terms(cfg, "winding_short", x, [5.0, 12.0, -3.0])
    r, km, ke, ra = m.gear_ratio[1], m.torque_constant[1], m.back_emf_constant[1], m.resistance[1]
    assert force[1] == pytest.approx(-r * r * km * ke * -1.3 / ra, rel=1e-14)
    _, _, healthy, _ = drive_terms(cfg, "", x, [5.0, 0.0, -3.0])
    assert np.array_equal(force, healthy)                     # V = 0 at the winding


def test_a_shorted_winding_brakes_as_k_squared_omega_over_r_after_the_inductance_transient():
    """Full motor model: the current obeys L di/dt = -R i - K_e r qd once shorted; after
    a few L/R it follows the static model's -K_e r qd / R (tau = -r^2 K_m K_e qd / R)."""
    cfg = arm({"winding_short": {"joint": 2, "t1": 0.5}}, drive="voltage_full", duration=1.0,
              motor={"inductance": 0.01})
    a = simulate(cfg).arrays
    m = motor_params(cfg)
    r, ke, ra, la = (m.gear_ratio[1], m.back_emf_constant[1], m.resistance[1],
                     m.inductance[1])
    t, i2, qd2 = a["t"], a["i"][:, 1], a["qd"][:, 1]
    static = -ke * r * qd2 / ra
    settled = t >= 0.5 + 10 * la / ra
    assert np.abs(qd2[settled]).max() > 0.05                 # the joint moves: a real test
    assert np.abs(i2[settled] - static[settled]).max() < 0.02 * np.abs(static[settled]).max()
    before = (t > 0.3) & (t < 0.5)
    assert np.abs(i2[before] - static[before]).max() > 0.5    # driven before the short


def test_a_sagging_supply_limits_the_reachable_torque_as_the_motor_model_says():
    cfg = arm({}, drive="voltage")
    m = motor_params(cfg)
    r, km, ke, ra = m.gear_ratio[1], m.torque_constant[1], m.back_emf_constant[1], m.resistance[1]
    x = [0.0, 0.0, 0.0, 0.0, 0.8, 0.0]
    for u, expected_v in ((24.0, 6.0), (-24.0, -6.0), (8.0, 4.0)):
        _, _, force, _ = drive_terms(cfg, "supply_sag", x, [0.0, u, 0.0], factor=0.5,
                                     max_voltage=6.0)
        assert force[1] == pytest.approx(r * km * (expected_v - ke * r * 0.8) / ra, rel=1e-14)


@pytest.mark.parametrize("kind, params, expected", [
    ("effectiveness", {"factor": 0.25}, lambda healthy: 0.25 * healthy),
    ("torque_offset", {"torque": 3.5}, lambda healthy: healthy + 3.5),
    ("free_swing", {}, lambda healthy: 0.0),
    ("winding_open", {}, lambda healthy: 0.0),
])
def test_a_drive_fault_scales_offsets_or_removes_the_drive_torque(kind, params, expected):
    cfg = arm({}, drive="voltage")
    x = [0.1, 0.2, 0.3, 0.7, -1.3, 0.4]
    _, _, healthy, _ = drive_terms(cfg, "", x, [5.0, 12.0, -3.0])
    _, _, force, _ = drive_terms(cfg, kind, x, [5.0, 12.0, -3.0], **params)
    assert force[1] == pytest.approx(expected(healthy[1]), rel=1e-14, abs=1e-15)
    assert force[0] == healthy[0] and force[2] == healthy[2]


def test_raised_friction_adds_its_viscous_torque():
    cfg = arm({}, drive="voltage")
    x = [0.1, 0.2, 0.3, 0.7, -1.3, 0.4]
    _, healthy, _, _ = drive_terms(cfg, "", x, [5.0, 12.0, -3.0])
    _, bias, _, _ = drive_terms(cfg, "friction", x, [5.0, 12.0, -3.0], viscous=2.0)
    assert bias[1] - healthy[1] == pytest.approx(2.0 * -1.3, rel=1e-14)


def test_an_open_winding_carries_no_current_in_the_full_model():
    cfg = arm({"winding_open": {"joint": 2, "t1": 0.5}}, drive="voltage_full", duration=1.0,
              motor={"inductance": 0.01})
    a = simulate(cfg).arrays
    after = a["t"] >= 0.5
    assert np.abs(a["i"][a["t"] < 0.5, 1]).max() > 0.5
    assert np.all(a["i"][after, 1] == 0.0)


def test_a_brake_follows_the_jam_law_and_releases():
    """A brake engaged at t1 for 1 s is paper 000's jam (the same rows to the bit while it
    holds: plant.jam's law), then the joint moves again."""
    jammed = simulate(config("serial3_jam1", "sim.duration=3.5")).arrays
    braked = simulate(config("serial3_jam1", "sim.duration=3.5", "faults.jam=[]",
                             "faults.brake.joint=1", "faults.brake.t1=2.0",
                             "faults.brake.stop_time=0.1",
                             "faults.brake.duration=1.0")).arrays
    held = braked["t"] <= 3.0 + 1e-9
    assert np.array_equal(braked["q"][held], jammed["q"][held])
    assert np.all(braked["qd"][(braked["t"] >= 2.1) & held, 0] == 0.0)
    assert np.abs(braked["qd"][braked["t"] > 3.05, 0]).max() > 1e-4    # released
    assert braked["fault_events"].tolist() == [[16.0, 1.0, 0.0, 2.0, 3.0]]


@pytest.mark.parametrize("faults, error", [
    ({"winding_short": {"joint": 1}}, "faults.winding_short[0]: needs a motor model"),
    ({"free_swing": {"joint": 4}}, "faults.free_swing[0].joint: must be 1..3, got 4"),
    ({"free_swing": {"joint": 1, "mean_on": 0.1}},
     "faults.free_swing[0]: an intermittent fault needs both mean_on and mean_off"),
    ({"free_swing": {"joint": 1, "fact": 1}}, "unknown key 'faults.free_swing.fact'"),
    ({"torque_offset": {"joint": 1}}, "faults.torque_offset.torque: missing"),
])
def test_a_bad_actuator_fault_is_one_line_naming_it(faults, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        arm(faults)
