"""The base class Link owns the lifecycle (drivers.link): on every built-in link, against its
real counterpart (the in-process plant, a ZeroMQ emulator, emulated CiA 402 drives on
python-can's virtual bus, emulated RoboClaw drives on a pty), a call out of order raises one
LinkError naming the link and the call; a with block stops the drives and closes the link;
a failed configure (or activate) releases what it had opened; a user's link writes only the
hooks, and one written against the public methods keeps working with a DeprecationWarning."""
import logging
import os
import re
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import can
import numpy as np
import pytest
from conftest import ROOT, config, replaced
from hilrig.conformance.checks import check_link
from hilrig.devices.cia402_drive import EmulatedDrives
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.devices.zmq_plant import Emulator
from hilrig.drivers.canopen_link import CanopenLink
from hilrig.drivers.cia402 import State
from hilrig.drivers.inprocess import PlantLink
from hilrig.drivers.link import DriveFault, Link, LinkError, LinkState, LinkTimeout, Measurement
from hilrig.drivers.serial_link import SerialLink
from hilrig.drivers.zmq_link import ZmqLink
from rt_helpers import endpoint, wait_for

CANOPEN_GENEROUS = ("link.canopen.tpdo_timeout=0.5", "link.canopen.heartbeat_timeout=2.0")
SERIAL_PATIENT = ("emulator.mode=lockstep", "link.serial.timeout=0.5", "link.serial.budget=2.0",
                  "link.timeout=5.0")


def canopen_config(channel: str, *overrides: str):
    return config("rig_canopen", "link.canopen.interface='virtual'",
                  f"link.canopen.channel='{channel}'", *CANOPEN_GENEROUS, *overrides)


def refused(call, link: Link, pattern: str) -> None:
    """``call()`` raises exactly LinkError, one line: "<the link>: <pattern>"."""
    with pytest.raises(LinkError) as info:
        call()
    assert type(info.value) is LinkError
    assert re.fullmatch(re.escape(link.describe()) + ": " + pattern, str(info.value)), \
        str(info.value)


# -- the built-in links, each with its counterpart ----------------------------------------------

@pytest.fixture(params=["inprocess", "zmq", "canopen", "serial"])
def rig(request, tmp_path):
    """make(): a new link to a served counterpart; safe(link): the counterpart is in its
    safe state (zero input, drives disabled or zero duty)."""
    kind = request.param
    if kind == "inprocess":
        cfg = config("rig_inprocess")
        yield SimpleNamespace(make=lambda: PlantLink.from_config(cfg),
                              safe=lambda link: not link.held.any())
    elif kind == "zmq":
        ep = endpoint(tmp_path)
        cfg = config("rig_zmq", f"link.endpoint='{ep}'", "emulator.mode='lockstep'",
                     "link.timeout=5.0")
        emu = Emulator(cfg, ep)
        stop = threading.Event()
        server = threading.Thread(target=emu.serve, kwargs={"stop": stop.is_set})
        server.start()
        try:
            yield SimpleNamespace(make=lambda: ZmqLink.from_config(cfg),
                                  safe=lambda link: emu.safe)
        finally:
            stop.set()
            server.join()
            emu.close()
    elif kind == "canopen":
        cfg = canopen_config(request.node.name)
        with EmulatedDrives(cfg) as emu:
            yield SimpleNamespace(
                make=lambda: CanopenLink.from_config(cfg),
                safe=lambda link: all(emu.state(a) == State.SWITCH_ON_DISABLED
                                      for a in (1, 2, 3)))
    else:
        with RoboClawEmulator(config("rig_serial", *SERIAL_PATIENT)) as emu:
            cfg = replaced(config("rig_serial", *SERIAL_PATIENT), "link.serial", port=emu.port)
            yield SimpleNamespace(
                make=lambda: SerialLink.from_config(cfg),
                safe=lambda link: all(c.duty == [0, 0] for c in emu.controllers.values()))
        assert emu.error is None


