"""The control plane under attack and under mistakes: endpoints that cannot be taken over,
owner-only sockets, one commanding controller, CURVE over tcp, a flood of bad frames at a
bounded cost, and one clear line for every bad endpoint. Real subprocesses, real sockets."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zmq
from hilrig.drivers.link import LinkError, Measurement
from hilrig.drivers.wire import ERROR_TEXT, FAULT_PARAMS, MessageType, decode, encode, encode_fault
from hilrig.drivers.zmq_link import ZmqLink
from hilrig.cli.main import main
from malformed import malformed_kinds, malformed_messages
from rt_helpers import ROOT, SHARED_CPU, EmulatorProcess, endpoint, hil, read_complete, wait_for

RIG_ZMQ = str(ROOT / "configs" / "rig_zmq.toml")
RIG_INPROCESS = str(ROOT / "configs" / "rig_inprocess.toml")


@pytest.fixture(autouse=True)
def _no_emulator_left():
    yield
    EmulatorProcess.reap()


@pytest.fixture
def runtime(monkeypatch):
    """A private runtime folder (short path: ipc paths are limited to 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="h11-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _hello(ep: str, timeout_ms: int = 5000):
    """A raw peer that said HELLO: (socket, the first answer's type)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(ep)
    sock.send(encode(MessageType.HELLO, 0, 0.0, [3]))
    if not sock.poll(timeout_ms):
        return sock, None
    return sock, decode(sock.recv())[0]


def _without_compile_progress(err: str) -> str:
    """stderr without the lines of a first compilation of the kernels (after an edit)."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if not line.startswith("hilrig: compil"))


def _rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# -- 1. endpoints cannot be taken over --------------------------------------------------------

@pytest.mark.system
def test_a_second_emulator_on_a_live_endpoint_is_refused_and_a_dead_ones_socket_reused(tmp_path):
    """A second `hil emulate` on the same ipc endpoint replaced the first one's socket
    silently; now it is refused with one line. A SIGKILLed emulator's socket file is stale:
    the next emulator removes it and serves."""
    ep = endpoint(tmp_path)
    first = EmulatorProcess("rig_zmq", ep, tmp_path / "first.mcap", "--mode", "lockstep")
    second = subprocess.run(hil("emulate", RIG_ZMQ, "--bind", ep, "--mode", "lockstep"),
                            cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert second.returncode == 2
    assert _without_compile_progress(second.stderr) == (f"hil: config error: emulator endpoint {ep} is in use by a "
                             "running process (another hil? stop it or choose another "
                             "endpoint)\n")
    sock, answer = _hello(ep)                  # the first one still serves its peers
    sock.close(0)
    assert answer == MessageType.WELCOME
    first.proc.kill()
    first.proc.wait()
    path = ep[len("ipc://"):]
    assert stat.S_ISSOCK(os.lstat(path).st_mode)       # left behind by the killed process
    EmulatorProcess("rig_zmq", ep, tmp_path / "next.mcap", "--mode", "lockstep")
    sock, answer = _hello(ep)
    sock.close(0)
    assert answer == MessageType.WELCOME


@pytest.mark.system
def test_each_control_run_has_its_own_estop_endpoint_and_hil_estop_finds_them(tmp_path,
                                                                               runtime):
    """Two `hil control` runs: each in the run list, each on an owner-only socket of its
    own; `hil estop RUN_ID` stops one, `hil estop` the others; a third run on a live
    run's e-stop endpoint is refused (it used to bind over it)."""
    logs = [tmp_path / f"ctl{i}.mcap" for i in range(2)]
    ctls = [subprocess.Popen(hil("control", RIG_INPROCESS, "--duration", "600", "--log",
                                 str(log), *SHARED_CPU), cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for log in logs]
    try:
        ids = []
        for ctl in ctls:
            line = ctl.stdout.readline()
            match = re.match(r"run ([0-9a-f]{6}): `hil estop \1`", line)
            assert match, line + ctl.stderr.read() if ctl.poll() is not None else line
            ids.append(match.group(1))
        for log in logs:
            wait_for(lambda log=log: log.exists() and log.stat().st_size > 10000, 90,
                     "the controllers")
        listed = subprocess.run(hil("estop", "--list"), cwd=ROOT, capture_output=True,
                                text=True, timeout=30)
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
        assert set(rows) == set(ids)
        folder = os.path.join(runtime, "hilrig")
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        for run_id, ctl in zip(ids, ctls):
            pid, config, ep = rows[run_id][1], rows[run_id][3], rows[run_id][4]
            assert int(pid) == ctl.pid and config == RIG_INPROCESS
            assert ep == f"ipc://{folder}/estop-{run_id}"
            assert rows[run_id][6] == f"ipc://{folder}/set-{run_id}"     # for `hil set`
            assert stat.S_IMODE(os.stat(ep[len("ipc://"):]).st_mode) == 0o600
        taken = rows[ids[1]][4]
        third = subprocess.run(hil("control", RIG_INPROCESS, "--duration", "5", "--log",
                                   str(tmp_path / "third.mcap"), "--estop-endpoint", taken),
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert third.returncode == 2
        assert _without_compile_progress(third.stderr) == (f"hil: config error: e-stop endpoint {taken} is in use by a "
                                "running process (another hil? stop it or choose another "
                                "endpoint)\n")
        assert not (tmp_path / "third.mcap").exists()
        one = subprocess.run(hil("estop", ids[0]), cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
        assert one.returncode == 0, one.stderr
        assert one.stdout.startswith(f"e-stop: run {ids[0]} stopped its drives at tick ")
        ctls[0].communicate(timeout=30)
        assert ctls[0].returncode == 130
        assert ctls[1].poll() is None                       # the other run goes on
        rest = subprocess.run(hil("estop"), cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
        assert rest.returncode == 0, rest.stderr
        assert rest.stdout.startswith(f"e-stop: run {ids[1]} stopped its drives")
        ctls[1].communicate(timeout=30)
        assert ctls[1].returncode == 130
        for log in logs:
            assert read_complete(log)[3]["reason"] == "e-stop from the CLI (hil estop)"
        after = subprocess.run(hil("estop", "--list"), cwd=ROOT, capture_output=True,
                               text=True, timeout=30)
        assert after.stdout == "no running `hil run` or `hil control` of yours\n"
    finally:
        for ctl in ctls:
            if ctl.poll() is None:
                ctl.kill()
                ctl.communicate()


# -- 2. who may command ---------------------------------------------------------------------

@pytest.mark.system
def test_ipc_sockets_are_owner_only_whatever_the_umask(tmp_path):
    """With umask 000 the emulator's socket was 0777: another user jammed a joint."""
    ep = endpoint(tmp_path)
    EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep",
                    preexec_fn=lambda: os.umask(0))
    assert stat.S_IMODE(os.stat(ep[len("ipc://"):]).st_mode) == 0o600


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root (to become another user with setpriv)")
def test_another_user_cannot_connect_to_a_runs_sockets(tmp_path, runtime):
    """`nobody` tries to connect to an emulator started under umask 000 and to a
    controller's e-stop socket in the runtime folder: both refused by the kernel."""
    ep = endpoint(tmp_path)
    EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep",
                    preexec_fn=lambda: os.umask(0))
    log = tmp_path / "ctl.mcap"
    ctl = subprocess.Popen(hil("control", RIG_INPROCESS, "--duration", "60", "--log", str(log),
                               *SHARED_CPU),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: os.umask(0))
    try:
        estop = ctl.stdout.readline().rstrip().rsplit("(", 1)[1].rstrip(")")
        assert estop.startswith(f"ipc://{runtime}/hilrig/estop-")
        probe = ("import socket, sys\n"
                 "for path in sys.argv[1:]:\n"
                 "    s = socket.socket(socket.AF_UNIX)\n"
                 "    try:\n"
                 "        s.connect(path); print('connected')\n"
                 "    except PermissionError:\n"
                 "        print('refused')\n")
        other = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                                "--clear-groups", "/usr/bin/python3", "-c", probe,
                                ep[len("ipc://"):], estop[len("ipc://"):]],
                               capture_output=True, text=True, timeout=30)
        assert other.stdout.split() == ["refused", "refused"], other.stderr
    finally:
        ctl.kill()
        ctl.communicate()


def _rejections(events: list[dict]) -> Counter:
    """Rejected frames per reason, from the emulator's ``rejected`` events (the first of
    each reason and second alone, with its detail; the rest in a summary's ``counts``)."""
    tally = Counter()
    for event in events:
        if event["kind"] == "rejected":
            if "counts" in event:
                tally.update(event["counts"])
            else:
                tally[event["reason"].split(": ")[0]] += event["count"]
    return tally


@pytest.mark.system
def test_one_controller_at_a_time_and_a_takeover_is_explicit_and_logged(tmp_path):
    """Any peer's HELLO took the plant from a running controller. Now a second HELLO is
    refused while the first controller is connected; a TAKEOVER replaces it (logged) and
    the old controller is then refused; a controller gone without BYE frees the plant."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep")
    first = ZmqLink(ep, 3, timeout=5.0)
    first.open()
    second = ZmqLink(ep, 3, timeout=1.0)       # says HELLO for 1 s, refused each time
    with pytest.raises(LinkError, match="another controller commands this plant"):
        second.open()
    meas = Measurement(3)
    assert first.read(meas) and meas.t == 0.0    # the STATE its HELLO was answered with
    first.write(np.zeros(3))
    assert first.read(meas) and meas.t > 0.0     # the first one still commands: a step
    # (read before the TAKEOVER is sent: ZeroMQ queues fairly per peer, so a COMMAND
    # still in flight could otherwise reach the emulator after it)
    third = ZmqLink(ep, 3, timeout=5.0, takeover=True)
    third.open()
    first.write(np.zeros(3))
    with pytest.raises(LinkError, match=ERROR_TEXT[6]):   # not allowed in this state
        for _ in range(3):                       # (after the STATEs still queued for it)
            first.read(meas)
    first.close()
    assert third.read(meas)                      # the STATE its TAKEOVER was answered with
    taken_at = meas.t
    third.write(np.full(3, 1.0))
    assert third.read(meas) and meas.t > taken_at  # the third one commands: a step
    third.close()                                # gone without BYE
    time.sleep(0.3)
    fourth = ZmqLink(ep, 3, timeout=5.0)
    fourth.open()                                # the plant is free again
    fourth.safe_stop()
    fourth.close()
    emu.stop()
    _, events, _, _ = read_complete(tmp_path / "emu.mcap")
    refused = _rejections(events)                # the second's HELLOs, the first's COMMAND
    assert set(refused) == {"HELLO while another controller is connected",
                            "COMMAND from a peer that is not the controller"}
    assert refused["HELLO while another controller is connected"] >= 2
    assert refused["COMMAND from a peer that is not the controller"] == 1
    takeovers = [e for e in events if e["kind"] == "takeover"]
    assert len(takeovers) == 1 and takeovers[0]["previous"] != takeovers[0]["peer"]
    # three controllers welcomed (a HELLO said again under load is welcomed again)
    assert len({e["peer"] for e in events if e["kind"] == "hello"}) == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.system
def test_tcp_needs_curve_keys_and_unauthenticated_peers_are_refused(tmp_path, monkeypatch):
    """Over tcp loopback another user jammed, e-stopped and hijacked. Now the emulator is
    a CURVE server: a peer without this user's keys gets no answer, one with them works."""
    keys = tmp_path / "keys"
    env = dict(os.environ, HILRIG_KEYS=str(keys))
    made = subprocess.run(hil("keys"), cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=60)
    assert made.returncode == 0, made.stderr
    for secret in ("server.key_secret", "client.key_secret"):
        assert stat.S_IMODE(os.stat(keys / secret).st_mode) == 0o600
    ep = f"tcp://127.0.0.1:{_free_port()}"
    EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--mode", "lockstep", env=env)
    stranger, answer = _hello(ep, timeout_ms=1500)
    stranger.close(0)
    assert answer is None                               # never got past the handshake
    monkeypatch.setenv("HILRIG_KEYS", str(keys))
    import hilrig

    with hilrig.connect(ep, timeout=5.0) as plant:
        plant.write([0.0, 0.0, 0.0])
        assert plant.read().t == 0.0                    # the state at HELLO
        assert plant.read().t == pytest.approx(0.001)   # one step
        jam = subprocess.run(hil("fault", "jam", "--joint", "1", "--connect", ep), cwd=ROOT,
                             capture_output=True, text=True, env=env, timeout=60)
        assert jam.returncode == 0 and "joint 1 jammed" in jam.stdout, jam.stderr
    nokeys = subprocess.run(hil("fault", "jam", "--joint", "1", "--connect", ep), cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env=dict(env, HILRIG_KEYS=str(tmp_path / "none")))
    assert nokeys.returncode == 2
    assert _without_compile_progress(nokeys.stderr) == (f"hil: config error: tcp endpoints need CURVE keys: no "
                             f"{tmp_path / 'none' / 'server.key'} (run `hil keys` first)\n")


# -- 7. every bad endpoint is one clear line -----------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["emulate", RIG_ZMQ, "--bind", "garbage"],
     "endpoint 'garbage': expected ipc://PATH or tcp://HOST:PORT"),
    (["emulate", RIG_ZMQ, "--bind", "ipc:///no-such-folder-h11/emu"],
     "endpoint 'ipc:///no-such-folder-h11/emu': folder /no-such-folder-h11 does not exist"),
    (["emulate", RIG_ZMQ, "--bind", "tcp://127.0.0.1:99999"],
     "endpoint 'tcp://127.0.0.1:99999': tcp port '99999' is not a number in 1..65535"),
    (["control", RIG_ZMQ, "--connect", "tcp://127.0.0.1:0"],
     "endpoint 'tcp://127.0.0.1:0': tcp port '0' is not a number in 1..65535"),
    (["control", RIG_ZMQ, "--connect", "ipc:///no-such-folder-h11/emu"],
     "endpoint 'ipc:///no-such-folder-h11/emu': folder /no-such-folder-h11 does not exist"),
    (["control", RIG_INPROCESS, "--estop-endpoint", "udp://x"],
     "endpoint 'udp://x': expected ipc://PATH or tcp://HOST:PORT"),
    (["fault", "jam", "--joint", "1", "--connect", "tcp://:5"],
     "endpoint 'tcp://:5': expected tcp://HOST:PORT"),
    (["estop", "--connect", "ipc://" + "x" * 120],
     f"endpoint 'ipc://{'x' * 120}': ipc path longer than 107 bytes"),
    (["estop", "nosuchrun"],
     "no running `hil run` or `hil control` with run id 'nosuchrun' (yours: none running; "
     "hil estop --list)"),
])
def test_a_bad_endpoint_is_one_clear_line(argv, message, capsys, runtime, tmp_path):
    status = main(argv + (["--log", str(tmp_path / "x.mcap")] if argv[0] == "control" else []))
    err = _without_compile_progress(capsys.readouterr().err)
    assert status == 2
    assert err == f"hil: config error: {message}\n"
    assert not (tmp_path / "x.mcap").exists()


