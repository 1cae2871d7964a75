"""Link faults in the emulated ZeroMQ plant (devices.link_faults, docs/LINK_FAULTS.md): the
schedule, and what the real ZmqLink and `hil control` do when STATEs are dropped, delayed
or corrupted."""
import math
import subprocess
import threading

import numpy as np
import pytest
from conftest import config
from hilrig.devices.link_faults import LinkFaults
from hilrig.devices.zmq_plant import Emulator
from hilrig.drivers.link import Measurement
from hilrig.drivers.wire import decode
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.errors import ConfigError
from rt_helpers import ROOT, EmulatorProcess, endpoint, hil, read_complete, stderr_lines


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


# -- the schedule ----------------------------------------------------------------------

def test_windows_start_and_end_at_their_plant_times_and_draws_are_seeded():
    cfg = config("rig_serial", "faults.drop={t1=0.1, duration=0.2, probability=0.5, seed=3}",
                 "faults.stall={t1=0.25, joint=2}")
    faults = LinkFaults(cfg, "serial", 3)
    assert faults.update(0.05) == [] and faults.active("drop") is None
    started = faults.update(0.1)
    assert [(c, w.kind) for c, w in started] == [("start", "drop")]
    draws = [faults.active("drop") is not None for _ in range(2000)]
    assert 0.45 < np.mean(draws) < 0.55
    again = LinkFaults(cfg, "serial", 3)
    again.update(0.1)
    assert [again.active("drop") is not None for _ in range(2000)] == draws   # seeded
    assert [(c, w.kind) for c, w in faults.update(0.25)] == [("start", "stall")]
    assert faults.on("stall", (2,)) and not faults.on("stall", (1,))
    assert [(c, w.kind) for c, w in faults.update(0.3)] == [("end", "drop")]
    assert faults.on("stall", (1, 2)) and math.isinf(faults.windows[0].t2)   # permanent