def test_a_call_out_of_order_raises_one_link_error_naming_the_link_and_the_call(rig):
    link = rig.make()
    meas, zeros = Measurement(link.n_axes), np.zeros(link.n_axes)
    assert link.lifecycle is LinkState.UNCONFIGURED
    refused(lambda: link.read(meas), link, r"read\(\) before configure\(\): .*")
    refused(lambda: link.write(zeros), link, r"write\(\) before configure\(\): .*")
    refused(link.activate, link, r"activate\(\) before configure\(\): .*")
    link.configure()
    try:
        assert link.lifecycle is LinkState.CONFIGURED and link.enabled_at_ns is None
        refused(link.configure, link, r"configure\(\) twice: the link is already configured")
        refused(lambda: link.write(np.ones(link.n_axes)), link,
                r"write\(\) before activate\(\): .*")
        assert rig.safe(link)                       # the refused command reached nothing
        assert link.read(meas)
        link.activate()
        assert link.lifecycle is LinkState.ACTIVE and isinstance(link.enabled_at_ns, int)
        refused(link.activate, link, r"activate\(\) twice: the link is already active")
        refused(link.configure, link, r"configure\(\) twice: the link is already active")
        link.write(zeros)
        assert link.read(meas)
        link.safe_stop()
        link.safe_stop()
        assert link.lifecycle is LinkState.STOPPED
        wait_for(lambda: rig.safe(link), what="the counterpart in its safe state")
        refused(lambda: link.read(meas), link, r"read\(\) after safe_stop\(\): .*")
        refused(link.activate, link, r"activate\(\) after safe_stop\(\): .*")
        link.write(np.ones(link.n_axes))            # nothing (or zero) is sent, no error
        assert rig.safe(link)
    finally:
        link.close()
    link.close()
    link.safe_stop()
    assert link.lifecycle is LinkState.CLOSED
    for name, call in (("read", lambda: link.read(meas)), ("write", lambda: link.write(zeros)),
                       ("activate", link.activate), ("configure", link.configure)):
        refused(call, link, name + r"\(\) after close\(\): a closed link does not open again "
                                  r"\(make a new one\)")


def test_leaving_a_with_block_stops_the_counterpart_and_closes_the_link(rig):
    with rig.make() as link:                        # open(): configure, then activate
        assert link.lifecycle is LinkState.ACTIVE
        link.write(np.ones(link.n_axes))            # 1 V or 1 N m per joint
        link.read(Measurement(link.n_axes))         # (CANopen: the drives take it at SYNC)
        wait_for(lambda: not rig.safe(link), what="the counterpart taking the command")
    assert link.lifecycle is LinkState.CLOSED
    wait_for(lambda: rig.safe(link), what="the counterpart in its safe state")


def test_the_in_process_plant_goes_on_under_zero_input_after_safe_stop():
    link = PlantLink.from_config(config("rig_inprocess", "plant.q0=[0.1, -0.2, 0.3]"))
    link.open()
    link.write(np.full(3, 6.0))
    link.safe_stop()
    t = link.plant.t
    link.write(np.full(3, 6.0))                     # the plant's clock: one step, held zero
    assert link.plant.t == pytest.approx(t + 1e-3) and not link.held.any()
    link.close()


# -- close after a failed configure: what was half-opened is released ----------------------------

def after_a_failed(call: str, link: Link) -> None:
    """What a FAILED link does: refuses the calls of a configured one, then stops and closes
    quietly, twice."""
    assert link.lifecycle is LinkState.FAILED
    for name, each in (("read", lambda: link.read(Measurement(link.n_axes))),
                       ("write", lambda: link.write(np.zeros(link.n_axes))),
                       ("activate", link.activate), ("configure", link.configure)):
        refused(each, link, name + rf"\(\) after a failed {call}\(\): the link was stopped "
                                   r"and released \(make a new one\)")
    for each in (link.safe_stop, link.close, link.safe_stop, link.close):
        each()
    assert link.lifecycle is LinkState.CLOSED


def test_a_canopen_link_whose_bus_cannot_be_opened():
    link = CanopenLink({"interface": "socketcan", "channel": "hilrigcan9"}, [1], 1e-3,
                       10.0, 4096, 0.1, 1.0)
    with pytest.raises(LinkError, match=r"cannot open the CAN bus"):
        link.configure()
    after_a_failed("configure", link)


def master_heartbeats(spy: can.BusABC, seconds: float, master_id: int) -> int:
    """The controller's heartbeats the spy holds, and receives within ``seconds``."""
    count, end = 0, time.monotonic() + seconds
    while (frame := spy.recv(max(0.0, end - time.monotonic()))) is not None \
            or time.monotonic() < end:
        if frame is not None and frame.arbitration_id == 0x700 + master_id:
            count += 1
    return count


def test_a_canopen_link_without_drives_leaves_the_bus_after_its_failed_configure(request):
    cfg = canopen_config(request.node.name, "link.canopen.boot_timeout=0.3",
                         "link.canopen.heartbeat_period=0.02")
    spy = can.Bus(interface="virtual", channel=request.node.name)
    try:
        link = CanopenLink.from_config(cfg)
        with pytest.raises(LinkTimeout, match=r"axis 1 \(node 1\): no boot-up"):
            link.configure()
        assert master_heartbeats(spy, 0.0, 127) > 0       # queued while configure waited
        assert master_heartbeats(spy, 0.2, 127) == 0      # 10 periods: the bus was left
        after_a_failed("configure", link)
    finally:
        spy.shutdown()


