"""Sensor faults and triggers (issue 24, items 2, 4, 7): what the law saw (q_meas, qd_meas)
differs from the logged true state exactly as the fault says; a condition starts a fault
where it first holds, an intermittent one on its seeded phases; `hil run --fast` logs the
same rows and events as `hil sim`, and `hil sim --replay` reproduces them."""
import math

import numpy as np
import pytest
from hilrig.plant.faults import phases
from hilrig.rt.replay import replay_log
from hilrig.rt.session import Session
from hilrig.rt.sim import simulate
from hilrig.settings.config import resolve
from rt_helpers import read_complete

ARM = {"model": "serial_arm", "drive": "torque", "mass": [9.0, 7.0, 5.0],
       "inertia": [1.5, 1.0, 0.6], "length": [0.8, 0.7, 0.6], "com": [0.4, 0.35, 0.3],
       "damping": [5.0, 5.0, 5.0], "gravity": 9.81, "q0": [0.4, -0.4, 0.5]}
PD = {"type": "pd", "kp": [200.0, 200.0, 100.0], "kd": [20.0, 20.0, 10.0],
      "reference": "sinusoid", "target": [0.5, 0.5, 0.5], "output": "torque"}


def run(faults: dict, duration: float = 1.0):
    cfg = resolve({"plant": ARM, "sim": {"duration": duration, "dt": 0.001},
                   "controller": PD, "faults": faults})
    return cfg, simulate(cfg).arrays


def window(a, t1, t2):
    return (a["t"] >= t1 - 1e-9) & (a["t"] < t2 - 1e-9)


def test_a_stuck_encoder_reads_constant_while_the_joint_moves():
    _, a = run({"sensor_stuck": {"joint": 2, "t1": 0.3, "duration": 0.4}})
    on = window(a, 0.3, 0.7)
    assert np.ptp(a["q"][on, 1]) > 0.05                              # the joint moves
    assert np.all(a["q_meas"][on, 1] == a["q"][on, 1][0])            # stuck at its onset value
    off = ~on
    assert np.array_equal(a["q_meas"][off], a["q"][off][:, :3])      # elsewhere: the truth
    assert np.array_equal(a["qd_meas"], a["qd"])


@pytest.mark.parametrize("faults, expected", [
    ({"sensor_bias": {"joint": 1, "t1": 0.2, "duration": 0.5, "bias": 0.05}},
     lambda q, t: q + 0.05),
    ({"sensor_drift": {"joint": 1, "t1": 0.2, "duration": 0.5, "rate": 0.3}},
     lambda q, t: q + 0.3 * (t - 0.2)),
    ({"quantize": {"joint": 1, "t1": 0.2, "duration": 0.5, "counts_per_rev": 1000}},
     lambda q, t: np.floor(q / (2 * math.pi / 1000)) * (2 * math.pi / 1000)),
    ({"quantize": {"joint": 1, "t1": 0.2, "duration": 0.5, "step": 0.01}},
     lambda q, t: np.floor(q / 0.01) * 0.01),
    ({"count_jump": {"joint": 1, "t1": 0.2, "duration": 0.5, "counts": -3,
                     "counts_per_rev": 2000}}, lambda q, t: q - 3 * 2 * math.pi / 2000),
])
def test_the_law_sees_the_position_as_the_fault_says(faults, expected):
    _, a = run(faults)
    on = window(a, 0.2, 0.7)
    q, seen = a["q"][:, 0], a["q_meas"][:, 0]
    np.testing.assert_allclose(seen[on], expected(q[on], a["t"][on]), rtol=0, atol=1e-12)
    assert np.array_equal(seen[~on], q[~on])
    assert np.abs(seen[on] - q[on]).max() > 1e-4


def test_a_dropout_holds_the_last_fresh_value_the_law_saw():
    _, a = run({"sensor_dropout": {"joint": 3, "channel": "rate", "t1": 0.25,
                                   "duration": 0.1}})
    on = window(a, 0.25, 0.35)
    first = np.argmax(on)
    assert np.all(a["qd_meas"][on, 2] == a["qd"][first - 1, 2])      # tick before the onset
    assert np.ptp(a["qd"][on, 2]) > 1e-3


def test_a_noise_burst_is_seeded_and_only_while_it_lasts():
    faults = {"noise_burst": {"joint": 1, "t1": 0.2, "duration": 0.5, "std": 0.01,
                              "seed": 7}}
    _, a = run(faults)
    _, b = run(faults)
    on = window(a, 0.2, 0.7)
    noise = a["q_meas"][on, 0] - a["q"][on, 0]
    assert 0.008 < noise.std() < 0.012 and abs(noise.mean()) < 0.002
    assert np.array_equal(a["q_meas"], b["q_meas"]) and np.array_equal(a["q"], b["q"])
    assert np.array_equal(a["q_meas"][~on, 0], a["q"][~on, 0])


def test_a_condition_starts_the_fault_at_the_first_boundary_where_it_holds():
    _, a = run({"sensor_bias": {"joint": 1, "bias": 0.1, "when_joint": 1, "below": 0.3}})
    started = a["fault_events"]
    assert len(started) == 1
    t_on = started[0, 3]
    k = int(round(t_on / 1e-3))
    assert a["q"][k, 0] < 0.3 and np.all(a["q"][:k, 0] >= 0.3)
    assert np.all(a["q_meas"][k:, 0] - a["q"][k:, 0] == pytest.approx(0.1, abs=1e-12))


def test_an_intermittent_fault_follows_its_seeded_phases():
    cfg, a = run({"sensor_bias": {"joint": 2, "bias": 0.2, "t1": 0.1, "mean_on": 0.05,
                                  "mean_off": 0.1, "seed": 3}})
    expected = phases(0.1, 0.05, 0.1, 3, 1.0)
    assert len(expected) > 3
    starts = a["fault_events"][:, 3]
    steps = [math.ceil(s / 1e-3 - 1e-9) * 1e-3 for s, _ in expected]
    np.testing.assert_allclose(starts, steps, atol=1e-12)
    biased = np.abs(a["q_meas"][:, 1] - a["q"][:, 1] - 0.2) < 1e-12
    assert 0.1 < biased.mean() < 0.6


def test_fast_run_logs_what_the_law_saw_and_replays_it(tmp_path):
    """hil run --fast = hil sim, row for row (true state and q_meas), with every fault's
    start and end an event in the log; the replay of the log equals both."""
    cfg, a = run({"sensor_stuck": {"joint": 2, "t1": 0.3, "duration": 0.4},
                  "effectiveness": {"joint": 1, "t1": 0.2, "factor": 0.3},
                  "noise_burst": {"joint": 3, "channel": "rate", "t1": 0.1, "duration": 0.2,
                                  "std": 0.05}})
    Session(cfg, tmp_path / "run.mcap", fast=True).run()
    arrays, events, _, _ = read_complete(tmp_path / "run.mcap")
    for key in ("q", "qd", "u", "q_meas", "qd_meas"):
        np.testing.assert_array_equal(arrays[key], a[key], err_msg=key)
    faults = [(e["kind"], e["fault"], e["tick"]) for e in events
              if e["kind"] in ("fault", "fault_end")]
    assert faults == [("fault", "noise_burst", 100), ("fault", "effectiveness", 200),
                      ("fault", "sensor_stuck", 300), ("fault_end", "noise_burst", 300),
                      ("fault_end", "sensor_stuck", 700)]
    replay, _ = replay_log(tmp_path / "run.mcap")
    for key in ("q", "qd", "u", "q_meas", "qd_meas"):
        np.testing.assert_array_equal(replay.arrays[key], a[key], err_msg=key)