@pytest.mark.parametrize("override, message", [
    ("faults.bus_off={t1=0.1}", "faults.bus_off: the emulated zmq device has no link fault "
                                "'bus_off' (it takes drop, delay, corrupt)"),
    ("faults.drop={t1=0.1, probability=1.5}", "faults.drop.probability: must be 0..1, got 1.5"),
    ("faults.drop={t1=0.1, joint=2}", "faults.drop.joint: the ZeroMQ plant has one link"),
])
def test_a_fault_the_device_cannot_take_is_one_config_error(override, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        LinkFaults(config("rig_zmq", override), "zmq", 3)


@pytest.mark.system
def test_hil_emulate_says_a_bad_link_fault_in_one_line(tmp_path):
    out = subprocess.run(hil("emulate", str(ROOT / "configs" / "rig_zmq.toml"), "--bind",
                             endpoint(tmp_path), "--set", "faults.stall={t1=0.1}"),
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert stderr_lines(out.stderr) == [
        "hil: config error: faults.stall: the emulated zmq device has no link fault 'stall' (it takes drop, "
        "delay, corrupt)"]


# -- the device, in this process, and the real link ------------------------------------------

class _Serving:
    """An Emulator (lockstep) serving in a thread, with a ZmqLink opened on it."""

    def __init__(self, tmp_path, *overrides):
        self.ep = endpoint(tmp_path)
        cfg = config("rig_zmq", "emulator.mode='lockstep'", f"link.endpoint='{self.ep}'",
                     "link.timeout=0.2", *overrides)
        self.emulator = Emulator(cfg, self.ep, tmp_path / "emu.mcap")
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.emulator.serve,
                                       kwargs={"stop": self.done.is_set}, daemon=True)
        self.thread.start()
        self.link = ZmqLink.from_config(cfg)
        self.link.open()
        self.meas = Measurement(3)

    def tick(self) -> bool:
        """One COMMAND (zero) and the read of its answer: whether it was fresh."""
        self.link.write(np.zeros(3))
        return self.link.read(self.meas)

    def answered(self) -> bool:
        """One COMMAND (zero): whether a frame came back within 0.3 s (read raw)."""
        self.link.write(np.zeros(3))
        if not self.link.socket.poll(300):
            return False
        self.link.socket.recv()
        return True

    def drain(self) -> None:
        while self.link.socket.poll(100):
            self.link.socket.recv()

    def close(self):
        self.link.safe_stop()
        self.link.close()
        self.done.set()
        self.thread.join(10)
        self.emulator.close("test done")


def test_inject_drop_then_corrupt_on_the_running_emulator(tmp_path, caplog):
    """``Emulator.inject``: STATEs dropped for the fault's duration (10 ticks); corrupted
    ones discarded and counted by the link, whose reads are then not fresh, and it goes on."""
    serving = _Serving(tmp_path)
    try:
        assert all(serving.tick() for _ in range(5))
        serving.drain()
        serving.emulator.inject("drop", {}, 0.010)          # 10 ticks of 1 ms
        # from the next tick boundary: the answer to this COMMAND is the first one dropped
        assert [serving.answered() for _ in range(15)] == [False] * 10 + [True] * 5
        serving.emulator.inject("corrupt", {"probability": 1.0}, 0.005)
        assert [serving.tick() for _ in range(10)] == [False] * 5 + [True] * 5
        assert serving.link.bad_frames == 5
        with pytest.raises(ConfigError, match="has no link fault 'bus_off'"):
            serving.emulator.inject("bus_off", {}, 1.0)
    finally:
        serving.close()
    assert sum("sent a bad frame" in r.getMessage() for r in caplog.records) == 1


def test_delayed_states_arrive_late_and_in_order(tmp_path):
    """A ``delay`` of 3 ms from t = 0: the STATE of tick k leaves with that of tick k + 3
    (the emulator steps 1 ms per COMMAND), so each arrives 3 COMMANDs late, in order."""
    serving = _Serving(tmp_path, "faults.delay={t1=0.0, delay=0.003}")
    try:
        seen = []
        for command in range(1, 13):
            serving.link.write(np.zeros(3))
            if serving.link.socket.poll(300):
                seen.append((command, decode(serving.link.socket.recv())[1]))
    finally:
        serving.close()
    # tick 0's STATE (the answer to HELLO) comes with COMMAND 3, tick 1's with COMMAND 4, ...
    assert seen == [(c, c - 3) for c in range(3, 13)]


# -- hil emulate and hil control, each in its own process -------------------------------------

@pytest.mark.system
def test_dropped_states_trip_hil_controls_watchdog_at_watchdog_ticks(tmp_path):
    """Every STATE dropped from 0.3 s of the emulator's plant time on: `hil control` stops
    after exactly safety.watchdog_ticks stale ticks, in one line, status error."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--set",
                          "faults.drop={t1=0.3}")
    ctl = subprocess.run(hil("control", str(ROOT / "configs" / "rig_zmq.toml"), "--connect", ep,
                             "--log", str(tmp_path / "ctl.mcap"), "--estop-endpoint", "",
                             "--set", "safety.watchdog_ticks=25"),
                         cwd=ROOT, capture_output=True, text=True, timeout=180)
    out, err = emu.stop()
    assert ctl.returncode == 1, ctl.stdout + ctl.stderr
    assert stderr_lines(ctl.stderr) == [
        "hil: watchdog: no fresh measurement for 25 ticks (25 ms): link lost"]
    _, _, _, summary = read_complete(tmp_path / "ctl.mcap")
    assert summary["status"] == "error"
    events = read_complete(tmp_path / "emu.mcap")[1]
    started = [e for e in events if e["kind"] == "link_fault"]
    assert [(e["fault"], e["tick"], e["live"]) for e in started] == [("drop", 300, False)]
    assert "link fault drop (probability 1) on every joint started at tick 300" in err
