"""What the ``hil`` commands share: one map from what went wrong to the exit code and the
one line on stderr (cli.exits), one ``--set`` (cli.options.add_set), one way to address
a running run on ``hil fault``, ``hil estop`` and ``hil set`` (add_run_address)."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hilrig.cli.exits import ERRORS, exit_for
from hilrig.cli.main import main, parser
from hilrig.controllers.factory import ControllerError
from rt_helpers import ROOT, SHARED_CPU, hil

NOBODY = "ipc:///tmp/hil-test-nobody-listens"


@pytest.fixture
def runtime(monkeypatch):
    """A private runtime folder: no run of another test in the run list (short path:
    ipc paths are limited to 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="hcli-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _lines(err: str) -> list[str]:
    """stderr's lines without those of a first compilation of the kernels."""
    return [line for line in err.splitlines() if not line.startswith("hilrig: compil")]


def _hil(argv: list, capsys) -> tuple[int, list[str]]:
    """``hil ARGV`` in this process: its exit code and its stderr lines."""
    capsys.readouterr()
    status = main([str(a) for a in argv])
    return status, _lines(capsys.readouterr().err)


# -- the map from exceptions to exit codes --------------------------------------------------

def test_every_class_the_map_names_exists_under_that_name():
    """The map names classes by module and name (so that looking one up imports nothing):
    a class moved or renamed would silently fall out of it, and its errors become
    tracebacks."""
    for name, known in ERRORS.items():
        module, _, qualname = name.rpartition(".")
        cls = getattr(importlib.import_module(module), qualname)
        assert issubclass(cls, BaseException), name
        assert exit_for(cls.__new__(cls)) is known
    assert exit_for(ControllerError("x")).code == 2          # through its base, ConfigError
    assert exit_for(KeyboardInterrupt()).code == 130
    assert exit_for(RuntimeError("a bug")) is None


def test_the_cli_doc_lists_every_exit_code():
    readme = (ROOT / "docs" / "CLI.md").read_text()
    table = readme[readme.index("| exit code |"):]
    table = table[:table.index("\n\n")]
    for name, known in ERRORS.items():
        row = next((line for line in table.splitlines()
                    if f"`{name.rpartition('.')[2]}`" in line), None)
        assert row is not None, f"docs/CLI.md's exit codes do not name {name}"
        assert row.startswith(f"| {known.code} |"), row


def test_a_bug_shows_its_traceback_and_ctrl_c_is_130(monkeypatch, capsys):
    from hilrig.settings import builtin_configs

    def broken():
        raise RuntimeError("a bug in listing the configs")
    monkeypatch.setattr(builtin_configs, "names", broken)
    with pytest.raises(RuntimeError, match="a bug in listing"):
        main(["configs"])

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(builtin_configs, "names", interrupted)
    assert _hil(["configs"], capsys) == (130, ["hil: interrupted"])


@pytest.mark.system
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_reader_that_leaves_ends_hil_quietly_with_141(buffered):
    """``hil configs | head -3`` where head has gone before hil writes: exit 141 (a shell's
    code for SIGPIPE's end), nothing on stderr. Both ways Python writes stdout: at the
    interpreter's last flush (block-buffered, the default for a pipe) and at each print
    (PYTHONUNBUFFERED, as on the CI host)."""
    read_end, write_end = os.pipe()
    os.close(read_end)                             # the reader has left
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        done = subprocess.run(hil("configs"), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_broken_pipe_that_is_not_stdouts_is_a_bug(monkeypatch, capfd):
    """A broken pipe elsewhere (a socket, a serial port) while stdout is read on is no
    reader leaving: its traceback shows (stdout here a file: capfd)."""
    from hilrig.settings import builtin_configs

    def broken():
        raise BrokenPipeError(32, "a peer's socket closed")
    monkeypatch.setattr(builtin_configs, "names", broken)
    with pytest.raises(BrokenPipeError, match="a peer's socket"):
        main(["configs"])


def _user_errors(tmp: Path) -> list:
    """(family, argv, the one line) of a mistake of the user's in each family's commands."""
    missing = tmp / "missing.mcap"
    unknown_run = ("config error: no running `hil run` or `hil control` with run id "
                   "'nosuchrun' (yours: none running; hil estop --list)")
    return [
        ("runs", ["sim", "rrr3_pd", "--dt", "-0.001", "--out", tmp / "x.npz"], "sim.dt"),
        ("runs", ["run", "rrr3_pd", "--rate", "0"],
         "config error: --rate: expected a finite number > 0 (Hz), got 0"),
        ("runs", ["emulate", "rrr3_pd", "--duration", "-1"],
         "config error: --duration: expected a finite number > 0 (s), got -1"),
        ("runs", ["control", "rig_inprocess", "--link", "zmq", "--connect", "garbage"],
         "config error: endpoint 'garbage': expected ipc://PATH or tcp://HOST:PORT"),
        ("remote", ["fault", "jam", "--joint", "1", "--run", "nosuchrun"], unknown_run),
        ("remote", ["estop", "nosuchrun"], unknown_run),
        ("remote", ["set", "--run", "nosuchrun", "controller.kp=80"], unknown_run),
        ("logs", ["plot", missing], f"{missing}: not found"),
        ("logs", ["log", "export", missing, "--out", tmp / "x.npz"], f"{missing}: not found"),
        ("logs", ["log", "repair", missing], f"{missing}: not found"),
        ("configs", ["configs", "--show", "nosuch"], "no built-in config 'nosuch'"),
        ("configs", ["warmup", tmp / "nosuch.toml"], "nosuch.toml"),
        ("configs", ["canopen", "eds", "--node", "99"], "--node 99: not a drive"),
        ("configs", ["keys", "--dir", tmp / "keys"], "keys already exist"),
        ("analyze", ["analyze", "modes", "nosuch"], "nosuch is neither a file nor"),
        ("campaign", ["campaign", tmp / "nosuch.toml"], "nosuch.toml"),
        ("identify", ["excite", "rrr3_pd", "--out", tmp / "x.toml"], "planar serial arm"),
        ("identify", ["identify", missing, "--config", "rig_inprocess"],
         f"{missing}: not found"),
    ]


@pytest.mark.parametrize("index", range(len(_user_errors(ROOT))),
                         ids=[f"{c[0]}-{'-'.join(map(str, c[1][:2]))}"
                              for c in _user_errors(ROOT)])
def test_each_familys_user_error_exits_2_with_one_line(index, tmp_path, runtime, capsys,
                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HILRIG_KEYS", str(tmp_path / "keys"))
    _, argv, cause = _user_errors(tmp_path)[index]
    if argv[0] == "keys":
        assert main(["keys", "--dir", str(tmp_path / "keys")]) == 0     # then again: refused
    before = sorted(tmp_path.rglob("*"))
    status, lines = _hil(argv, capsys)
    assert status == 2, lines
    assert len(lines) == 1 and lines[0].startswith("hil: ") and cause in lines[0], lines
    assert sorted(tmp_path.rglob("*")) == before                        # nothing written


@pytest.mark.parametrize("argv, line", [
    (["fault", "jam", "--joint", "1", "--connect", NOBODY, "--timeout", "0.2"],
     f"hil: no answer from an emulator at {NOBODY} within 0.2 s"),
    (["set", "controller.kp=80", "--connect", NOBODY],
     f"hil: no run takes live changes at {NOBODY} (is `hil run` or `hil control` running, "
     "with this --set-endpoint?)"),
    (["estop"], "hil: no running `hil control` of yours to e-stop (hil estop --connect "
                "ENDPOINT for one started elsewhere)"),
])
def test_a_run_that_does_not_answer_exits_1_with_one_line(argv, line, runtime, capsys):
    assert _hil(argv, capsys) == (1, [line])


# -- --set, declared once --------------------------------------------------------------------

def _leaves(command: argparse.ArgumentParser, path=()):
    """(path, parser) of every command of the ``hil`` parser, its options declared."""
    actions = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, command
        return
    for name, sub in actions[0].choices.items():
        declare = getattr(actions[0], "_undeclared", {}).pop(name, None)
        if declare is not None:
            declare(sub)
        yield from _leaves(sub, path + (name,))


def _with_set(tmp: Path) -> dict:
    """The command line of each command that takes --set, but for --set."""
    return {("sim",): ["sim", "rrr3_pd", "--out", tmp / "x.npz"],
            ("run",): ["run", "rrr3_pd"],
            ("emulate",): ["emulate", "rrr3_pd"],
            ("control",): ["control", "rrr3_pd"],
            ("canopen", "eds"): ["canopen", "eds", "--node", "1", "rrr3_pd"],
            ("analyze", "modes"): ["analyze", "modes", "rrr3_pd"],
            ("analyze", "stiffness"): ["analyze", "stiffness", "rrr3_pd"],
            ("analyze", "flex"): ["analyze", "flex", "rrr3_pd"],
            ("excite",): ["excite", "rrr3_pd", "--out", tmp / "x.toml"],
            ("identify",): ["identify", tmp / "x.npz", "--config", "rrr3_pd"]}


def test_every_command_that_takes_set_is_checked_below():
    taking = {path for path, command in _leaves(parser())
              if "--set" in command._option_string_actions}
    assert taking == set(_with_set(ROOT))


@pytest.mark.parametrize("item, line", [
    ("controller.kpp=80",
     "hil: config error: unknown key 'controller.kpp' (did you mean 'controller.kp'?)"),
    ("controller.kp", "hil: config error: --set expects key=value, got 'controller.kp'"),
])
def test_a_bad_set_is_the_same_line_on_every_command_that_takes_it(item, line, tmp_path,
                                                                   capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path, argv in _with_set(tmp_path).items():
        assert _hil(argv + ["--set", item], capsys) == (2, [line]), path
    assert not list(tmp_path.iterdir())                                  # nothing written


# -- one way to address a running run --------------------------------------------------------

ADDRESSED = {"fault": ["fault", "jam", "--joint", "1"], "estop": ["estop"],
             "set": ["set", "controller.kp=80"]}


@pytest.mark.parametrize("address, line", [
    (["--run", "nosuchrun"], "hil: config error: no running `hil run` or `hil control` "
                             "with run id 'nosuchrun' (yours: none running; hil estop --list)"),
    (["--run", "abc123", "--connect", NOBODY],
     f"hil: config error: run id abc123 and --connect {NOBODY}: give one of them"),
    (["--connect", NOBODY, "--timeout", "nan"],
     "hil: config error: --timeout: expected a finite number > 0 (s), got nan"),
    (["--connect", "garbage", "--timeout", "0.2"],
     "hil: config error: endpoint 'garbage': expected ipc://PATH or tcp://HOST:PORT"),
])
def test_fault_estop_and_set_take_the_same_run_address(address, line, runtime, capsys):
    for command, argv in ADDRESSED.items():
        assert _hil(argv + address, capsys) == (2, [line]), command
    if address[0] == "--run":                   # hil estop RUN_ID: the positional as --run
        assert _hil(["estop", *address[1:]], capsys) == (2, [line])


@pytest.mark.system
def test_a_control_run_is_found_by_its_id_by_set_and_estop_and_fault_says_why_not(
        tmp_path, runtime, capsys):
    """One `hil control`: `hil set --run ID` and `--connect` reach it, `hil fault --run ID`
    is refused with the reason (its plant is its emulator's), `hil estop --run ID`
    stops it (it used to take the id only as a positional)."""
    log = tmp_path / "ctl.mcap"
    ctl = subprocess.Popen(hil("control", "rig_inprocess", "--duration", "600", "--log",
                               str(log), *SHARED_CPU),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = ctl.stdout.readline()
        match = re.match(r"run ([0-9a-f]{6}): `hil estop \1`", first)
        assert match, first + (ctl.stderr.read() if ctl.poll() is not None else "")
        run_id = match.group(1)
        deadline = time.monotonic() + 120           # until its loop takes changes
        while True:
            status, lines = _hil(["set", "--run", run_id], capsys)
            if status == 0 or time.monotonic() > deadline or ctl.poll() is not None:
                break
            time.sleep(0.2)
        assert status == 0, lines
        status = main(["set", "--connect", f"ipc://{runtime}/hilrig/set-{run_id}",
                       "controller.kp=90"])
        out = capsys.readouterr().out
        assert status == 0 and out.startswith("controller.kp = [90.0, 90.0, 90.0]: taken at "
                                              "tick "), out
        assert _hil(["fault", "jam", "--joint", "1", "--run", run_id], capsys) == (2, [
            f"hil: config error: run {run_id} is a `hil control`: its plant is behind a link, "
            "so faults go to its emulator (--connect ENDPOINT, the emulator's --bind)"])
        assert main(["estop", "--run", run_id]) == 0
        assert capsys.readouterr().out.startswith(f"e-stop: run {run_id} stopped its drives "
                                                  "at tick ")
        ctl.communicate(timeout=60)
        assert ctl.returncode == 130
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.communicate()


@pytest.mark.system
def test_hil_control_says_why_its_run_ended_once(tmp_path, runtime):
    """`hil control` with no emulator at --connect printed the reason twice on stderr (the
    loop's log line, then the command's own); once now."""
    proc = subprocess.run(hil("control", "rig_zmq", "--connect", NOBODY, "--set",
                              "link.timeout=0.5", "--log", str(tmp_path / "c.mcap")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_RUNTIME_DIR": runtime})
    assert proc.returncode == 1
    reason = f"no emulator answered at {NOBODY} (is `hil emulate` running there?)"
    assert _lines(proc.stderr) == [f"hil: {reason}"]
    assert f"ended: {reason}" in proc.stdout


ROOTLESS = "/nonexistent-hilrig-h3/dir"     # a folder hil must not make at the root


def _bad_outputs(tmp: Path) -> list:
    """(argv, what the one line says) for every command's output option."""
    mcap, spec = tmp / "run.mcap", tmp / "spec.toml"
    return [
        (["sim", "rrr3_pd", "--duration", "0.01", "--out", tmp / "x.txt"],
         f"--out {tmp / 'x.txt'}: expected a file ending in .npz, got .txt"),
        (["sim", "rrr3_pd", "--duration", "0.01", "--out", f"{ROOTLESS}/x.npz"],
         f"--out {ROOTLESS}/x.npz: folder {ROOTLESS} does not exist (hil makes no folder "
         "at the filesystem root)"),
        (["sim", "rrr3_pd", "--out", tmp / "x.npz", "--plot", f"{ROOTLESS}/x.png"],
         f"--plot {ROOTLESS}/x.png: folder {ROOTLESS} does not exist"),
        (["sim", "rrr3_pd", "--out", tmp], f"--out {tmp}: expected a file ending in .npz"),
        (["run", "rrr3_pd", "--log", f"{ROOTLESS}/x.mcap"], f"--log {ROOTLESS}/x.mcap: folder"),
        (["control", "rig_inprocess", "--log", f"{ROOTLESS}/x.mcap"],
         f"--log {ROOTLESS}/x.mcap: folder"),
        (["log", "export", mcap, "--out", tmp / "x.txt"], "expected a file ending in .npz"),
        (["log", "export", mcap, "--out", f"{ROOTLESS}/x.npz"], "at the filesystem root"),
        (["log", "repair", mcap, "--out", tmp / "x.npz"], "expected a file ending in .mcap"),
        (["plot", mcap, "--out", f"{ROOTLESS}/x.png"], "at the filesystem root"),
        (["analyze", "stiffness", "rrr3_pd", "--map", "--out", tmp / "m.txt"],
         "expected a file ending in .png"),
        (["canopen", "eds", "--node", "1", "-o", f"{ROOTLESS}/x.eds"],
         "at the filesystem root"),
        (["campaign", spec, "--out", ROOTLESS], f"--out {ROOTLESS}: folder {ROOTLESS} does "
                                                "not exist"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_outputs(ROOT))))
def test_every_output_option_is_checked_before_any_work(index, tmp_path, runtime, capsys,
                                                        monkeypatch):
    """`hil sim --out x.txt` wrote x.txt.npz and `--out /nonexistent/dir/x.npz` made folders
    at the filesystem root; every command's output option is refused with one line now,
    before its work, and nothing is written anywhere."""
    monkeypatch.chdir(tmp_path)
    argv, cause = _bad_outputs(tmp_path)[index]
    before = sorted(tmp_path.rglob("*"))
    status, lines = _hil(argv, capsys)
    assert status == 2, lines
    assert len(lines) == 1 and lines[0].startswith("hil: config error: ") and \
        cause in lines[0], lines
    assert sorted(tmp_path.rglob("*")) == before
    assert not Path(ROOTLESS).parent.exists()


@pytest.mark.parametrize("argv, key", [
    (["run", "rrr3_pd", "--set", "controler.kp=5"], "'controler' (did you mean 'controller'?)"),
    (["sim", "rrr3_pd", "--set", "sim.durration=1", "--out", "x.npz"],
     "'sim.durration' (did you mean 'sim.duration'?)"),
    (["control", "rig_zmq", "--set", "safety.max_comand=3"],
     "'safety.max_comand' (did you mean 'safety.max_command'?)"),
    (["emulate", "rig_zmq", "--set", "emulator.mdoe=free"],
     "'emulator.mdoe' (did you mean 'emulator.mode'?)"),
])
@pytest.mark.system
def test_a_misspelt_key_is_one_line_before_any_kernel_compiles(argv, key, tmp_path):
    """A misspelt --set key compiled kernels for 23 s (cold cache) before its one line:
    now nothing is compiled: the kernel cache stays empty (from 8-11 s to 1 s on a warm
    cache, 16-25 s to 1 s on a cold one, on the 2-core machine)."""
    cache = tmp_path / "cache"
    proc = subprocess.run(hil(*argv), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HILRIG_CACHE_DIR": str(cache)})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"hil: config error: unknown key {key}"]
    assert not cache.exists() or not any(cache.rglob("*.nbi"))


@pytest.mark.system
def test_library_messages_do_not_speak_as_hil(tmp_path):
    """The Foxglove SDK's "Started server", "Shutting down" and "Shutdown complete" were
    printed as `hil: ...` lines: only hilrig's own messages carry the prefix now, another
    library's warnings carry its name (cli.main.log_to_stderr)."""
    import socket

    with socket.socket() as probe:               # a free port for the live view
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.run(hil("run", "rrr3_pd", "--duration", "0.2", "--no-plot", "--live",
                              f"127.0.0.1:{port}", "--set-endpoint", "", "--log",
                              str(tmp_path / "run.mcap")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc.stderr)
    assert lines[0] == (f"hil: live view: foxglove ws://127.0.0.1:{port} "
                        "(Foxglove: Open connection, Foxglove WebSocket)")
    assert len(lines) == 2 and re.fullmatch(
        r"hil: live view: to change parameters from Foxglove, set hil\.token to [0-9a-f]{8} "
        r"in its parameter panel first", lines[1]), lines
    probe = subprocess.run(
        [*hil()[:1], "-c", "import logging; from hilrig.cli.main import log_to_stderr; "
                           "log_to_stderr(); logging.getLogger('canopen').info('chatter'); "
                           "logging.getLogger('canopen').warning('bus off'); "
                           "logging.getLogger('hil.loop').info('a line of ours')"],
        capture_output=True, text=True, timeout=60)
    assert probe.stderr.splitlines() == ["canopen: warning: bus off", "hil: a line of ours"]


class _FakeController(threading.Thread):
    """A `hil control`'s e-stop endpoint: answers an ESTOP with ESTOP_ACK at ``tick``,
    once ``answer_after`` (an Event) is set; sets ``asked`` when the ESTOP arrives."""

    def __init__(self, endpoint: str, tick: int, answer_after: threading.Event):
        super().__init__(daemon=True)
        import zmq
        from hilrig.drivers import endpoint as endpoints

        self.endpoint, self.tick, self.answer_after = endpoint, tick, answer_after
        self.asked = threading.Event()
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        endpoints.bind(self.socket, endpoint, "e-stop")

    def run(self):
        from hilrig.drivers.wire import MessageType, encode

        if self.socket.poll(30000):
            peer, _ = self.socket.recv_multipart()
            self.asked.set()
            if self.answer_after.wait(30):
                self.socket.send_multipart([peer, encode(MessageType.ESTOP_ACK, 0, 0.0,
                                                         [self.tick])])

    def close(self):
        from hilrig.drivers import endpoint as endpoints

        self.join(35)
        endpoints.close(self.socket, self.endpoint)


def test_a_bare_hil_estop_stops_the_runs_at_once(runtime, capsys):
    """`hil estop` stopped runs one after another, so a run that did not answer delayed a
    healthy run's stop by the whole timeout. Now all are asked at once: the first run in
    the list answers only once the second one was asked, which it never was before its
    own timeout when they went one by one."""
    from hilrig.remote import runs

    folder = runs.runtime_dir()
    healthy = _FakeController(f"ipc://{folder}/estop-ffffff", 22, threading.Event())
    healthy.answer_after.set()
    slow = _FakeController(f"ipc://{folder}/estop-aaaaaa", 11, healthy.asked)
    records = [runs.register("aaaaaa", slow.endpoint, "slow.toml"),
               runs.register("ffffff", healthy.endpoint, "healthy.toml")]
    for fake in (slow, healthy):
        fake.start()
    try:
        status = main(["estop", "--timeout", "5"])
        out = capsys.readouterr().out
    finally:
        for record in records:
            runs.unregister(record)
        for fake in (slow, healthy):
            fake.close()
    assert status == 0
    assert out.splitlines() == ["e-stop: run aaaaaa stopped its drives at tick 11",
                                "e-stop: run ffffff stopped its drives at tick 22"]


SESSION_HOLDER = """
import json, subprocess, sys
from hilrig.remote import runs
record = runs.register("abc123", "", "held.toml", sys.argv[1])      # a `hil run`'s record
same = [subprocess.run(json.loads(argv), capture_output=True, text=True, timeout=120)
        for argv in sys.argv[2:]]                    # bare commands of the same login session
print(json.dumps({"session": runs.login_session(),
                  "same": [[done.returncode, done.stderr] for done in same]}), flush=True)
sys.stdin.read()                                     # the run lives until the test is done
runs.unregister(record)
"""


def _in_new_login_session(argv: list) -> list:
    """``argv`` in a login session of its own: writing /proc/self/loginuid gives the
    writing process a new audit session id, as a login does."""
    return ["sh", "-c", 'echo 0 > /proc/self/loginuid && exec "$@"', "sh", *argv]


def test_bare_set_and_fault_pick_only_a_run_of_their_own_login_session(runtime):
    """Several people logged in under one uid (root on a shared rig PC): a bare `hil set`
    or `hil fault` took a colleague's only run. It now picks a run of its own login
    session only, and names another login's run without touching it."""
    probe = subprocess.run(_in_new_login_session(["cat", "/proc/self/sessionid"]),
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this kernel or user cannot open login sessions: {probe.stderr.strip()}")
    endpoint = f"ipc://{runtime}/set-abc123"         # nothing answers there
    bare = [hil("set", "--timeout", "0.5", "controller.kp=1"),
            hil("fault", "jam", "--joint", "1", "--timeout", "0.5")]
    holder = subprocess.Popen(_in_new_login_session(
        [sys.executable, "-c", SESSION_HOLDER, endpoint, *map(json.dumps, bare)]),
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        held = json.loads(holder.stdout.readline() or "null") or holder.communicate()
        others = [subprocess.run(_in_new_login_session(argv), cwd=ROOT, capture_output=True,
                                 text=True, timeout=120) for argv in bare]
    finally:
        holder.communicate("", timeout=60)
    for code, err in held["same"]:       # its own login's bare command found it (no answer)
        assert code == 1 and len(_lines(err)) == 1 and endpoint in err, err
    for done, what in zip(others, ("live changes", "live faults")):
        assert done.returncode == 2, done.stderr
        lines = _lines(done.stderr)
        assert len(lines) == 1 and re.fullmatch(
            rf"hil: config error: no run of this login session \(session (\d+)\) takes {what}; "
            rf"another login's: abc123 \(pid {holder.pid}, held.toml, login session "
            rf"{held['session']}\): name it with --run if it is yours to change",
            lines[0]), done.stderr
