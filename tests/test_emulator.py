"""Controller and emulator in separate processes over real ZeroMQ sockets."""
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import zmq
from conftest import config
from hilrig.devices.zmq_plant import MAX_FRAME_BYTES
from hilrig.drivers.link import LinkError, LinkTimeout, Measurement
from hilrig.drivers.wire import (
    ERROR_MALFORMED,
    ERROR_SIZE,
    ERROR_TYPE,
    ERROR_VALUE,
    ERROR_VERSION,
    HEADER,
    MAGIC,
    REFUSED_JOINT,
    WIRE_VERSION,
    MessageType,
    decode,
    encode,
    encode_fault,
)
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.rt.loop import LinkLoop
from hilrig.rt.sim import simulate
from rt_helpers import (
    ROOT,
    EmulatorProcess,
    endpoint,
    hil,
    read_complete,
    stderr_lines,
    ticks_logged,
    wait_for,
)


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


def _control(cfg_name, ep, log, *overrides):
    cfg = config(cfg_name, f"link.endpoint='{ep}'", "link.type='zmq'", *overrides)
    return LinkLoop(cfg, ZmqLink.from_config(cfg), log).run(), cfg


@pytest.mark.system
def test_lockstep_over_zeromq_is_deterministic_and_equals_hil_sim(tmp_path):
    """3RRR with PD: two lockstep sessions and hil sim agree bit for bit; PD reaches the target."""
    runs = []
    for n in range(2):
        ep = endpoint(tmp_path)
        emu = EmulatorProcess("rrr3_pd", ep, tmp_path / f"emu{n}.mcap", "--mode", "lockstep",
                              "--set", "sim.duration=3.0", "--duration", "3.0")
        result, cfg = _control("rrr3_pd", ep, tmp_path / f"ctl{n}.mcap", "sim.duration=3.0",
                               "link.timeout=5.0")
        emu.stop()
        assert result.status == "ok", result.reason
        runs.append((read_complete(tmp_path / f"emu{n}.mcap")[0],
                     read_complete(tmp_path / f"ctl{n}.mcap")[0]))
    reference = simulate(cfg).arrays
    for emu_arrays, ctl_arrays in runs:
        for key in ("t", "q", "qd", "u"):
            np.testing.assert_array_equal(emu_arrays[key], reference[key][:3000], err_msg=key)
        np.testing.assert_array_equal(ctl_arrays["q"], reference["q"][:, :3])   # t = 0 .. 3 s
        np.testing.assert_array_equal(ctl_arrays["u"], reference["u"])
    final = runs[0][0]["q"][-1, :3]
    np.testing.assert_allclose(final, [0.4, 0.8, 1.0], atol=0.01)