def test_a_tcp_port_in_use_is_one_line_and_a_wide_bind_warns(tmp_path, monkeypatch, capsys,
                                                             caplog):
    monkeypatch.setenv("HILRIG_KEYS", str(tmp_path / "keys"))
    assert main(["keys"]) == 0
    port = _free_port()
    holder = zmq.Context.instance().socket(zmq.ROUTER)
    holder.setsockopt(zmq.LINGER, 0)
    holder.bind(f"tcp://0.0.0.0:{port}")
    capsys.readouterr()
    try:
        status = main(["emulate", RIG_ZMQ, "--bind", f"tcp://0.0.0.0:{port}"])
    finally:
        holder.close(0)
    assert status == 2
    assert _without_compile_progress(capsys.readouterr().err) == (
        "hil: config error: emulator endpoint "
                                       f"tcp://0.0.0.0:{port} is in use by a running process\n")
    assert any("reachable from other machines" in r.getMessage() for r in caplog.records)


# -- 4. a flood of bad frames costs bounded time and memory ----------------------------------------

class _Controller(threading.Thread):
    """A legitimate controller at ~1 kHz against a free-running emulator: the largest gap
    between fresh STATEs, and the error that ended it if any."""

    def __init__(self, ep: str):
        super().__init__(daemon=True)
        self.link = ZmqLink(ep, 3, timeout=2.0, context=zmq.Context())
        self.link.open()
        self.stop, self.states, self.gap, self.error = threading.Event(), 0, 0.0, None

    def run(self):
        meas, last = Measurement(3), time.monotonic()
        try:
            while not self.stop.is_set():
                self.link.write(np.zeros(3))
                time.sleep(0.001)
                if self.link.read(meas):
                    now = time.monotonic()
                    self.states, self.gap = self.states + 1, max(self.gap, now - last)
                    last = now
        except LinkError as exc:
            self.error = exc
        finally:
            self.link.safe_stop()
            self.link.close()
            self.link.context.term()


