"""`hil control` over each link, with the drives emulated by `hil emulate` in another process.

The link is configuration only: the same controller code and command run against
CiA 402 drives on a CAN bus (python-can interface ``hilrig_zmq`` across processes)
and against packet-serial drives on a Unix socket (rig_serial's shipped transport; a pty
through `hil emulate`: tests/test_priorities.py, tests/test_roboclaw_library.py).
"""
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import config
from rt_helpers import ROOT, estop_running_controller, hil, read_complete, wait_for

pytestmark = pytest.mark.system     # every test here starts other processes


def _emulate_and_control(name, sets, tmp_path, ready: Path):
    """``hil emulate`` then, once ``ready`` exists (the drives are up), ``hil control``."""
    config_path = str(ROOT / "configs" / f"{name}.toml")
    args = [a for s in sets for a in ("--set", s)]
    emu = subprocess.Popen(hil("emulate", config_path, *args), cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        banner = emu.stdout.readline()
        assert banner.startswith("emulating"), banner + emu.stderr.read()
        wait_for(ready.exists, 120, f"the emulated drives ({ready})")
        ctl = subprocess.run(hil("control", config_path, *args, "--log",
                                 str(tmp_path / "ctl.mcap")), cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    finally:
        emu.terminate()
        emu.communicate(timeout=30)
    assert ctl.returncode == 0, ctl.stdout + ctl.stderr
    return read_complete(tmp_path / "ctl.mcap")


def test_hil_control_over_canopen_against_emulated_drives_in_another_process(tmp_path):
    channel = f"ipc:///tmp/hil-can-{uuid.uuid4().hex[:8]}"
    sets = ["link.canopen.interface='hilrig_zmq'", f"link.canopen.channel='{channel}'",
            "link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0",
            "safety.watchdog_ticks=1000"]
    arrays, _, meta, summary = _emulate_and_control("rig_canopen", sets, tmp_path,
                                                    Path(channel[len("ipc://"):] + ".up"))
    target = np.array(meta["controller"]["target"])
    assert summary["status"] == "ok"
    assert summary["warm_to_enable_s"] > 0 and summary["enable_to_first_command_s"] > 0
    assert np.abs(arrays["q"][-1] - target).max() < 0.1      # PD with gravity droop
    assert np.all(np.abs(arrays["u"]) > 0)


def test_hil_control_over_packet_serial_against_an_emulated_device_on_its_socket(tmp_path):
    from hilrig.drivers.protocol_unix import socket_path

    port = f"unix://$RUNTIME/hil-serial-{uuid.uuid4().hex[:8]}"
    sets = [f"link.serial.port='{port}'", "emulator.mode='lockstep'", "link.serial.timeout=0.5",
            "link.serial.budget=1.0", "link.timeout=5.0", "safety.watchdog_ticks=1000",
            "loop.overrun='catch_up'"]   # every tick runs: the lockstep device steps once per tick
    arrays, _, meta, summary = _emulate_and_control("rig_serial", sets, tmp_path,
                                                    Path(socket_path(port)))
    cfg = config("rig_serial", *sets, "link.type='inprocess'")
    assert summary["status"] == "ok"
    assert summary["warm_to_enable_s"] > 0 and summary["enable_to_first_command_s"] > 0
    target = np.array(meta["controller"]["target"])
    assert np.all(np.abs(arrays["q"][-1] - target) < np.abs(target) / 4)   # well on its way
    # next to the in-process run of the same config
    from hilrig.drivers.inprocess import PlantLink
    from hilrig.rt.loop import LinkLoop
    inproc = LinkLoop(cfg, PlantLink.from_config(cfg), tmp_path / "inproc.mcap").run()
    assert inproc.status == "ok"
    reference = read_complete(tmp_path / "inproc.mcap")[0]
    assert np.abs(arrays["q"] - reference["q"]).max() < 1e-3


def test_hil_estop_stops_a_running_controller_and_its_log_is_complete(tmp_path):
    estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "ctl.mcap"
    ctl = subprocess.Popen(hil("control", str(ROOT / "configs" / "rig_inprocess.toml"),
                               "--duration", "60", "--log", str(log), "--estop-endpoint", estop),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: log.exists() and log.stat().st_size > 10000, 60, "the controller")
        stop = estop_running_controller(estop, ctl)
        tick = int(stop.stdout.split("tick ")[1])
        ctl.communicate(timeout=30)
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert ctl.returncode == 130
    arrays, events, _, summary = read_complete(log)
    assert summary["reason"] == "e-stop from the CLI (hil estop)"
    assert arrays["tick"][-1] <= tick - 1            # no tick ran after the e-stop
    assert [e["kind"] for e in events].count("stop") == 1