@pytest.mark.system
def test_live_jam_with_hil_fault_during_a_control_session(tmp_path):
    """Free-running emulator, controller process, `hil fault jam` from a third process."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("serial3_free", ep, tmp_path / "emu.mcap")
    overrides = ["--set", "controller.type='pd'", "--set", "controller.kp=[300,300,300]",
                 "--set", "controller.kd=[40,40,40]", "--set", "controller.target=[0.6,-0.4,0.3]",
                 "--set", "controller.reference='sinusoid'", "--set", "controller.amplitude=0.3",
                 "--set", "controller.frequency=0.5", "--set", "safety.watchdog_ticks=500"]
    ctl = subprocess.Popen(hil("control", str(ROOT / "configs" / "serial3_free.toml"),
                               "--connect", ep, "--duration", "3", "--log",
                               str(tmp_path / "ctl.mcap"), *overrides),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # moving under the controller's reference (0.5 s of its 3 s): its set-up may take
    # seconds on a busy host, so not a fixed time after its start
    wait_for(lambda: ticks_logged(tmp_path / "ctl.mcap") >= 500, 120, "the controller's rows")
    fault = subprocess.run(hil("fault", "jam", "--joint", "2", "--duration", "0.1",
                               "--connect", ep), cwd=ROOT, capture_output=True, text=True,
                           timeout=30)
    assert fault.returncode == 0, fault.stderr
    assert "joint 2 jammed at tick" in fault.stdout
    ack_tick = int(fault.stdout.split("tick ")[1].split()[0])
    out, err = ctl.communicate(timeout=60)
    assert ctl.returncode == 0, err
    emu.stop()
    arrays, events, _, _ = read_complete(tmp_path / "emu.mcap")
    jam = [e for e in events if e["kind"] == "jam"]
    assert len(jam) == 1 and jam[0]["tick"] == ack_tick and jam[0]["live"]
    row = int(np.searchsorted(arrays["tick"], ack_tick))
    qd2, q2 = arrays["qd"][:, 1], arrays["q"][:, 1]
    assert abs(qd2[row]) > 1e-3          # it was moving when jammed
    blocked = slice(row + 100, None)      # dt = 0.1 s at 1 kHz
    assert np.all(qd2[blocked] == 0.0)
    assert np.ptp(q2[blocked]) == 0.0
    assert np.all(np.abs(np.diff(qd2[row:row + 100])) <= abs(qd2[row]) / 100 * (1 + 1e-6))


def _raw_peer(ep):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(ep)
    return sock


def _answer(sock, expected=None):
    assert sock.poll(5000), "the emulator did not answer"
    return decode(sock.recv(), expected)


@pytest.mark.system
def test_bad_messages_are_rejected_and_the_emulator_keeps_running(tmp_path):
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("serial3_free", ep, tmp_path / "emu.mcap", "--mode", "lockstep")
    sock = _raw_peer(ep)
    good = encode(MessageType.HELLO, 0, 0.0, [3])
    cases = {
        "truncated": (good[:10], ERROR_MALFORMED),
        "bad magic": (b"XXXX" + good[4:], ERROR_MALFORMED),
        "wrong version": (good[:4] + (9).to_bytes(2, "little") + good[6:], ERROR_VERSION),
        "oversized count": (HEADER.pack(MAGIC, WIRE_VERSION, 3, 0, 0.0, 100000), ERROR_SIZE),
        "length mismatch": (good + b"\0" * 8, ERROR_SIZE),
        "unknown type": (HEADER.pack(MAGIC, WIRE_VERSION, 99, 0, 0.0, 0), ERROR_TYPE),
        "wrong payload size": (encode(MessageType.COMMAND, 1, 0.0, [1, 2]), ERROR_SIZE),
        "non-finite value": (encode(MessageType.FAULT, 1, 0.0, [1, np.nan] + [0.1] * 7),
                             ERROR_VALUE),
    }
    for name, (frame, code) in cases.items():
        sock.send(frame)
        kind, _, _, values = _answer(sock)
        assert kind == MessageType.ERROR and int(values[0]) == code, name
    # a well-formed fault the plant cannot take: a FAULT_ACK whose status is the reason
    # (REFUSED_JOINT) and that says how many joints it has (docs/WIRE.md)
    sock.send(encode_fault(1, 7, 0.1, 0, [None] * 4))
    kind, _, _, values = _answer(sock)
    assert kind == MessageType.FAULT_ACK and int(values[0]) == REFUSED_JOINT
    assert int(values[4]) == 7 and int(values[5]) == 3
    sock.send(encode(MessageType.COMMAND, 1, 0.0, [0, 0, 0]))   # no HELLO yet
    assert _answer(sock)[0] == MessageType.ERROR
    sock.send(good)                                            # still serving
    assert _answer(sock)[0] == MessageType.WELCOME
    assert _answer(sock)[0] == MessageType.STATE
    sock.send(encode(MessageType.COMMAND, 1, 0.0, [0.5, 0, 0]))
    kind, seq, t, _ = _answer(sock)
    assert kind == MessageType.STATE and seq == 1 and t == pytest.approx(0.001)
    sock.close(0)
    out, err = emu.stop()
    _, events, _, _ = read_complete(tmp_path / "emu.mcap")
    rejected = [e for e in events if e["kind"] == "rejected"]
    # counted per reason: each malformed case, the refused fault, the COMMAND before HELLO
    assert sum(e["count"] for e in rejected) == len(cases) + 2
    assert any("wrong wire version" in e["reason"] for e in rejected)
    assert "rejected a frame" in err


@pytest.mark.system
def test_silent_controller_puts_the_plant_in_its_safe_state(tmp_path):
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rrr3_forward", ep, tmp_path / "emu.mcap", "--set",
                          "emulator.command_timeout=0.05")
    sock = _raw_peer(ep)
    sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))
    assert _answer(sock)[0] == MessageType.WELCOME
    sock.send(encode(MessageType.COMMAND, 1, 0.0, [5.0, -5.0, 5.0]))
    time.sleep(0.5)                                            # then silence
    sock.close(0)
    emu.stop()
    arrays, events, _, _ = read_complete(tmp_path / "emu.mcap")
    safe = [e for e in events if e["kind"] == "safe_state"]
    assert safe and "controller silent" in safe[0]["reason"]
    commanded = [e for e in events if e["kind"] == "commanded"][0]["tick"]
    tick = safe[0]["tick"]
    # 50 ms timeout: about 50 ticks (fewer when a stall of the machine lets real time jump)
    assert 1 <= tick - commanded <= 1000
    u, ticks = arrays["u"], arrays["tick"]
    assert np.all(u[(ticks > commanded) & (ticks < tick)] == [5.0, -5.0, 5.0])
    assert np.all(u[ticks >= tick] == 0.0)


@pytest.mark.system
def test_killed_emulator_stops_the_controller_with_a_clear_error(tmp_path):
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("serial3_free", ep, tmp_path / "emu.mcap")
    log = tmp_path / "ctl.mcap"

    def kill_once_the_controller_runs():
        """SIGKILL once the controller's log holds 400 rows (its set-up may take seconds
        on a busy host: a kill 1 s after the emulator's start left it 100 rows)."""
        try:
            wait_for(lambda: ticks_logged(log) >= 400, 60, "the controller's rows")
        finally:
            emu.proc.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_once_the_controller_runs)
    killer.start()
    result, _ = _control("serial3_free", ep, log, "sim.duration=20", "safety.watchdog_ticks=100")
    killer.join()
    emu.stop()
    assert result.status == "error"
    assert "watchdog: no fresh measurement for 100 ticks" in result.reason
    arrays, events, _, summary = read_complete(tmp_path / "ctl.mcap")
    assert summary["status"] == "error" and "link lost" in summary["reason"]
    assert 300 < len(arrays["t"]) < 20000
    assert [e["kind"] for e in events].count("stop") == 1