@pytest.mark.system
def test_a_flood_of_malformed_frames_is_counted_not_narrated_and_the_controller_keeps_its_link(
        tmp_path):
    """Seeded fuzz: 3600 messages of 18 malformed kinds (and out-of-range valid frames) from
    16 peers while a controller runs. Each frame used to cost a log line, an event and an
    ERROR reply. Now: the emulator stays up, counts every one, logs a bounded number of
    lines, rate-limits its ERROR replies, keeps its memory, and the controller its link."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--set",
                          "emulator.command_timeout=1.0")
    controller = _Controller(ep)
    controller.start()
    time.sleep(0.3)
    rss = _rss_bytes(emu.proc.pid)
    context = zmq.Context.instance()
    peers = []
    for _ in range(16):
        peer = context.socket(zmq.DEALER)
        peer.setsockopt(zmq.LINGER, 0)
        peer.connect(ep)
        peers.append(peer)
    messages = malformed_messages(seed=11, n=3600, nact=3)
    started = time.monotonic()
    for i, frames in enumerate(messages):
        peers[i % len(peers)].send_multipart(frames)
    errors = 0
    for peer in peers:      # a harmless valid FAULT last: its ack means all before were seen
        peer.send(encode_fault(2, 1, 0.0, 0, [None] * FAULT_PARAMS))   # clear joint 1
        deadline = time.monotonic() + 20
        while True:
            assert peer.poll(max(1, int(1000 * (deadline - time.monotonic())))), \
                "the emulator did not acknowledge a fault after the flood"
            kind, _, _, values = decode(peer.recv())
            if kind == MessageType.FAULT_ACK and values[0] == 0:
                break
            errors += kind == MessageType.ERROR or kind == MessageType.FAULT_ACK
    elapsed = time.monotonic() - started
    assert emu.proc.poll() is None
    grown = _rss_bytes(emu.proc.pid) - rss
    controller.stop.set()
    controller.join(10)
    for peer in peers:
        peer.close(0)
    assert controller.error is None and controller.states > 100
    assert controller.gap < 0.5                  # lenient: the machine is shared
    latecomer = ZmqLink(ep, 3, timeout=5.0)      # and a controller still connects
    latecomer.open()
    latecomer.safe_stop()
    latecomer.close()
    out, err = emu.stop()
    assert errors <= 200 * (elapsed + 2)         # ERROR replies rate-limited (200 per 1 s window)
    assert grown < 64e6, f"RSS grew by {grown / 1e6:.0f} MB"
    _, events, _, summary = read_complete(tmp_path / "emu.mcap")
    rejected = [e for e in events if e["kind"] == "rejected"]
    assert sum(e["count"] for e in rejected) == len(messages) == summary["rejected"]
    reasons = len(malformed_kinds(3))
    lines = [line for line in err.splitlines() if "rejected" in line]
    assert len(lines) <= 2 * reasons * (elapsed + 3) < len(messages) / 2
    assert f"rejected frames {len(messages)}" in out and "overruns" in out


@pytest.mark.system
def test_the_emulators_own_overruns_are_counted(tmp_path):
    """Its summary said "overruns 0" while it ran seconds behind real time. A stopped
    process (SIGSTOP, 0.3 s) misses deadlines: they are counted and reported."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap")
    sock, answer = _hello(ep)
    assert answer == MessageType.WELCOME            # the clock runs from HELLO
    time.sleep(0.2)
    emu.proc.send_signal(signal.SIGSTOP)
    time.sleep(0.3)
    emu.proc.send_signal(signal.SIGCONT)
    time.sleep(0.3)
    sock.close(0)
    out, _ = emu.stop()
    _, events, _, summary = read_complete(tmp_path / "emu.mcap")
    overruns = [e for e in events if e["kind"] == "overrun"]
    assert summary["overruns"] == len(overruns) >= 1
    assert f"overruns {summary['overruns']}," in out
    assert max(e["missed"] for e in overruns) >= 100     # 0.3 s at 1 kHz, at least a third


