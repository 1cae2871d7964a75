"""Live link faults (issue 24, item 3; docs/LINK_FAULTS.md "Live"): `hil fault drop|delay|
corrupt ...` into `hil emulate`, acknowledged with the tick it took effect and logged at
that tick, and what the device cannot take refused in one line that names the reason."""
import re
import subprocess

import pytest
from hilrig.remote.fault import FaultError, send_fault
from rt_helpers import ROOT, EmulatorProcess, endpoint, hil, read_complete, stderr_lines, \
    wait_for


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


def _fault(ep: str, *argv: str):
    return subprocess.run(hil("fault", *argv, "--connect", ep), cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.system
def test_live_drop_trips_hil_controls_watchdog_and_is_logged_at_its_tick(tmp_path):
    """`hil fault drop --duration inf` from a third process while `hil control` runs: the
    answer names the tick, the emulator's log has the live `link_fault` event at that tick,
    and `hil control` stops on its watchdog in one line (status error)."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap")
    ctl = subprocess.Popen(hil("control", str(ROOT / "configs" / "rig_zmq.toml"), "--connect",
                               ep, "--duration", "60", "--log", str(tmp_path / "ctl.mcap"),
                               "--estop-endpoint", "", "--set", "safety.watchdog_ticks=25"),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ctl.mcap").exists(), 120, "the controller to start")
        fault = _fault(ep, "drop", "--duration", "inf")
        assert fault.returncode == 0, fault.stderr
        found = re.fullmatch(r"link drop started at tick (\d+) \(plant time [\d.]+ s\)\n",
                             fault.stdout)
        assert found, fault.stdout
        tick = int(found.group(1))
        assert tick > 0                     # the controller was being served
        _, err = ctl.communicate(timeout=120)
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.communicate()
    _, emu_err = emu.stop()
    assert ctl.returncode == 1, err
    assert stderr_lines(err) == [
        "hil: watchdog: no fresh measurement for 25 ticks (25 ms): link lost"]
    events = read_complete(tmp_path / "emu.mcap")[1]
    started = [(e["fault"], e["tick"], e["live"]) for e in events if e["kind"] == "link_fault"]
    assert started == [("drop", tick, True)]
    assert f"link fault drop (probability 1) on every joint started at tick {tick}" in emu_err


@pytest.mark.system
def test_a_link_fault_the_emulator_cannot_take_is_refused_in_one_line(tmp_path):
    """bus_off on the ZeroMQ plant server (a CAN fault), a joint of a link fault there (it
    has one link), a probability out of range: each refused with the reason, no fault
    started; a delay the server takes is acknowledged."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep")
    bus_off = _fault(ep, "bus_off")
    assert bus_off.returncode == 1
    assert stderr_lines(bus_off.stderr) == [
        "hil: emulator refused the fault: bus_off: this emulator takes the link faults drop, "
        "delay, corrupt; bus_off is served by the emulated CiA 402 drives (link.type canopen)"]
    joint = _fault(ep, "corrupt", "--joint", "2")
    assert joint.returncode == 1
    assert stderr_lines(joint.stderr) == [
        "hil: emulator refused the fault: corrupt: joint 2: this emulator has one link for "
        "every joint (joint 0)"]
    with pytest.raises(FaultError, match=r"^emulator refused the fault: drop: probability: "
                                         r"must be 0\.\.1, got 1\.5$"):
        send_fault(ep, "drop", 0, params={"probability": 1.5})
    local = _fault(ep, "drop", "probability=2")          # the tool's own check: exit 2
    assert local.returncode == 2
    assert stderr_lines(local.stderr) == [
        "hil: config error: drop: probability: must be 0..1, got 2.0"]
    ack = send_fault(ep, "delay", 0, 0.05, params={"delay": 0.002})
    assert ack.tick == 0 and ack.time == 0.0
    emu.stop()
    events = read_complete(tmp_path / "emu.mcap")[1]
    assert [(e["fault"], e["tick"], e["delay"]) for e in events
            if e["kind"] == "link_fault"] == [("delay", 0, 0.002)]
    refused = [e["reason"] for e in events if e["kind"] == "rejected"]
    assert any("bus_off: the ZeroMQ plant server takes drop, delay, corrupt" in r
               for r in refused)


@pytest.mark.parametrize("command, table", [
    ("sim", "faults.delay={t1=0.1, delay=0.01}"), ("run", "faults.drop={t1=0.1}")])
