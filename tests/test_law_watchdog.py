"""A controller law that never returns (issue 28, item 9): the law watchdog
(rt.law_watchdog) stops the run from outside the law's thread. `hil control` safe-stops
the link from the watchdog's thread (the emulator hears BYE, the CiA 402 drives a quick
stop and disable voltage), `hil estop`, SIGINT and SIGTERM reach a run stuck in its law,
and `hil run` ends with the line; each with exit 1 and the log closed with every row
before the stuck tick. The law is tests/user_parts.py's ``stuck_after_a_tenth`` (a PD
that loops for ever from t = 0.1 s), run as a user runs it: from their folder.

Before the watchdog: `hil control` ran to no end (only SIGKILL stopped it; the emulator
went safe on its own command timeout), and ignored `hil estop`, SIGINT and SIGTERM."""
import re
import shutil
import signal
import subprocess
import time
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest
from hilrig.telemetry.logfile import read_log
from rt_helpers import ROOT, hil, read_complete, stderr_lines, wait_for

TESTS = Path(__file__).parent
SILENCE = "[emulator]\ncommand_timeout = 600.0"    # the emulator's watchdog out of the way
# The pair lenient with a busy host (the subject is the law's watchdog, not the link's
# timing): normal scheduling (a law stuck at SCHED_FIFO holds a whole core of the suite's
# two), every tick run however late (an overrun's skip would make tick 101 the stuck one),
# a lost link only after 2 s (the [link] and [loop] tables); with [safety]'s
# LENIENT_WATCHDOG.
LENIENT_PAIR = ('[link]\ntype = "zmq"\ntimeout = 2.0\n'
                '[loop]\nfifo_priority = 0\nspin = 0\noverrun = "catch_up"')
LENIENT_WATCHDOG = "watchdog_ticks = 1000"
STUCK_TICK = 100            # t = 0.1 s at 1 kHz: the first tick whose law never returns
LAW = '[controller]\nlaw = "user_parts:stuck_after_a_tenth"\nparams = [30.0, 3.0, 0.3]\n'
ARM = '[plant]\nmodel = "serial_arm"\ndrive = "voltage"\ndamping = [15.0, 15.0, 15.0]\n' + LAW


def user_folder(tmp_path: Path, *lines: str) -> Path:
    """tmp_path with user_parts.py and ``run.toml``: the arm under the stuck law, 1 kHz."""
    shutil.copy(TESTS / "user_parts.py", tmp_path)
    (tmp_path / "run.toml").write_text("[sim]\nduration = 5.0\ndt = 0.001\n" + ARM
                                       + "\n".join(lines) + "\n")
    return tmp_path


def _last_tick(log: Path) -> int:
    """The last tick a running loop's log holds so far (-1 while none is readable)."""
    if not log.exists():
        return -1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ticks = read_log(log)[0].get("tick", ())
        except Exception:      # noqa: BLE001 - a log being written: not readable yet
            return -1
    return int(ticks[-1]) if len(ticks) else -1


