"""Holding brakes (issue 24, item 6; safety.brake, docs/FAULTS.md "Brakes"): when the
power is removed (a category 0 or 1 e-stop, a safe stop) a joint with a brake stops by
the jam law (plant.jam) and stays blocked; a joint without one sinks under gravity."""
import subprocess
import uuid

import numpy as np
import pytest
import zmq
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.wire import MessageType, decode, encode
from hilrig.errors import ConfigError
from hilrig.plant.layout import BLOCKED, JAM_PHASE
from hilrig.rt.loop import LinkLoop
from rt_helpers import (
    ROOT,
    LENIENT_CONTROL,
    LENIENT_EMULATOR,
    EmulatorProcess,
    endpoint,
    estop_running_controller,
    hil,
    read_complete,
    ticks_logged,
    wait_for,
)
from test_estop_categories import _EStopAt
from conftest import config

STOP_TIME = 0.3        # s, safety.stop_time
AFTER = 500            # steps of 1 ms under zero input after the power is removed


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


def _category_1_then_unpowered(tmp_path, brake: str):
    """A category 1 e-stop of the moving arm (rig_inprocess, LinkLoop with a real ESTOP
    frame), then AFTER steps of the same plant under the zero input the safe stop left:
    the joints' positions over those steps and the jam phases at the end."""
    cfg = config("rig_inprocess", "sim.duration=2.0", f"safety.stop_time={STOP_TIME}",
                 f"safety.brake={brake}")
    link = PlantLink.from_config(cfg)
    estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
    hook = _EStopAt(estop, 500, 1)
    result = LinkLoop(cfg, link, tmp_path / "ctl.mcap", estop, hooks=[hook]).run()
    assert result.status == "interrupted" and hook.tick is not None
    assert not link.held.any()                  # power removed: zero input held
    q = [link.plant.x[:3].copy()]
    for _ in range(AFTER):
        assert link.stepper.step()
        q.append(link.plant.x[:3].copy())
    return np.array(q), link.plant.jams[:3, JAM_PHASE].copy()


def test_brakes_hold_the_arm_after_a_category_1_stop_and_without_one_it_sinks(tmp_path):
    """Brakes on joints 2 and 3 (the ones gravity loads): they hold the position the stop
    left, exactly (blocked by the jam law); with no brake the same arm sinks."""
    braked, phases = _category_1_then_unpowered(tmp_path, "[false, true, true]")
    free, free_phases = _category_1_then_unpowered(tmp_path, "false")
    sink = np.abs(free[-1] - free[0])
    assert sink[1] > 0.05 and sink[2] > 0.01            # no brake: it falls
    assert not (free_phases == BLOCKED).any()
    assert list(phases == BLOCKED) == [False, True, True]
    # blocked within the jam law's phase (brake_time 0.1 s, from rest: no motion)
    assert np.abs(braked[-1, 1:] - braked[0, 1:]).max() < 1e-6
    assert np.ptp(braked[110:, 1:], axis=0).max() == 0.0


def test_a_brake_on_a_plant_without_joints_to_jam_is_one_config_error():
    with pytest.raises(ConfigError, match=r"^safety.brake: a brake stops its joint by the jam "
                                          r"law, modelled for chains"):
        config("rrr3_pd", "safety.brake=true")
    with pytest.raises(ConfigError, match=r"^safety.brake\[1\]: expected true or false, got 1$"):
        config("rig_zmq", "safety.brake=[true, 1, false]")


@pytest.mark.system
def test_brakes_of_the_zeromq_emulator_after_a_category_1_stop(tmp_path):
    """`hil estop --category 1` to a `hil control` of `hil emulate` with a brake on joint 2
    only: once the emulator removes the power (a `brake` event at its safe state) joint 2
    holds its position exactly while joint 3, unbraked, sinks under gravity."""
    ep = endpoint(tmp_path)
    estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
    brake = "safety.brake=[false, true, false]"
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--set", brake,
                          *LENIENT_EMULATOR)
    log = tmp_path / "ctl.mcap"
    ctl = subprocess.Popen(hil("control", str(ROOT / "configs" / "rig_zmq.toml"), "--connect",
                               ep, "--log", str(log), "--estop-endpoint", estop,
                               "--set", f"safety.stop_time={STOP_TIME}", "--set", brake,
                               "--set", "sim.duration=60.0", *LENIENT_CONTROL),  # to the e-stop
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ctl.poll() is not None or ticks_logged(log) > 500, 300,
                 "the controller's rows")
        assert ctl.poll() is None, ctl.stderr.read()
        estop_running_controller(estop, ctl, "--category", "1")
        ctl.communicate(timeout=60)
        # the emulator steps on (free mode): its drives' STOP_TIME ramp, then 1 s of rows
        # unpowered (a 0.8 s wait from the stop left 0.5 s after the brake, in which joint 3
        # sank 8.6 mrad once: too close to the 10 mrad below)
        end = int(read_complete(log)[0]["tick"][-1])
        wait_for(lambda: ticks_logged(tmp_path / "emu.mcap") > end + STOP_TIME / 1e-3 + 1000,
                 120, "the emulator's rows after the stop")
    finally:
        if ctl.poll() is None:
            ctl.kill()
    _, err = emu.stop()
    assert ctl.returncode == 130
    arrays, events, _, _ = read_complete(tmp_path / "emu.mcap")
    braked = [e for e in events if e["kind"] == "brake"]
    assert len(braked) == 1 and braked[0]["joints"] == [2]
    assert f"brakes engaged on joints [2] at tick {braked[0]['tick']}" in err
    k = int(np.searchsorted(arrays["tick"], braked[0]["tick"]))
    q = arrays["q"][k:]
    assert len(q) > 300, "the emulator ran too briefly after the stop"
    assert np.ptp(q[150:, 1]) == 0.0                      # joint 2 blocked ...
    assert abs(q[-1, 2] - q[0, 2]) > 0.01                 # ... joint 3 falls