def test_a_canopen_link_whose_activate_fails_disables_the_drives_and_leaves_the_bus(request):
    cfg = canopen_config(request.node.name)
    with EmulatedDrives(cfg) as emu:
        link = CanopenLink.from_config(cfg)
        link.configure()
        emu.inject_fault(2, 0x4310)                 # axis 2 faults before it is enabled
        with pytest.raises(DriveFault, match=r"axis 2: drive fault 0x4310"):
            link.activate()
        assert link.network is None                 # the base called _safe_stop and _close
        wait_for(lambda: emu.state(1) == emu.state(3) == State.SWITCH_ON_DISABLED,
                 what="axes 1 and 3 disabled")
        after_a_failed("activate", link)


def test_a_serial_link_on_a_missing_port():
    cfg = config("rig_serial", "link.serial.port='/nonexistent/ttyACM9'")
    link = SerialLink.from_config(cfg)
    with pytest.raises(LinkError, match=r"cannot open serial port /nonexistent/ttyACM9"):
        link.configure()
    after_a_failed("configure", link)


def descriptors_on(path: str) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    target = os.path.realpath(path)
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == target)


def test_a_serial_link_missing_a_controller_closes_its_port_after_the_failed_configure():
    with RoboClawEmulator(config("rig_serial", *SERIAL_PATIENT)) as emu:
        cfg = config("rig_serial", *SERIAL_PATIENT, "link.serial.timeout=0.05",
                     "link.serial.axes=[[128, 1], [128, 2], [131, 1]]")
        link = SerialLink.from_config(replaced(cfg, "link.serial", port=emu.port))
        before = descriptors_on(emu.port)           # the emulator keeps the pty's slave open
        with pytest.raises(LinkError, match=r"no RoboClaw answers at address 0x83"):
            link.configure()
        assert descriptors_on(emu.port) == before
        after_a_failed("configure", link)
    assert emu.error is None


def test_a_zmq_link_nobody_answers_closes_its_socket(tmp_path):
    cfg = config("rig_zmq", f"link.endpoint='{endpoint(tmp_path)}'", "link.timeout=0.05")
    link = ZmqLink.from_config(cfg)
    with pytest.raises(LinkTimeout, match=r"no emulator answered"):
        link.configure()
    assert link.socket is None
    after_a_failed("configure", link)


# -- a user's links ------------------------------------------------------------------------------

def plugins_link_snippet() -> str:
    """The Python block of docs/PLUGINS.md's section "A link"."""
    text = (ROOT / "docs" / "PLUGINS.md").read_text()
    section = text[text.index("## A link"):]
    return section[section.index("```python") + len("```python"):section.index("```\n\n")]


def test_the_minimal_link_of_the_docs_writes_only_the_hooks_and_conforms(capsys):
    namespace = {}
    exec(compile(plugins_link_snippet(), "docs/PLUGINS.md", "exec"), namespace)
    link, integrator = namespace["link"], namespace["IntegratorLink"]
    # 100 ticks of rate = 0.5 rad/s/V * -2 V/rad * (pos - 1): 1 - pos shrinks by 0.999 a tick
    assert np.allclose(link.pos, 1.0 - 0.999 ** 100, rtol=0, atol=1e-12)
    assert capsys.readouterr().out == ("IntegratorLink: write() after close(): a closed link "
                                       "does not open again (make a new one)\n")
    assert not {"configure", "read", "write", "safe_stop", "close"} & set(vars(integrator))
    check_link(integrator)


class BoardLink(Link):
    """A user's link, hooks only: a board on UDP that answers each datagram (b"?" to read,
    n float64 commands in N m to write) with t (s), n positions (rad), n rates (rad/s)."""

    command_unit = "N m"

    def __init__(self, board: tuple, n_axes: int = 2, timeout: float = 0.5):
        self.board, self.n_axes, self.timeout = board, n_axes, timeout
        self.sock = None
        self.last = np.zeros(1 + 2 * n_axes)

    def describe(self) -> str:
        return f"board at udp:{self.board[1]}"

    def _exchange(self, request: bytes) -> None:
        self.sock.send(request)
        try:
            self.last[:] = np.frombuffer(self.sock.recv(64), dtype=np.float64)
        except (TimeoutError, ConnectionRefusedError) as exc:
            raise LinkTimeout(f"{self.describe()}: no answer ({exc})") from None

    def _configure(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.board)
        self._exchange(b"?")

    def _read(self, meas: Measurement) -> bool:
        self._exchange(b"?")
        meas.buffer[:self.last.size] = self.last
        return True

    def _write(self, command: np.ndarray) -> None:
        self._exchange(np.asarray(command, dtype=np.float64).tobytes())

    def _safe_stop(self) -> None:
        self._exchange(np.zeros(self.n_axes).tobytes())

    def _close(self) -> None:
        if self.sock is not None:
            self.sock.close()