class Emulator:
    """`hil emulate run.toml` in the user's folder, ready once it printed its banner."""

    def __init__(self, folder: Path, *args: str):
        self.proc = subprocess.Popen(hil("emulate", "run.toml", *args), cwd=folder,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        banner = self.proc.stdout.readline()
        if not banner.startswith("emulating"):
            self.proc.kill()
            raise AssertionError(banner + self.proc.communicate()[1])

    def stop(self) -> tuple[str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.communicate(timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def control(folder: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(hil("control", "run.toml", "--log", "ctl.mcap", *args), cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ended(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"still running after {timeout} s: {out}{err}") from None


def _closed_log(folder: Path, reason: str, stuck: int = STUCK_TICK):
    """The controller's log: complete, its rows up to the one before the ``stuck`` tick
    (`hil control` skips the ticks an overrun missed: no rows), its summary's reason
    ``reason``."""
    arrays, events, _, summary = read_complete(folder / "ctl.mcap")
    assert arrays["tick"][0] == 0 and arrays["tick"][-1] == stuck - 1
    assert summary["reason"] == reason
    assert events[-1]["kind"] == "stop" and events[-1]["reason"] == reason
    return arrays


@pytest.mark.system
def test_hil_control_safe_stops_the_emulator_when_the_law_never_returns(tmp_path):
    """The emulator's own watchdog (emulator.command_timeout, 20 ms by default, which
    would go safe first) set beyond the law watchdog's 250 ms: the BYE stops it."""
    folder = user_folder(tmp_path, LENIENT_PAIR, SILENCE, "[safety]\n" + LENIENT_WATCHDOG)
    ep = f"ipc:///tmp/hil-law-{uuid.uuid4().hex[:8]}"
    emu = Emulator(folder, "--bind", ep, "--log", "emu.mcap")
    try:
        ctl = control(folder, "--connect", ep)
        out, err = _ended(ctl)
        emu_out, emu_err = emu.stop()
    finally:
        emu.kill()
    reason = "controller law did not return within 250 ms at tick 100; drives stopped"
    assert ctl.returncode == 1, out + err
    assert [line for line in stderr_lines(err) if "SCHED_FIFO" not in line] == \
        [f"hil: {reason}"]
    assert f"ended: {reason}" in out
    _closed_log(folder, reason)
    # the emulator heard the BYE from the watchdog's thread, not its own command timeout
    arrays, events, _, _ = read_complete(folder / "emu.mcap")
    safe = [e for e in events if e["kind"] == "safe_state"]
    assert safe and safe[0]["reason"] == "controller said BYE", events
    after = arrays["tick"] >= safe[0]["tick"]
    assert after.sum() > 10 and np.all(arrays["u"][after] == 0.0)


@pytest.mark.system
@pytest.mark.parametrize("stop", ["estop", "SIGINT", "SIGTERM"])
def test_a_stop_reaches_a_hil_control_stuck_in_its_law(tmp_path, stop):
    """With no time bound to speak of (safety.tick_timeout = 600 s), `hil estop`, Ctrl-C or
    SIGTERM to the stuck run stops it at once: before, each waited for the law."""
    folder = user_folder(tmp_path, LENIENT_PAIR, SILENCE,
                         "[safety]\ntick_timeout = 600.0\n" + LENIENT_WATCHDOG)
    ep = f"ipc:///tmp/hil-law-{uuid.uuid4().hex[:8]}"
    estop = f"ipc:///tmp/hil-estop-{uuid.uuid4().hex[:8]}"
    emu = Emulator(folder, "--bind", ep)
    try:
        ctl = control(folder, "--connect", ep, "--estop-endpoint", estop)
        # the tick before the stuck one logged: the law is in its endless loop
        wait_for(lambda: _last_tick(folder / "ctl.mcap") == STUCK_TICK - 1
                 or ctl.poll() is not None,
                 300, "the controller's rows")
        assert ctl.poll() is None, ctl.communicate()
        sent = time.monotonic()
        if stop == "estop":
            done = subprocess.run(hil("estop", "--connect", estop), cwd=folder,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"stopped its drives at tick {STUCK_TICK}" in done.stdout
        else:
            ctl.send_signal(getattr(signal, stop))
        out, err = _ended(ctl)
        took = time.monotonic() - sent
        emu_err = emu.stop()[1]
    finally:
        emu.kill()
    assert ctl.returncode == 1, out + err
    cause = "e-stop from the CLI (hil estop, category 0)" if stop == "estop" else stop
    lines = [line for line in stderr_lines(err) if "SCHED_FIFO" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"hil: {cause}: the controller law had "
                                                   "not returned for "), err
    assert lines[0].endswith(f" ms at tick {STUCK_TICK}; drives stopped")
    assert took < 60
    _closed_log(folder, lines[0][len("hil: "):])
    assert [line for line in emu_err.splitlines() if "safe state" in line][:1] == \
        ["hil: safe state (zero input): controller said BYE"], emu_err


@pytest.mark.system
def test_a_stop_ends_a_stuck_hil_control_whose_output_is_gone(tmp_path):
    """SIGTERM to a `hil control` stuck in its law whose stdout nobody reads any more (its
    terminal closed, the script that read it gone): the summary's print failed in the
    watchdog's thread, which died before ending the process, and the process stayed in
    the law for good. The watchdog's end now ends the process whatever fails in it."""
    folder = user_folder(tmp_path, LENIENT_PAIR, SILENCE,
                         "[safety]\ntick_timeout = 600.0\n" + LENIENT_WATCHDOG)
    ep = f"ipc:///tmp/hil-law-{uuid.uuid4().hex[:8]}"
    emu = Emulator(folder, "--bind", ep)
    try:
        ctl = control(folder, "--connect", ep)
        wait_for(lambda: _last_tick(folder / "ctl.mcap") == STUCK_TICK - 1
                 or ctl.poll() is not None,
                 300, "the controller's rows")
        assert ctl.poll() is None, ctl.communicate()
        ctl.stdout.close()                      # its reader is gone
        ctl.send_signal(signal.SIGTERM)
        try:
            code = ctl.wait(timeout=120)
        except subprocess.TimeoutExpired:
            ctl.kill()
            raise AssertionError("still stuck in its law 120 s after SIGTERM") from None
        err = ctl.stderr.read()
    finally:
        emu.kill()
    assert code == 1, err
    standing = re.search(r"had not returned for (\d+) ms", err)
    assert standing, err
    _closed_log(folder, f"SIGTERM: the controller law had not returned for {standing[1]} ms "
                        f"at tick {STUCK_TICK}; drives stopped")


@pytest.mark.system
def test_hil_control_over_canopen_disables_the_drives_when_the_law_never_returns(tmp_path):
    """The CiA 402 drives of `hil emulate` (hilrig_zmq bus between the processes) get the
    quick stop and disable voltage from the watchdog's thread (before: no SYNC came after
    the stuck tick's, and the drives kept its command until their heartbeat timeout)."""
    channel = f"ipc:///tmp/hil-law-can-{uuid.uuid4().hex[:8]}"
    folder = user_folder(tmp_path)
    rig = (ROOT / "configs" / "rig_canopen.toml").read_text()     # 500 Hz: stuck at tick 50
    rig = re.sub(r"\[controller\]\n.*?\n\n", LAW + "\n", rig, count=1, flags=re.S)
    rig = re.sub(r"channel = .*", f'channel = "{channel}"', rig, count=1)
    # a busy host misses TPDOs for more than the shipped 8 cycles, and a controller's
    # heartbeat for more than 0.3 s at bring-up (issue 28, item 7: not this test's
    # subject); the 50 cycles before the stuck tick must not end the run
    rig = re.sub(r"max_missed = .*", "max_missed = 100", rig, count=1)
    rig = re.sub(r"heartbeat_timeout = .*", "heartbeat_timeout = 5.0", rig, count=1)
    (folder / "run.toml").write_text(rig)
    emu = Emulator(folder, "--log", "emu.mcap", "--duration", "600")
    try:
        ctl = control(folder)
        out, err = _ended(ctl)
        emu.stop()
    finally:
        emu.kill()
    reason = "controller law did not return within 250 ms at tick 50; drives stopped"
    assert ctl.returncode == 1, out + err
    assert f"hil: {reason}" in stderr_lines(err), err
    rows = _closed_log(folder, reason, 50)
    arrays = read_complete(folder / "emu.mcap")[0]
    u = np.abs(arrays["u"]).max(axis=1)
    # the drives step the plant at each SYNC: one per tick the loop ran (its rows, ticks
    # 0..49 less any an overrun skipped, and tick 50, whose read sent one before its law
    # got stuck; the first before any command), then the watchdog's quick stop (the
    # drives' own ramp down) and disable voltage, each with a SYNC
    ran = len(rows["tick"]) + 1
    assert len(u) == ran + 2
    # each row's command drives the plant from the next SYNC on; the loop holds zero
    # until its first fresh measurement (a busy host's first TPDOs may come late)
    commanded = np.abs(rows["u"]).max(axis=1) > 0.0
    assert commanded[-10:].all(), rows["u"]
    assert np.array_equal(u[1:ran] > 0.5, commanded) and np.all(u[1:ran][~commanded] == 0.0)
    assert u[ran] < u[ran - 1] and u[ran + 1] == 0.0


@pytest.mark.system
def test_hil_run_ends_a_law_that_never_returns_in_one_line(tmp_path):
    folder = user_folder(tmp_path)
    done = subprocess.run(hil("run", "run.toml", "--log", "ctl.mcap", "--no-plot"), cwd=folder,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in stderr_lines(done.stderr) if "SCHED_FIFO" not in line]
    # in the rehearsal before the deadline (loop.rehearse), unless the tick was too late
    # for one
    assert len(lines) == 1 and re.fullmatch(
        r"hil: controller law did not return within 250 ms at tick 100"
        r"( \(in its rehearsal, loop\.rehearse\))?; run stopped", lines[0]), done.stderr
    reason = lines[0][len("hil: "):]
    assert f"ended: {reason}" in done.stdout
    _closed_log(folder, reason)
    # without the rehearsal: inside the tick's own call of the law
    done = subprocess.run(hil("run", "run.toml", "--log", "ctl.mcap", "--no-plot", "--set",
                              "loop.rehearse=0", "--set", "safety.tick_timeout=0.1"),
                          cwd=folder, capture_output=True, text=True, timeout=900)
    reason = "controller law did not return within 100 ms at tick 100; run stopped"
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"hil: {reason}" in stderr_lines(done.stderr), done.stderr
    _closed_log(folder, reason)


@pytest.mark.system
def test_ctrl_c_reaches_a_hil_run_stuck_in_its_law(tmp_path):
    folder = user_folder(tmp_path, "[safety]\ntick_timeout = 600.0")
    run = subprocess.Popen(hil("run", "run.toml", "--log", "ctl.mcap", "--no-plot"),
                           cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    # the row of tick 98 logged: the loop has counted tick 99 done (`hil run` releases a
    # tick's row to the writer once the next tick is done: its events may come after it)
    wait_for(lambda: _last_tick(folder / "ctl.mcap") == STUCK_TICK - 2
             or run.poll() is not None,
             300, "the run's rows")
    assert run.poll() is None, run.communicate()
    run.send_signal(signal.SIGINT)
    out, err = _ended(run)
    assert run.returncode == 1, out + err
    lines = [line for line in stderr_lines(err) if "SCHED_FIFO" not in line]
    assert len(lines) == 1 and lines[0].startswith(
        "hil: interrupted (Ctrl-C or SIGTERM), but the controller law had not returned for "), err
    assert re.fullmatch(r".* ms at tick 100( \(in its rehearsal, loop\.rehearse\))?; run stopped",
                        lines[0]), lines[0]
    _closed_log(folder, lines[0][len("hil: "):])


@pytest.mark.system
@pytest.mark.parametrize("command", ["run", "control"])
def test_a_law_that_never_returns_from_its_first_call_is_refused_at_load(tmp_path, command):
    """A law stuck from t = 0 on held `hil run` and `hil control` in the law's trial call at
    load, silently, until Ctrl-C: it is refused in one line once the trial has spent its
    CPU time (controllers.interface.TRIAL_CPU_S), before anything compiles or moves."""
    folder = user_folder(tmp_path)
    toml = folder / "run.toml"
    toml.write_text(toml.read_text().replace("stuck_after_a_tenth", "stuck_from_the_start"))
    done = subprocess.run(hil(command, "run.toml", "--no-plot") if command == "run"
                          else hil(command, "run.toml"),
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert stderr_lines(done.stderr) == [
        "hil: config error: controller.law: 'user_parts:stuck_from_the_start' did not return "
        "within 5 s of CPU on a trial call in Python (t = 0, pos, vel and cur zero): does it "
        "loop for ever?"], done.stderr