def test_brakes_of_the_emulated_cia402_drives_after_a_category_1_stop(request):
    """CanopenLink.controlled_stop(1): the drives ramp the arm to rest, then disable
    (SWITCH ON DISABLED: power removed); with brakes the joints then hold their position
    exactly, where without one (tests/test_estop_categories.py) the arm sinks."""
    from hilrig.controllers.factory import controller_from_config
    from hilrig.devices.cia402_drive import EmulatedDrives
    from hilrig.drivers.canopen_link import CanopenLink
    from hilrig.drivers.cia402 import State
    from hilrig.drivers.link import Measurement

    cfg = config("rig_canopen", "link.canopen.interface='virtual'",
                 f"link.canopen.channel='{request.node.name}'", "link.canopen.tpdo_timeout=0.5",
                 "link.canopen.heartbeat_timeout=2.0", f"safety.stop_time={STOP_TIME}",
                 "safety.brake=true")
    with EmulatedDrives(cfg) as drives, CanopenLink.from_config(cfg) as link:
        law = controller_from_config(cfg, link.command_unit)
        meas, u = Measurement(3), np.zeros(3)
        for _ in range(100):                     # moving, brakes released once enabled
            link.read(meas)
            law(meas.t, meas.pos, meas.vel, meas.current, u)
            link.write(u)
        released = drives.plant.braked.copy()
        link.controlled_stop(1, STOP_TIME)
        n_rest = int(round(STOP_TIME / cfg.sim.dt))
        for _ in range(n_rest + 50):
            link.read(meas)
            link.write(u)
        states = [drives.state(axis) for axis in (1, 2, 3)]
        q = [drives.plant.plant.x[:3].copy()]
        for _ in range(300):                     # unpowered, one plant step per SYNC
            link.read(meas)
            link.write(u)
            q.append(drives.plant.plant.x[:3].copy())
        phases = drives.plant.plant.jams[:3, JAM_PHASE].copy()
    assert not released.any()
    assert states == [State.SWITCH_ON_DISABLED] * 3
    assert (phases == BLOCKED).all()
    assert np.ptp(np.array(q), axis=0).max() == 0.0


@pytest.mark.system
def test_a_category_1_stop_keeps_the_power_off_while_the_controller_still_commands(tmp_path):
    """After a category 1 stop the controller's COMMANDs (which keep its session alive)
    no longer power the drives: before, one that came after the emulator's stop servo
    ended (a controller late on a busy host) released the brake for the ticks until its
    BYE (seen: `brake` at tick 2425, `brake_released` at 2432, `brake` again at 2436).
    A new session's HELLO lets COMMANDs power them again."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--set",
                          "safety.brake=[false, true, false]", *LENIENT_EMULATOR)
    sizes = {MessageType.WELCOME: 4, MessageType.STATE: 10, MessageType.ERROR: 1}

    def session(commands_after_stop: int, stop: bool) -> None:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 10000)     # its BYE still sent after close()
        sock.connect(ep)
        try:
            sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))

            def state() -> float:       # the plant time of the next STATE
                while True:
                    assert sock.poll(10000), "the emulator did not answer"
                    kind, _, t, _ = decode(sock.recv(), sizes)
                    if kind == MessageType.STATE:
                        return t

            started = state()
            sock.send(encode(MessageType.COMMAND, 1, 0.0, [0.0, 0.0, 0.0]))
            while state() < started + 0.05:     # 50 ms powered
                pass
            if stop:
                sock.send(encode(MessageType.STOP, 2, 0.0, [1.0, 0.02]))
            until = state() + commands_after_stop * 1e-3      # ticks of 1 ms
            while (t := state()) < until:                     # one COMMAND per STATE
                sock.send(encode(MessageType.COMMAND, 3, t, [0.0, 0.0, 0.0]))
            sock.send(encode(MessageType.BYE, 4, 0.0, []))
        finally:
            sock.close()

    session(200, stop=True)       # the stop servo is done after 20 ms: 180 more COMMANDs
    session(50, stop=False)       # a new session: its COMMANDs power the drives again
    emu.stop()
    _, events, _, _ = read_complete(tmp_path / "emu.mcap")
    kinds = [e["kind"] for e in events if e["kind"] in ("safe_state", "brake", "commanded",
                                                        "brake_released", "hello")]
    # (the second session's BYE may come after the emulator's own stop: not asserted)
    assert kinds[:7] == ["hello", "commanded", "safe_state", "brake",     # the stop
                         "hello", "commanded", "brake_released"], kinds   # the new session