@pytest.mark.system
def test_hil_run_and_sim_refuse_a_link_fault_table_in_one_line(tmp_path, command, table):
    """No emulated device, no link to fault: the table is refused, not ignored."""
    kind = table.split("=")[0]
    out = subprocess.run(hil(command, str(ROOT / "configs" / "rig_zmq.toml"), "--set", table,
                             *(("--out", str(tmp_path / "x.npz")) if command == "sim" else
                               ("--log", str(tmp_path / "x.mcap")))),
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert stderr_lines(out.stderr) == [
        f"hil: config error: {kind}: a link fault acts in the emulated devices of `hil "
        f"emulate` (under `hil control`); `hil {command}` has no link to fault: run the "
        "config with those, or remove the table"]
    assert not any(tmp_path.iterdir())


def test_hil_fault_reaches_the_emulated_cia402_drives(request, tmp_path):
    """The drives' FAULT route (devices.fault_server, `hil emulate --bind` for link.type
    canopen): a heartbeat loss on drive 2 acknowledged at the SYNC it started at, which is
    where the drives' log has it; a serial kind, a plant kind and a drive the bus lacks are
    refused, each with its reason."""
    import threading

    import numpy as np
    from hilrig.devices.cia402_drive import EmulatedDrives
    from hilrig.devices.fault_server import FaultServer
    from hilrig.drivers.canopen_link import CanopenLink
    from hilrig.drivers.link import Measurement
    from conftest import config

    cfg = config("rig_canopen", "link.canopen.interface='virtual'",
                 f"link.canopen.channel='{request.node.name}'", "link.canopen.tpdo_timeout=0.5",
                 "link.canopen.heartbeat_timeout=2.0")
    ep = endpoint(tmp_path)
    answers = {}
    with EmulatedDrives(cfg, log_path=tmp_path / "drives.mcap") as drives, \
            CanopenLink.from_config(cfg) as link:
        server = FaultServer(drives, ep)
        try:
            for kind, joint, reason in (
                    ("stall", 0, "stall: this emulator takes the link faults drop, delay, "
                                 "corrupt, bus_off, heartbeat_loss, sync_loss; stall is served "
                                 "by the emulated packet-serial drives (link.type serial)"),
                    ("jam", 1, "jam: these emulated drives take link faults only (drop, delay, "
                               "corrupt, bus_off, heartbeat_loss, sync_loss); jams, actuator "
                               "and sensor faults are the ZeroMQ plant server's and `hil run`'s"),
                    ("bus_off", 4, "bus_off: joint 4: these drives are 1..3 (0: every drive)")):
                with pytest.raises(FaultError) as refused:
                    send_fault(ep, kind, joint)
                assert str(refused.value) == f"emulator refused the fault: {reason}"
            sender = threading.Thread(target=lambda: answers.update(
                ack=send_fault(ep, "heartbeat_loss", 2, 0.05, timeout=10.0)))
            sender.start()
            meas, u = Measurement(3), np.zeros(3)
            while sender.is_alive():            # SYNCs, so that the drives step (bounded:
                link.read(meas)                 # the sender's own timeout)
                link.write(u)
            sender.join()
        finally:
            server.close()
    ack = answers["ack"]
    assert ack.tick > 0
    events = read_complete(tmp_path / "drives.mcap")[1]
    started = [(e["fault"], e["joint"], e["tick"], e["live"]) for e in events
               if e["kind"] == "link_fault"]
    assert started == [("heartbeat_loss", 2, ack.tick, True)]


def test_a_campaign_refuses_a_link_fault_table_in_one_line(tmp_path):
    """A campaign runs no emulated device: a link fault in its base or [set] is refused
    before anything runs, and a fault.kind axis of a link kind refuses each scenario's
    config, naming the kind."""
    from hilrig.campaign.scenarios import ScenarioConfigs
    from hilrig.campaign.spec import load_spec
    from hilrig.errors import ConfigError

    spec = tmp_path / "spec.toml"
    spec.write_text('[campaign]\nbase = "serial3_jam1"\nduration = 1.0\n\n'
                    '[set]\nfaults.drop = {t1 = 0.5}\n\n'
                    '[[axis]]\nkey = "controller.kp"\nvalues = [100.0, 200.0]\n')
    with pytest.raises(ConfigError, match=r"spec\.toml: the base config with \[set\]: "
                                          r"faults\.drop: a link fault acts in the emulated "
                                          r"devices of `hil emulate` .*`hil campaign` has no "
                                          r"link to fault"):
        load_spec(spec)
    configs = ScenarioConfigs({"plant": {"model": "serial_arm"}})
    with pytest.raises(ConfigError, match=r"^faults\.delay: a link fault acts in the emulated "
                                          r"devices"):
        configs.config([("fault.kind", "delay"), ("fault.t1", 0.2), ("fault.delay", 0.01)])