@pytest.mark.system
def test_a_controller_whose_emulator_takes_no_more_commands_drops_them_without_a_traceback(
        tmp_path):
    """Under a flood the emulator drains each peer's queue a little per tick; once the
    controller's queue was full, its next COMMAND raised zmq.Again out of `hil control`
    (a traceback, the link lost). Now the command is dropped and counted, and the link
    goes on when the emulator drains again."""
    ep = endpoint(tmp_path)
    emu = EmulatorProcess("rig_zmq", ep, tmp_path / "emu.mcap", "--set",
                          "emulator.command_timeout=5.0")
    link = ZmqLink(ep, 3, timeout=5.0)
    link.open()
    emu.proc.send_signal(signal.SIGSTOP)             # takes nothing: the queues fill
    try:
        for _ in range(5000):
            link.write(np.zeros(3))
    finally:
        emu.proc.send_signal(signal.SIGCONT)
    assert link.commands_dropped > 0
    meas = Measurement(3)
    wait_for(lambda: link.read(meas), 20, "a state after the emulator drained")
    link.safe_stop()
    link.close()
    emu.stop()


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("setpriv") is None
                    or not os.path.exists("/usr/bin/python3"),
                    reason="a stranger is `nobody` through setpriv, as root")
@pytest.mark.system
def test_a_strangers_socket_at_the_endpoint_is_refused_with_one_line(tmp_path):
    """A stranger who bound the emulator's path first got the user's `hil control` (and
    `hil fault`) talking to a fake emulator: an ipc socket file of another user is
    refused now, naming its owner."""
    folder = Path(tempfile.mkdtemp(prefix="hil-sq-", dir="/tmp"))
    folder.chmod(0o1777)
    ep = f"ipc://{folder}/emulator"
    # a Unix socket at the path, bound by the system's Python as nobody (who cannot read
    # this interpreter under /root): what a ZeroMQ ipc bind makes
    squatter = subprocess.Popen(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
         "-c", "import socket, sys; s = socket.socket(socket.AF_UNIX); "
               f"s.bind({ep[len('ipc://'):]!r}); s.listen(); print('bound', flush=True); "
               "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline() == "bound\n"
        # hil control: the link's failure ends the run (exit 1); hil fault: a bad endpoint
        for argv, code, kind in (
                (["control", RIG_ZMQ, "--connect", ep, "--log", str(tmp_path / "c.mcap")], 1,
                 ""),
                (["fault", "jam", "--joint", "1", "--connect", ep], 2, "config error: ")):
            proc = subprocess.run(hil(*argv), cwd=tmp_path, capture_output=True, text=True,
                                  timeout=300)
            assert proc.returncode == code, proc.stderr
            assert _without_compile_progress(proc.stderr).splitlines() == [
                f"hil: {kind}emulator endpoint {ep} belongs to another user (uid 65534): refusing to talk to it "
                "(stop theirs, or choose another endpoint)"]
    finally:
        squatter.stdin.close()
        squatter.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
