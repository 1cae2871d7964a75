"""Link faults in the emulated CiA 402 drives (devices.cia402_drive) against the real
CanopenLink on python-can's virtual bus, and `hil control` against `hil emulate` over the
hilrig_zmq bus: bus-off, heartbeat loss, SYNC loss, dropped, delayed and corrupted TPDOs."""
import re
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from hilrig.devices.cia402_drive import BUS_OFF_ERROR_FRAMES, EmulatedDrives
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.cia402 import State
from hilrig.drivers.link import DriveFault, LinkTimeout, Measurement
from hilrig.errors import ConfigError
from rt_helpers import ROOT, hil, read_complete, stderr_lines, wait_for
from conftest import config

GENEROUS = ("link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0")


def _rig(name, *overrides):
    return config("rig_canopen", "link.canopen.interface='virtual'",
                  f"link.canopen.channel='{name}'", *GENEROUS, *overrides)


@pytest.fixture
def bench(request):
    """bench(*overrides) -> (drives, open link) on a virtual channel of the test's name."""
    made = []

    def make(*overrides):
        cfg = _rig(f"{request.node.name}-{len(made)}", *overrides)
        drives = EmulatedDrives(cfg)
        drives.start()
        link = CanopenLink.from_config(cfg)
        made.append((drives, link))
        link.open()
        return drives, link
    yield make
    for drives, link in made:
        link.safe_stop()
        link.close()
        drives.stop()


def _cycles(link, n):
    """n cycles of read, then zero torque: whether each read was complete."""
    meas, fresh = Measurement(link.n_axes), []
    for _ in range(n):
        fresh.append(link.read(meas))
        link.write(np.zeros(link.n_axes))
    return fresh


def test_bus_off_stops_the_link_naming_the_node_and_the_error_frames(bench):
    drives, link = bench()
    link.tpdo_timeout, link.max_missed = 0.05, 3
    assert _cycles(link, 3) == [True] * 3
    drives.inject("bus_off", {}, float("inf"), joint=2)
    with pytest.raises(LinkTimeout, match=(
            r"for 3 cycles in a row; missing: axis 2 \(node 2\) TPDO1, axis 2 \(node 2\) "
            rf"TPDO2; {BUS_OFF_ERROR_FRAMES} CAN error frames seen on the bus "
            r"\(a node bus-off\?\)$")):
        _cycles(link, 10)
    assert link.error_frames == BUS_OFF_ERROR_FRAMES
    assert drives.axes[1].bus_off and not drives.axes[0].bus_off


def test_heartbeat_loss_from_the_config_stops_the_link_naming_the_node(bench):
    drives, link = bench("link.canopen.heartbeat_timeout=0.3",
                         "faults.heartbeat_loss={t1=0.02, joint=3}")
    with pytest.raises(LinkTimeout, match=r"^axis 3 \(node 3\): heartbeat lost: none for "):
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            _cycles(link, 1)
    assert drives.state(3) == State.OPERATION_ENABLED     # its PDOs went on


def test_sync_loss_faults_the_drive_as_its_abort_connection_code_says(bench):
    """No SYNC heard by drive 1 for emulator.canopen.sync_timeout: 0x6007 = 1 (default)
    puts it in FAULT with EMCY 0x8100, which the link raises naming the node."""
    drives, link = bench("emulator.canopen.sync_timeout=0.1")
    assert _cycles(link, 3) == [True] * 3
    drives.inject("sync_loss", {}, float("inf"), joint=1)
    with pytest.raises(DriveFault, match=r"axis 1: drive fault 0x8100: communication error: "
                                         r"the drive lost its SYNC .*node 1") as fault:
        _cycles(link, 10)
    assert fault.value.axis == 1 and drives.state(1) == State.FAULT
    assert drives.axes[0].node.errors[0] == 0x8100           # 0x1003, newest first


def test_corrupted_tpdos_are_counted_and_the_link_recovers(bench, caplog):
    drives, link = bench()
    link.tpdo_timeout = 0.05
    assert _cycles(link, 2) == [True] * 2
    drives.inject("corrupt", {}, 0.004, joint=3)        # 2 SYNCs of 2 ms
    fresh = _cycles(link, 5)
    assert fresh[0] and fresh[1:3] == [False, False] and all(fresh[3:])
    assert link.bad_frames == 4                            # TPDO1 and TPDO2, twice
    assert sum("TPDO1 of 5 bytes (6 expected): discarded" in r.getMessage()
               for r in caplog.records) == 1


def test_dropped_tpdos_are_seeded_and_delayed_ones_still_arrive(bench):
    runs = []
    for _ in range(2):
        drives, link = bench("faults.drop={t1=0.0, probability=0.3, seed=5}")
        link.tpdo_timeout = 0.05
        runs.append(_cycles(link, 30))
    assert runs[0] == runs[1] and 3 < runs[0].count(False) < 27
    drives, link = bench("faults.delay={t1=0.0, delay=0.02, joint=2}")
    started = time.monotonic()
    assert _cycles(link, 10) == [True] * 10
    assert time.monotonic() - started > 9 * 0.02      # (from the second SYNC on)


def test_a_can_fault_the_drives_cannot_take_is_refused():
    with pytest.raises(ConfigError, match="faults.stall: the emulated canopen device has no "
                                          "link fault 'stall'"):
        EmulatedDrives(_rig("refused", "faults.stall={t1=0.0}"))


@pytest.mark.system
def test_hil_control_stops_in_one_line_when_a_drive_goes_bus_off(tmp_path):
    """`hil emulate` (drives, bus-off of node 2 at 0.5 s of plant time) and `hil control`
    over hilrig_zmq in two processes: the controller stops with one line naming node 2."""
    channel = f"ipc:///tmp/hil-can-{uuid.uuid4().hex[:8]}"
    sets = ["link.canopen.interface='hilrig_zmq'", f"link.canopen.channel='{channel}'",
            "link.canopen.tpdo_timeout=0.1", "link.canopen.max_missed=3",
            "link.canopen.heartbeat_timeout=2.0", "safety.watchdog_ticks=1000",
            "faults.bus_off={t1=0.5, joint=2}"]
    args = [a for s in sets for a in ("--set", s)]
    config_path = str(ROOT / "configs" / "rig_canopen.toml")
    emu = subprocess.Popen(hil("emulate", config_path, *args, "--log",
                               str(tmp_path / "emu.mcap")), cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert emu.stdout.readline().startswith("emulating"), emu.stderr.read()
        wait_for(Path(channel[len("ipc://"):] + ".up").exists, 120, "the emulated drives")
        ctl = subprocess.run(hil("control", config_path, *args, "--log",
                                 str(tmp_path / "ctl.mcap"), "--estop-endpoint", ""),
                             cwd=ROOT, capture_output=True, text=True, timeout=180)
    finally:
        emu.terminate()
        _, emu_err = emu.communicate(timeout=30)
    assert ctl.returncode == 1, ctl.stdout + ctl.stderr
    lines = stderr_lines(ctl.stderr)
    assert len(lines) == 1 and "missing: axis 2 (node 2) TPDO1, axis 2 (node 2) TPDO2; " \
        f"{BUS_OFF_ERROR_FRAMES} CAN error frames seen on the bus (a node bus-off?)" in lines[0]
    arrays, _, _, summary = read_complete(tmp_path / "ctl.mcap")
    assert summary["status"] == "error" and arrays["t"][-1] > 0.4
    assert re.search(r"link fault bus_off on joint 2 started at SYNC \d+ \(t = 0\.500000 s\)",
                     emu_err)
