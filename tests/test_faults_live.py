"""Live faults of every plant kind (issue 24, item 4): into a running `hil run` loop and
into `hil emulate` under `hil control`, each acknowledged with the tick it took effect and
logged at that tick; `hil sim --replay` of the run reproduces it bit for bit."""
import re
import subprocess

import numpy as np
import pytest
from conftest import config
from hilrig.rt import realtime as rtk
from hilrig.rt.replay import replay_log
from hilrig.rt.session import Session
from rt_helpers import (
    LENIENT_CONTROL,
    LENIENT_EMULATOR,
    ROOT,
    EmulatorProcess,
    endpoint,
    hil,
    read_complete,
    ticks_logged,
    wait_for,
)

PD = ["controller.type='pd'", "controller.kp=[300,300,300]", "controller.kd=[40,40,40]",
      "controller.target=[0.6,-0.4,0.3]", "controller.reference='sinusoid'",
      "controller.amplitude=0.3", "controller.frequency=0.5"]


@pytest.mark.slow
def test_live_faults_in_a_paced_run_are_acknowledged_logged_and_replayed(tmp_path):
    """A stuck encoder and a free-swinging joint posted while the paced loop runs: each
    acknowledged at a tick, a fault event at that tick, the law's view stuck from it, and
    the replay of the log equal to the run row for row."""
    cfg = config("serial3_free", "sim.duration=1.5", "loop.spin=0.0001",
                 "loop.overrun='catch_up'", *PD)
    session = Session(cfg, tmp_path / "live.mcap")
    posts = [("sensor_stuck", 1, 0.4, {}), ("free_swing", 2, float("inf"), {})]
    acks: list = []

    def inject(s):
        if len(acks) < len(posts) and s.mail[rtk.M_TICK] >= 300 + 200 * len(acks):
            if s.request_seq == len(acks):
                kind, joint, duration, params = posts[len(acks)]
                s.request_fault(kind, joint, duration, params)
            ack = s.fault_acknowledged()
            if ack is not None:
                acks.append(ack)

    result = session.run(on_tick=inject)
    assert result.status == "ok" and len(acks) == 2
    arrays, events, _, _ = read_complete(tmp_path / "live.mcap")
    started = [(e["fault"], e["tick"], e["live"]) for e in events if e["kind"] == "fault"]
    assert started == [("sensor_stuck", acks[0][0], True), ("free_swing", acks[1][0], True)]
    k = acks[0][0]
    stuck = slice(k, k + 400)
    assert np.all(arrays["q_meas"][stuck, 0] == arrays["q"][k, 0])
    assert np.ptp(arrays["q"][stuck, 0]) > 1e-3
    ended = [e["tick"] for e in events if e["kind"] == "fault_end"]
    assert ended == [k + 400]
    replay, _ = replay_log(tmp_path / "live.mcap")
    for name in ("q", "qd", "u", "q_meas", "qd_meas"):
        np.testing.assert_array_equal(arrays[name], replay.arrays[name], err_msg=name)


@pytest.mark.system
def test_hil_fault_into_hil_emulate_under_hil_control_is_acknowledged_and_logged(tmp_path):
    """`hil fault sensor_bias ... bias=0.05` and `hil fault effectiveness ... factor=0.2`
    from a third process: the answers name the ticks, the emulator's log has each fault
    event at its tick, what it sent the controller (q_meas) is biased from that tick on,
    and a kind the plant cannot take is one line."""
    ep = endpoint(tmp_path)
    # the pair lenient with a busy host (its subject is the faults, not the link's timing:
    # at the watchdog's 500 ticks a suite's neighbours once cost it its link)
    emu = EmulatorProcess("serial3_free", ep, tmp_path / "emu.mcap", *LENIENT_EMULATOR)
    sets = [a for s in PD for a in ("--set", s)]
    log = tmp_path / "ctl.mcap"
    ctl = subprocess.Popen(hil("control", str(ROOT / "configs" / "serial3_free.toml"),
                               "--connect", ep, "--duration", "3", "--log", str(log), *sets,
                               *LENIENT_CONTROL),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ctl.poll() is not None or ticks_logged(log) > 100, 120,
                 "the controller's first rows")
        ticks = {}
        for argv in (("sensor_bias", "--joint", "1", "--duration", "0.5", "bias=0.05"),
                     ("effectiveness", "--joint", "2", "factor=0.2")):
            fault = subprocess.run(hil("fault", *argv, "--connect", ep), cwd=ROOT,
                                   capture_output=True, text=True, timeout=60)
            assert fault.returncode == 0, fault.stderr
            found = re.fullmatch(rf"joint \d {argv[0]} started at tick (\d+) \(plant time "
                                 r"[\d.]+ s\)\n", fault.stdout)
            assert found, fault.stdout
            ticks[argv[0]] = int(found.group(1))
        bad = subprocess.run(hil("fault", "winding_short", "--joint", "1", "--connect", ep),
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
            "hil: emulator refused the fault: winding_short: this plant has no motor model "
            "(plant.drive is torque; the fault needs voltage or voltage_full)"]
        out, err = ctl.communicate(timeout=60)
        assert ctl.returncode == 0, err
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.communicate()
        emu.stop()
    arrays, events, _, _ = read_complete(tmp_path / "emu.mcap")
    logged = {e["fault"]: e["tick"] for e in events if e["kind"] == "fault" and e["live"]}
    assert logged == ticks
    refused = [e["reason"] for e in events if e["kind"] == "rejected"]
    assert any("winding_short needs a motor model" in r for r in refused)
    row = int(np.searchsorted(arrays["tick"], ticks["sensor_bias"]))
    biased = slice(row, row + 400)
    np.testing.assert_allclose(arrays["q_meas"][biased, 0] - arrays["q"][biased, 0], 0.05,
                               atol=1e-12)
    assert np.array_equal(arrays["q_meas"][:row, 0], arrays["q"][:row, 0])
