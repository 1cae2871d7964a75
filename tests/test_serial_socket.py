"""rig_serial's line over a Unix socket (``unix://PATH``, drivers.protocol_unix): the same
SerialLink against the emulated drives serving the socket (devices.roboclaw_drive), and the
socket held to the rules of every endpoint (owner only, never taken over, no stranger
talked to). Why a socket: a pty's kernel worker of normal priority lost rig_serial's link
on a busy host (docs/RIGPC.md, "A pty is not real-time"); the pty stays for device paths
(tests/test_serial_link.py)."""
from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid

import numpy as np
import pytest
import serial
from hilrig.controllers.factory import controller_from_config
from hilrig.devices.roboclaw_drive import RoboClawEmulator
from hilrig.drivers import protocol_unix
from hilrig.drivers import roboclaw_codec as rc
from hilrig.drivers.link import LinkError, Measurement
from hilrig.drivers.serial_link import SerialLink
from hilrig.errors import ConfigError

from conftest import config, replaced

LOCKSTEP = ("emulator.mode=lockstep",)
PATIENT = ("link.serial.timeout=0.5", "link.serial.budget=2.0", "link.timeout=5.0")
QUICK = ("link.serial.timeout=0.2", "link.serial.budget=2.0", "link.timeout=5.0")


def rig(*overrides: str):
    return config("rig_serial", *LOCKSTEP, *PATIENT, *overrides)


def fresh_url() -> str:
    return f"unix://$RUNTIME/serial-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def served():
    """The emulated drives serving a fresh socket (lockstep); stopped after the test."""
    url = fresh_url()
    emu = RoboClawEmulator(rig(), socket_url=url).start()
    yield emu
    emu.stop()
    assert emu.error is None


@pytest.fixture
def connect():
    """connect(port, *overrides) -> an open SerialLink on ``port``; closed after the test."""
    links = []

    def make(port: str, *overrides: str) -> SerialLink:
        link = SerialLink.from_config(replaced(rig(*overrides), "link.serial", port=port))
        links.append(link)
        link.open()
        return link

    yield make
    for link in links:
        link.close()


def pd_ticks(link: SerialLink, ticks: int) -> np.ndarray:
    """read -> rig_serial's PD -> write, ``ticks`` times; the measured q per tick."""
    law = controller_from_config(rig(), link.command_unit)
    meas, u, q = Measurement(link.n_axes), np.zeros(link.n_axes), np.zeros((ticks, link.n_axes))
    for k in range(ticks):
        assert link.read(meas), link.last_error
        law(meas.t, meas.pos, meas.vel, meas.current, u)
        link.write(u)
        q[k] = meas.pos
    return q


def test_the_link_over_the_socket_measures_and_commands_as_over_the_pty(served, connect):
    """Lockstep is deterministic: the same reads and duties over either line give the same
    trajectory bit for bit, and it moved (the duties reached the plant)."""
    over_socket = pd_ticks(connect(served.port), 40)
    with RoboClawEmulator(rig()) as pty:
        over_pty = pd_ticks(connect(pty.port), 40)
    assert np.array_equal(over_socket, over_pty)
    assert np.all(np.abs(over_socket[-1]) > 0.01)          # rad: every joint on its way
    assert served.stats["steps"] == 39 and served.stats["connections"] == 1
    assert served.stats["replies"] == served.stats["requests"] and served.stats["unsent"] == 0


def test_a_corrupted_reply_over_the_socket_is_counted_and_retried(served, connect):
    link = connect(served.port, *QUICK)
    meas = Measurement(3)
    assert link.read(meas)
    served.corrupt_replies(1)
    assert link.read(meas)                                  # the retry got it
    assert link.crc_errors == 1 and link.failed_exchanges >= 1
    served.truncate_replies(1)
    assert link.read(meas)
    assert link.crc_errors == 1 and link.failed_exchanges >= 2   # a short reply: no CRC error


def test_pyserial_opens_the_url_and_exchanges_a_request(served):
    """The handler's own read and write (a third-party program on pyserial's API)."""
    protocol_unix.register()
    with serial.serial_for_url(served.port, timeout=5.0) as port:
        request = rc.encode_request(0x80, rc.READ_MAIN_BATTERY)
        assert port.write(request) == len(request)
        assert select.select((port.fileno(),), (), (), 5.0)[0]
        assert port.in_waiting == rc.READ_MAIN_BATTERY.reply_length    # one write, whole
        reply = port.read(rc.READ_MAIN_BATTERY.reply_length)
        assert port.in_waiting == 0
    assert rc.decode_reply(0x80, rc.READ_MAIN_BATTERY, reply) == (240,)     # 24.0 V


