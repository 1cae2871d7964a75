"""The motor current a faulty winding carries (issue 24, items 1 and 4): `hil sim` logs the
current of the faulty drive (0 through an open winding, the back-EMF's through a short,
the sagging supply's), not the healthy drive's, and equals `hil run --fast` bit for bit
(rt.tick records it where the telemetry row gets it); `hil sim --replay` reproduces it."""
import numpy as np
import pytest
from hilrig.plant.factory import motor_params
from hilrig.rt.replay import replay_log
from hilrig.rt.session import Session
from hilrig.rt.sim import simulate
from hilrig.settings.config import resolve
from rt_helpers import read_complete

ARM = {"model": "serial_arm", "mass": [9.0, 7.0, 5.0], "inertia": [1.5, 1.0, 0.6],
       "length": [0.8, 0.7, 0.6], "com": [0.4, 0.35, 0.3], "damping": [0.0, 0.0, 0.0],
       "gravity": 9.81, "q0": [0.4, -0.4, 0.5]}
PD = {"type": "pd", "kp": [200.0, 200.0, 100.0], "kd": [20.0, 20.0, 10.0],
      "reference": "sinusoid", "target": [0.5, 0.5, 0.5], "output": "voltage"}
T1 = 0.3


def arm(drive: str, faults: dict):
    motor = {"inductance": 0.01} if drive == "voltage_full" else {}
    return resolve({"plant": {**ARM, "drive": drive, "motor": motor},
                    "sim": {"duration": 0.8, "dt": 0.001}, "controller": PD,
                    "faults": faults})


def expected_current(cfg, kind: str, a: dict) -> np.ndarray:
    """Joint 2's current from t1 on as the simplified motor model says under ``kind``:
    i = (V - K_e r qd) / R_a with V the voltage the winding sees (0 when shorted, the
    sagging supply's clamp(0.5 u, +-6 V)); 0 through an open winding."""
    m = motor_params(cfg)
    r, ke, ra = m.gear_ratio[1], m.back_emf_constant[1], m.resistance[1]
    u, qd = a["u"][:, 1], a["qd"][:, 1]
    volts = {"winding_open": np.nan, "winding_short": 0.0 * u,
             "supply_sag": np.clip(0.5 * u, -6.0, 6.0)}[kind]
    return np.zeros_like(u) if kind == "winding_open" else (volts - ke * r * qd) / ra


FAULTS = {"winding_open": {}, "winding_short": {},
          "supply_sag": {"factor": 0.5, "max_voltage": 6.0}}


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_sim_logs_the_faulty_windings_current(kind):
    """Simplified model (the 3-link arm's fused step): from the fault's start joint 2's
    logged current is the faulty winding's, which differs from the healthy drive's."""
    cfg = arm("voltage", {kind: {"joint": 2, "t1": T1, **FAULTS[kind]}})
    a = simulate(cfg).arrays
    on = a["t"] >= T1 - 1e-9
    np.testing.assert_allclose(a["i"][on, 1], expected_current(cfg, kind, a)[on],
                               rtol=1e-12, atol=1e-12)
    m = motor_params(cfg)
    healthy = (a["u"][:, 1] - m.back_emf_constant[1] * m.gear_ratio[1] * a["qd"][:, 1]) \
        / m.resistance[1]
    assert np.abs(a["i"][on, 1] - healthy[on]).max() > 0.5       # not the healthy drive's
    np.testing.assert_array_equal(a["i"][~on, 1], healthy[~on])  # before the fault: it is


@pytest.mark.parametrize("drive, kind", [("voltage", "winding_open"),
                                         ("voltage", "winding_short"),
                                         ("voltage", "supply_sag"),
                                         ("voltage_full", "winding_short")])
def test_sim_logs_the_currents_of_hil_run_fast_and_its_replay(tmp_path, drive, kind):
    """`hil sim` = `hil run --fast` = `hil sim --replay`, the currents bit for bit, under
    each winding or supply fault on joint 2 (the full model's current is a state)."""
    cfg = arm(drive, {kind: {"joint": 2, "t1": T1, **FAULTS[kind]}})
    a = simulate(cfg).arrays
    Session(cfg, tmp_path / "run.mcap", fast=True).run()
    logged, _, _, _ = read_complete(tmp_path / "run.mcap")
    for key in ("q", "qd", "u", "i"):
        np.testing.assert_array_equal(logged[key], a[key], err_msg=key)
    replay, _ = replay_log(tmp_path / "run.mcap")
    np.testing.assert_array_equal(replay.arrays["i"], a["i"])
    on = a["t"] >= T1 - 1e-9
    assert np.abs(a["i"][~on, 1]).max() > 0.5                   # driven before the fault
    healthy = simulate(arm(drive, {})).arrays["i"]
    assert np.abs(a["i"][on, 1] - healthy[on, 1]).max() > 0.5   # and not as the healthy one


def test_a_dropped_current_holds_what_the_law_saw_in_hil_sim_and_hil_run(tmp_path):
    """A current-feedback law (tests/user_parts.py) under a dropout of joint 2's current
    from t1 for 0.2 s: the law is given the current it saw last before the dropout in
    `hil run --fast` as in `hil sim` (the telemetry row's currents once overwrote that
    value with the current under the new command), so the two agree bit for bit."""
    raw = {"plant": {**ARM, "drive": "voltage"}, "sim": {"duration": 0.8, "dt": 0.001},
           "controller": {"law": "user_parts:nan_without_currents", "params": [40.0, 4.0]},
           "faults": {"sensor_dropout": {"joint": 2, "t1": T1, "duration": 0.2,
                                         "channel": "current"}}}
    cfg = resolve(raw)
    a = simulate(cfg).arrays
    Session(cfg, tmp_path / "run.mcap", fast=True).run()
    logged, _, _, _ = read_complete(tmp_path / "run.mcap")
    for key in ("q", "qd", "u", "i"):
        np.testing.assert_array_equal(logged[key], a[key], err_msg=key)
    # the dropout mattered: the law's command differs from the run without it
    del raw["faults"]
    clean = simulate(resolve(raw)).arrays
    on = (a["t"] >= T1 - 1e-9) & (a["t"] < T1 + 0.2 - 1e-9)
    assert np.abs(a["u"][on, 1] - clean["u"][on, 1]).max() > 1e-3