@pytest.fixture
def board():
    """Two unit masses on UDP (1 ms steps, torque in N m), served by a thread: its address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.05)
    stop = threading.Event()
    state = np.zeros(5)                                 # t, q1, q2, v1, v2

    def serve():
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(64)
            except TimeoutError:
                continue
            if data != b"?":
                state[3:] += 1e-3 * np.frombuffer(data, dtype=np.float64)
                state[1:3] += 1e-3 * state[3:]
                state[0] += 1e-3
            sock.sendto(state.tobytes(), peer)

    server = threading.Thread(target=serve)
    server.start()
    yield sock.getsockname()
    stop.set()
    server.join()
    sock.close()


def test_a_users_link_that_writes_only_the_hooks_conforms_and_releases_a_failed_configure(
        board):
    unserved = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unserved.bind(("127.0.0.1", 0))
    nobody = unserved.getsockname()
    unserved.close()                                    # a port nobody serves
    opened = []

    def failing():
        opened.append(BoardLink(nobody, timeout=0.05))
        return opened[-1]

    check_link(lambda: BoardLink(board), failing_factory=failing)
    assert opened[-1].lifecycle is LinkState.CLOSED and opened[-1].sock.fileno() == -1
    with BoardLink(board) as link:                      # and it moves the masses
        meas = Measurement(2)
        link.read(meas)
        start = meas.pos.copy()
        for _ in range(10):
            link.write(np.array([1.0, -1.0]))
        link.read(meas)
    assert np.all(np.sign(meas.pos - start) == [1.0, -1.0])


def test_a_link_written_against_the_public_methods_keeps_working_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=(
            r"OldLink overrides configure\(\), activate\(\), read\(\), write\(\), safe_stop\(\), "
            r"close\(\) of hilrig.drivers.link.Link: write the hooks _configure\(\), "
            r"_activate\(\), _read\(\), _write\(\), _safe_stop\(\), _close\(\) instead")):
        class OldLink(Link):
            """A link as written before the base owned the lifecycle: its own flags."""

            n_axes, command_unit = 1, "V"

            def __init__(self):
                self.configured = self.active = self.stopped = False
                self.q = 0.0

            def configure(self):
                self.configured = True

            def activate(self):
                if not self.configured:
                    raise LinkError("activate before configure")
                self.active = True

            def read(self, meas):
                meas.t, meas.pos[0], meas.vel[0] = 0.0, self.q, 0.0
                return True

            def write(self, command):
                if not self.active:
                    raise LinkError("write before activate")
                if not self.stopped:
                    self.q += float(command[0])

            def safe_stop(self):
                self.stopped = True

            def close(self):
                self.active = False

    with pytest.raises(LinkError, match="write before activate"):
        OldLink().write(np.ones(1))
    meas = Measurement(1)
    with OldLink() as link:                             # open(), then safe_stop() and close()
        link.write(np.array([0.25]))
        link.write(np.array([0.5]))
        assert link.read(meas) and meas.pos[0] == 0.75
    assert link.stopped and not link.active


def test_safe_stop_and_close_log_what_their_hooks_raise_and_call_them_once(caplog):
    calls = []

    class StuckLink(Link):
        n_axes, command_unit = 1, "V"

        def _configure(self):
            pass

        def _read(self, meas):
            return False

        def _write(self, command):
            pass

        def _safe_stop(self):
            calls.append("safe_stop")
            raise RuntimeError("brake relay stuck")

        def _close(self):
            calls.append("close")
            raise OSError("port vanished")

    link = StuckLink()
    link.open()
    with caplog.at_level(logging.ERROR, logger="hil.link"):
        for _ in range(2):
            link.safe_stop()
            link.close()
    assert calls == ["safe_stop", "close"] and link.lifecycle is LinkState.CLOSED
    assert [r.getMessage() for r in caplog.records] == [
        "StuckLink: safe_stop raised RuntimeError: brake relay stuck",
        "StuckLink: close raised OSError: port vanished"]
