"""Fault detection measured (issue 24, item 5): a law reports the fault it detects through
controller.detection_slot, every loop keeps its first detection (hil sim's
fault_detected, the fault_detected event of a log), campaigns report detection_delay,
missed_detection and false_alarm, and the example fault-tolerant law
(examples/fault_tolerant) detects a free-swinging joint from its model's torque residual."""
import math
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest
from hilrig.campaign.metrics import METRICS, MetricSettings, detection_metrics, measure
from hilrig.campaign.report import summary
from hilrig.campaign.runner import open_client, run_campaign
from hilrig.campaign.spec import load_spec
from hilrig.controllers.interface import detection_record, note_detection
from hilrig.errors import ConfigError
from hilrig.rt.sim import simulate
from hilrig.settings.config import load
from rt_helpers import ROOT, hil, read_complete

EXAMPLE = ROOT / "examples" / "fault_tolerant"
CONFIG = str(EXAMPLE / "serial3_ft.toml")
MAX_DELAY = 0.05          # s: the example's detection delay bound


@pytest.fixture
def example_path(monkeypatch):
    """The example's folder on the import path (the config names ft_laws)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_the_first_nonzero_report_is_kept_with_its_tick_and_time():
    record, state = detection_record(1), np.zeros(3)
    assert not note_detection(record, state, 0, 0.0)
    state[1] = 2.0
    assert note_detection(record, state, 7, 0.007)
    state[1] = 3.0                                  # later reports do not move it
    assert not note_detection(record, state, 8, 0.008)
    assert list(record[1:]) == [7.0, 0.007, 2.0]
    assert not note_detection(detection_record(None), state, 9, 0.009)   # none watched


def test_detection_metrics_tell_delay_miss_and_false_alarm_apart():
    assert detection_metrics(0.62, 0.6) == pytest.approx(
        {"detection_delay": 0.02, "missed_detection": 0.0, "false_alarm": 0.0})
    missed = detection_metrics(np.nan, 0.6)
    assert math.isnan(missed["detection_delay"]) and missed["missed_detection"] == 1.0
    early = detection_metrics(0.3, 0.6)        # before the fault: an alarm, and a miss
    assert (early["false_alarm"], early["missed_detection"]) == (1.0, 1.0)
    assert detection_metrics(0.3, np.nan)["false_alarm"] == 1.0     # no fault at all
    quiet = detection_metrics(np.nan, np.nan)
    assert (quiet["false_alarm"], quiet["missed_detection"]) == (0.0, 0.0)
    unwatched = detection_metrics(np.nan, 0.6, watched=False)   # a law that reports none
    assert all(math.isnan(v) for v in unwatched.values())


def test_a_detection_slot_outside_the_state_is_refused_in_one_line(example_path):
    with pytest.raises(ConfigError, match=r"^controller.detection_slot: 21 is not an entry "
                                          r"of the law's state \(controller.state_size = 21\)$"):
        load(CONFIG, ["controller.detection_slot=21"])
    with pytest.raises(ConfigError, match=r"^controller.detection_slot: only for a law"):
        load("serial3_free", ["controller.detection_slot=0"])


def test_a_detection_criterion_without_a_reporting_law_is_refused(tmp_path, example_path):
    spec = (EXAMPLE / "ft_campaign.toml").read_text(encoding="utf-8")
    (tmp_path / "serial3_ft.toml").write_text(
        (EXAMPLE / "serial3_ft.toml").read_text(encoding="utf-8")
        .replace("detection_slot = 0 ", "# detection_slot = 0 "), encoding="utf-8")
    (tmp_path / "ft_campaign.toml").write_text(spec, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"ft_campaign.toml: criteria.detection_delay: needs "
                                          r"controller.detection_slot"):
        load_spec(tmp_path / "ft_campaign.toml")


@pytest.mark.parametrize("joint", [1, 2, 3])
def test_the_example_detects_a_free_swinging_joint_and_holds_the_others(example_path, joint):
    """free_swing on each joint at two times: the law blames that joint within 50 ms; then
    the joint gets no torque, and the other joints stay where they were held."""
    for t1 in (0.6, 1.3):
        cfg = load(CONFIG, [f"faults.free_swing={{joint = {joint}, t1 = {t1}}}"])
        out = simulate(cfg).arrays
        assert out["fault_events"][0, 3] == pytest.approx(t1)
        assert out["fault_detected"].shape == (1, 3), (joint, t1)
        tick, t_detected, code = out["fault_detected"][0]
        assert code == joint
        assert 0.0 <= t_detected - t1 < MAX_DELAY, (joint, t1, t_detected)
        assert out["t"][int(tick)] == t_detected
        after = out["t"] > t_detected + 1e-9
        assert np.all(out["u"][after, joint - 1] == 0.0)          # no torque on it
        others = [j for j in range(3) if j != joint - 1]
        late = out["t"] > t_detected + 0.5                         # held after a transient
        assert np.abs(np.diff(out["q"][late][:, others], axis=0)).max() < 1e-3


def test_the_example_raises_no_alarm_without_a_fault(example_path):
    """Four seconds of tracking (two periods of the reference) without a fault: no
    detection, though the arm moves and its torques change (the residual stays small)."""
    out = simulate(load(CONFIG, ["faults.free_swing=[]", "sim.duration=4.0"])).arrays
    assert out["fault_detected"].shape == (0, 3)
    assert np.ptp(out["q"][:, 0]) > 0.35 and np.ptp(out["u"][:, 1]) > 5.0
    cfg = load(CONFIG, ["faults.free_swing=[]"])
    metrics = measure(simulate(cfg).arrays, cfg, MetricSettings())
    assert (metrics["false_alarm"], metrics["missed_detection"]) == (0.0, 0.0)


@pytest.mark.system
def test_a_campaign_over_two_kinds_and_trigger_times_reports_detection_as_single_runs(
        tmp_path, example_path):
    """The Must-show: examples/fault_tolerant/ft_campaign.toml (free_swing and
    effectiveness x t1 0.6 and 1.2 s) on a real Dask cluster of two workers reports per
    scenario the detection delay of its own single run, each under 50 ms, no miss, no
    false alarm."""
    spec = load_spec(EXAMPLE / "ft_campaign.toml")
    client, cluster = open_client(workers=2)
    try:
        run_campaign(spec, tmp_path / "out", client, batch=2)
    finally:
        client.close()
        cluster.close()
    rows = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert [row["id"] for row in rows] == [0, 1, 2, 3]
    for row in rows:
        cfg = spec.config(spec.scenario(row["id"]))
        alone = measure(simulate(cfg).arrays, cfg, spec.settings)
        for name in METRICS:
            assert row[name] == alone[name] or (math.isnan(row[name]) and
                                                math.isnan(alone[name])), (row["id"], name)
        assert 0.0 <= row["detection_delay"] < MAX_DELAY
        assert (row["missed_detection"], row["false_alarm"], row["passed"]) == (0.0, 0.0, True)
    assert len({row["detection_delay"] for row in rows}) > 1     # each scenario its own
    text, _ = summary(pq.read_table(tmp_path / "out" / "results.parquet"), spec,
                      tmp_path / "out")
    delays = sorted(row["detection_delay"] for row in rows)
    assert (f"detection: 4 of 4 faulty scenarios detected (0.0 % missed), 0 false alarms in "
            f"4 scenarios (0.0 %), delay median {np.median(delays):.4g} s, max "
            f"{delays[-1]:.4g} s") in " ".join(text.split())     # the line wraps


@pytest.mark.system
def test_the_detection_event_of_hil_run_fast_is_at_hil_sims_tick(tmp_path):
    """`hil run --fast` logs the law's first detection as a fault_detected event at the
    tick and time `hil sim` returns for it, naming the blamed joint."""
    log, out = tmp_path / "run.mcap", tmp_path / "sim.npz"
    for args in (["run", "serial3_ft.toml", "--fast", "--log", str(log), "--no-plot"],
                 ["sim", "serial3_ft.toml", "--out", str(out), "--log", str(tmp_path / "s.mcap")]):
        proc = subprocess.run(hil(*args), cwd=EXAMPLE, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, proc.stderr
    _, events, _, summary = read_complete(log)
    assert summary["reason"] == "done"
    detected = [e for e in events if e["kind"] == "fault_detected"]
    tick, t_detected, code = np.load(out)["fault_detected"][0]
    assert code == 2.0 and 1.0 <= t_detected < 1.0 + MAX_DELAY
    assert len(detected) == 1
    assert (detected[0]["tick"], detected[0]["t"], detected[0]["joint"]) == (tick, t_detected, 2)
    _, sim_events, _, _ = read_complete(tmp_path / "s.mcap")       # hil sim --log: the same
    assert [(e["tick"], e["joint"]) for e in sim_events if e["kind"] == "fault_detected"] == \
        [(tick, 2)]


PYTHON_LAW = '''
def flag_at(t, pos, vel, cur, params, state, u):
    """No torque; from t >= params[0] (s) on, report joint 2 in state[0]."""
    u[:] = 0.0
    if t >= params[0]:
        state[0] = 2.0
'''

PYTHON_CONFIG = '''
[sim]
duration = 0.5
dt = 0.001

[plant]
model = "serial_arm"
drive = "torque"
damping = [15.0, 15.0, 15.0]

[controller]
law = "flag_law:flag_at"
params = [0.2]
state_size = 1
detection_slot = 0

[link]
type = "inprocess"
'''


@pytest.mark.system
def test_hil_control_logs_a_python_laws_first_detection(tmp_path):
    """A plain Python law under `hil control` (in-process link) reports through its
    detection slot too: one fault_detected event, at the first tick with t >= 0.2 s."""
    (tmp_path / "flag_law.py").write_text(PYTHON_LAW, encoding="utf-8")
    (tmp_path / "flag.toml").write_text(PYTHON_CONFIG, encoding="utf-8")
    proc = subprocess.run(hil("control", "flag.toml", "--log", "c.mcap"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    _, events, _, summary = read_complete(tmp_path / "c.mcap")
    assert summary["status"] == "ok"
    detected = [e for e in events if e["kind"] == "fault_detected"]
    first = next(k for k in range(1000) if k * 0.001 >= 0.2)
    assert [(e["tick"], e["joint"], e["code"]) for e in detected] == [(first, 2, 2.0)]
    assert detected[0]["t"] == pytest.approx(first * 0.001)