def test_controller_without_an_emulator_fails_clearly(tmp_path):
    ep = endpoint(tmp_path)
    cfg = config("serial3_free", f"link.endpoint='{ep}'", "link.type='zmq'", "link.timeout=0.05")
    result = LinkLoop(cfg, ZmqLink.from_config(cfg), tmp_path / "ctl.mcap").run()
    assert result.status == "error" and "no emulator answered" in result.reason
    read_complete(tmp_path / "ctl.mcap")


@pytest.mark.slow
def test_closing_the_link_delivers_the_last_command_and_bye(tmp_path):
    """The controller's last COMMAND and its BYE are queued when it closes the link;
    closing must not drop them (a lockstep emulator would miss its last step). Here
    the emulator's socket is gone when the controller writes and closes, and is back
    (same endpoint) only during the close: both frames still arrive."""
    ep = endpoint(tmp_path)
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.bind(ep)
    link = ZmqLink(ep, 3, timeout=2.0)
    opener = threading.Thread(target=link.open)
    opener.start()
    peer, frame = router.recv_multipart()
    assert decode(frame, {MessageType.HELLO: 1})[0] == MessageType.HELLO
    router.send_multipart([peer, encode(MessageType.WELCOME, 0, 0.0, [1.0, 3.0, 1e-3, 1.0])])
    opener.join()
    router.close(0)                               # the emulator's socket goes away
    time.sleep(0.3)                               # (the link notices: frames now queue)
    link.write(np.array([1.0, 2.0, 3.0]))
    link.safe_stop()
    back = context.socket(zmq.ROUTER)
    back.bind(ep)                                 # ... and comes back while the link closes
    link.close()
    kinds = []
    while back.poll(1000):
        _, frame = back.recv_multipart()
        kinds.append(decode(frame, {MessageType.HELLO: 1, MessageType.COMMAND: 3,
                                    MessageType.BYE: 0})[0])
    back.close(0)
    assert MessageType.COMMAND in kinds and kinds[-1] == MessageType.BYE


# -- absurd but well-formed values (issue: valid but absurd values move nothing) -------------