def test_the_emulator_going_away_is_one_line_not_a_hang(connect):
    emu = RoboClawEmulator(rig(), socket_url=fresh_url()).start()
    link = connect(emu.port)
    assert link.read(Measurement(3))
    emu.stop()
    with pytest.raises(LinkError) as info:
        link.read(Measurement(3))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{emu.port}: ")
    assert "closed by the other end" in message


def test_one_link_at_a_time_and_the_next_after_a_disconnect(served, connect):
    """A second link is closed at once and named (the first keeps its drives); once the
    first disconnects, the next one connects."""
    first = connect(served.port)
    meas = Measurement(3)
    assert first.read(meas)
    with pytest.raises(LinkError, match="closed by the other end .*serves another link"):
        connect(served.port)
    assert first.read(meas)                                 # undisturbed
    assert served.stats["refused"] == 1
    first.close()
    assert connect(served.port).read(meas)
    assert served.stats["connections"] == 2


def test_no_emulator_is_named_at_open(connect):
    url = fresh_url()
    with pytest.raises(LinkError, match=r"cannot open serial port unix://\$RUNTIME/serial-.*: "
                                        r"no socket at .*hil emulate"):
        connect(url)


def test_the_socket_is_owner_only_and_removed_at_close():
    old = os.umask(0)                    # whatever the umask
    try:
        emu = RoboClawEmulator(rig(), socket_url=fresh_url())
    finally:
        os.umask(old)
    path = protocol_unix.socket_path(emu.port)
    try:
        info = os.lstat(path)
        assert info.st_mode & 0o777 == 0o600 and info.st_uid == os.getuid()
    finally:
        emu.close()
    assert not os.path.lexists(path)


def test_a_served_socket_is_never_taken_over_and_a_stale_one_is_replaced(served):
    with pytest.raises(ConfigError, match="in use by a running process"):
        RoboClawEmulator(rig(), socket_url=served.port)
    stale_url = fresh_url()
    path = protocol_unix.socket_path(stale_url)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)                      # a crashed emulator's file: nobody listens
    dead.close()
    emu = RoboClawEmulator(rig(), socket_url=stale_url)
    try:
        assert os.lstat(path).st_mode & 0o777 == 0o600
    finally:
        emu.close()


SQUATTER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(4)
print("listening", flush=True)
sys.stdin.read()
"""


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to be another user")
def test_a_stranger_who_serves_the_path_first_is_refused_by_link_and_emulator(connect):
    """`nobody` binds the socket path first (a folder both can write): the link refuses to
    talk to it (root included, whom the file's mode does not stop), and the emulator
    refuses to replace it."""
    folder = tempfile.mkdtemp(prefix="hsq-", dir="/tmp")
    os.chmod(folder, 0o777)
    path = f"{folder}/roboclaw"
    squatter = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                 sys.executable, "-I", "-c", SQUATTER, path],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline() == "listening\n"
        uid = os.lstat(path).st_uid
        assert uid != os.getuid()
        with pytest.raises(LinkError, match=rf"served by another user \(uid {uid}\): refusing"):
            connect(f"unix://{path}")
        with pytest.raises(ConfigError):
            RoboClawEmulator(rig(), socket_url=f"unix://{path}")
        assert os.lstat(path).st_uid == uid                  # still the squatter's
    finally:
        squatter.communicate("", timeout=30)
        shutil.rmtree(folder)


@pytest.mark.parametrize("port", ["unix://relative/roboclaw", "unix:///tmp/folder/",
                                  "tcp://127.0.0.1:5000"])
def test_a_bad_socket_url_is_one_line_naming_the_key(port):
    with pytest.raises(ConfigError, match=r"^link\.serial\.port: serial port .*expected "
                                          r"unix:///ABSOLUTE/PATH or unix://\$RUNTIME/NAME$"):
        config("rig_serial", f"link.serial.port='{port}'")


def test_rig_serial_ships_with_the_socket_in_the_runtime_folder():
    assert config("rig_serial").link.serial.port == "unix://$RUNTIME/roboclaw"
    assert protocol_unix.socket_path("unix://$RUNTIME/roboclaw") == \
        f"{os.environ['XDG_RUNTIME_DIR']}/hilrig/roboclaw"