def _lockstep_states(ep, commands):
    """HELLO, then one COMMAND per row of ``commands`` to a lockstep emulator: the STATEs."""
    sock = _raw_peer(ep)
    try:
        n = commands.shape[1]
        sock.send(encode(MessageType.HELLO, 0, 0.0, [n]))
        expected = {MessageType.WELCOME: 4, MessageType.STATE: 1 + 3 * n, MessageType.ERROR: 1}
        assert sock.poll(10000)
        assert decode(sock.recv(), expected)[0] == MessageType.WELCOME
        assert sock.poll(10000)
        decode(sock.recv(), expected)                  # the state at HELLO
        states = []
        for k, u in enumerate(commands, start=1):
            sock.send(encode(MessageType.COMMAND, k, 0.0, u))
            assert sock.poll(10000)
            kind, _, _, values = decode(sock.recv(), expected)
            assert kind == MessageType.STATE
            states.append(values)
        return np.array(states)
    finally:
        sock.close(0)


@pytest.mark.system
def test_a_lockstep_emulator_steps_its_duration_however_fast_commands_come(tmp_path):
    """Commands queued ahead of the plant (a controller whose next COMMAND arrives before
    the emulator reads again: a busy host) step it only up to its duration: 5 steps, 5
    rows, 5 STATEs, the sixth COMMAND unread (before: an extra step and row, seen once
    in a full test run on a busy host as a 3001-row log of a 3 s run)."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep",
                          "--duration", "0.005")
    sock = _raw_peer(ep)
    expected = {MessageType.WELCOME: 4, MessageType.STATE: 10, MessageType.ERROR: 1}
    try:
        sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))
        for kind in (MessageType.WELCOME, MessageType.STATE):      # the state at HELLO
            assert _answer(sock, expected)[0] == kind
        for k in range(1, 9):                    # eight at once, none waiting for a STATE
            sock.send(encode(MessageType.COMMAND, k, 0.0, [1.0, -1.0, 1.0]))
        for _ in range(5):
            assert _answer(sock, expected)[0] == MessageType.STATE
        emu.proc.wait(timeout=60)                # it ends by itself: duration reached
        out, err = emu.stop()
        assert not sock.poll(500), "a sixth STATE: a step beyond the duration"
    finally:
        sock.close(0)
    arrays, events, _, summary = read_complete(tmp_path / "emu.mcap")
    assert len(arrays["t"]) == 5 and summary["ticks"] == 5, (summary, out, err)
    assert summary["reason"] == "duration reached", summary


@pytest.mark.system
def test_a_command_of_1e300_is_saturated_at_the_supply_voltage(tmp_path):
    """COMMAND ±1e300 V drove the plant to NaN; now it is the supply voltage, exactly."""
    runs = []
    for command in (1e300, 48.0):
        ep = endpoint(tmp_path)
        emu = EmulatorProcess("rig_zmq", ep, tmp_path / f"emu{command:g}.mcap", "--mode",
                              "lockstep")
        runs.append(_lockstep_states(ep, np.tile([command, -command, command], (50, 1))))
        emu.stop()
    assert np.all(np.isfinite(runs[0]))
    np.testing.assert_array_equal(runs[0], runs[1])
    arrays = read_complete(tmp_path / "emu1e+300.mcap")[0]
    assert np.abs(arrays["u"]).max() == 48.0           # emulator.supply_voltage


@pytest.mark.system
def test_an_absurd_jam_duration_is_refused_live_and_in_the_config(tmp_path):
    """A jam of 1e-320 s made the deceleration overflow; it is refused with the reason."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep")
    try:
        proc = subprocess.run(hil("fault", "jam", "--joint", "2", "--duration", "1e-320",
                                  "--connect", ep), capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        states = _lockstep_states(ep, np.zeros((5, 3)))      # still serving, state finite
        assert np.all(np.isfinite(states))
    finally:
        emu.stop()
    _, events, _, _ = read_complete(tmp_path / "emu.mcap")
    refused = [e for e in events if e["kind"] == "rejected"]
    assert refused and "jam duration must be 0 (blocked at once) or 1e-06..10000 s" \
        in refused[0]["reason"]
    proc = subprocess.run(hil("sim", str(ROOT / "configs" / "serial3_jam1.toml"), "--set",
                              "faults.jam.duration=1e-320", "--out", str(tmp_path / "x.npz")),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "faults.jam.duration: jam duration must be 0" in proc.stderr


@pytest.mark.system
def test_a_jam_of_a_joint_the_plant_lacks_names_the_joint_and_the_plants_joints(tmp_path):
    """`hil fault jam --joint 7` on a 3-joint arm said only "invalid value (see its log)";
    it names the joint and the joints the plant has, and the emulator serves on."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep")
    try:
        for joint in ("7", "0"):
            proc = subprocess.run(hil("fault", "jam", "--joint", joint, "--connect", ep),
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 1, proc.stderr
            assert stderr_lines(proc.stderr) == [
                f"hil: emulator refused the fault: joint {joint}: this plant has 3 joints "
                "(1..3)"]
        proc = subprocess.run(hil("fault", "jam", "--joint", "2", "--duration", "1e9",
                                  "--connect", ep), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and "jam duration must be 0" in proc.stderr, proc.stderr
        proc = subprocess.run(hil("fault", "jam", "--joint", "3", "--connect", ep),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "joint 3 jammed at tick" in proc.stdout, proc.stderr
    finally:
        emu.stop()


@pytest.mark.system
def test_an_invalid_plant_state_is_a_fault_with_a_nonzero_exit(tmp_path):
    """A supply of 1e300 V lets a command drive the plant to NaN: the emulator stops on it
    with an event and a non-zero exit code (it exited 0)."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep",
                          "--set", "emulator.supply_voltage=1e300")
    sock = _raw_peer(ep)
    try:
        sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))
        for _ in range(2):                         # WELCOME and the state at HELLO
            assert sock.poll(10000)
            sock.recv()
        for k in range(1, 100):                    # until the plant's state breaks
            sock.send(encode(MessageType.COMMAND, k, 0.0, [1e300, -1e300, 1e300]))
            if not sock.poll(2000) or emu.proc.poll() is not None:
                break
            sock.recv()
    finally:
        sock.close(0)
    emu.proc.wait(timeout=60)
    out, _ = emu.stop()
    assert emu.proc.returncode == 1
    assert "plant state invalid" in out or "invalid" in out
    _, events, _, summary = read_complete(tmp_path / "emu.mcap")
    assert [e for e in events if e["kind"] == "plant_fault"]
    assert "invalid" in summary["reason"]


@pytest.mark.system
def test_an_oversized_frame_ends_the_controllers_session_and_a_new_hello_recovers(tmp_path):
    """docs/WIRE.md, "Oversized frames": ZeroMQ closes the connection of a peer that sends
    a frame over MAX_FRAME_BYTES before the emulator sees it; the controller's DEALER
    reconnects under a new identity, so its COMMANDs are refused (ERROR 6: a LinkError;
    a command lost with the old connection gets no answer at all: LinkTimeout); the
    emulator saw the disconnection, so a new HELLO (no TAKEOVER) is welcomed and the plant
    steps on from where it stood."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("serial3_free", ep, tmp_path / "emu.mcap", "--mode", "lockstep")
    link = ZmqLink(ep, 3, timeout=2.0)             # a busy machine: wait generously
    meas, command = Measurement(3), np.array([0.5, 0.0, 0.0])
    link.configure()
    link.activate()
    assert link.read(meas) and meas.t == 0.0      # the STATE after WELCOME
    link.write(command)
    assert link.read(meas) and meas.t == pytest.approx(0.001)
    link.socket.send(b"\0" * (MAX_FRAME_BYTES + 1))
    refused, lost = None, 0
    for _ in range(5):
        link.write(command)
        try:
            link.read(meas)
        except LinkTimeout:
            lost += 1                              # sent into the connection ZeroMQ closed
        except LinkError as exc:
            refused = exc
            break
    assert refused is not None and lost <= 1, (refused, lost)
    assert "rejected our message: not allowed in this state" in str(refused)
    assert meas.t == pytest.approx(0.001)          # the plant did not move meanwhile
    link.close()
    second = ZmqLink(ep, 3, timeout=2.0)           # HELLO, not TAKEOVER
    second.configure()
    second.activate()
    assert second.read(meas) and meas.t == pytest.approx(0.001)
    second.write(command)
    assert second.read(meas) and meas.t == pytest.approx(0.002)
    second.safe_stop()
    second.close()
    out, err = emu.stop()
    assert "COMMAND from a peer that is not the controller" in err
    _, events, _, _ = read_complete(tmp_path / "emu.mcap")
    assert sum(e["kind"] == "hello" for e in events) == 2
