"""Helpers for the real-time tests: the emulator as a real subprocess, log reading."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

from hilrig.telemetry.logfile import IncompleteLogWarning, read_log

ROOT = Path(__file__).resolve().parent.parent


# For a paced run whose subject is not its timing: normal scheduling, no busy-wait before
# each deadline. At SCHED_FIFO a paced 3RRR run (its loop spinning half of each period, its
# correction worker polling every 0.1 ms) holds most of a core, so on a 2-core machine the
# suite's other worker, and the test's own `hil set` or `hil fault`, wait seconds for CPU.
SHARED_CPU = ("--set", "loop.fifo_priority=0", "--set", "loop.spin=0")

# A paced `hil control` of `hil emulate` whose subject is the stop, not the timing: the
# controller at normal scheduling (SHARED_CPU) with a lenient watchdog, the emulator lenient
# with a late command, so that two such pairs side by side (the suite's workers) on a
# 2-core host keep their link; bench/bench_rigs.py measures the rigs as shipped.
LENIENT_CONTROL = (*SHARED_CPU, "--set", "safety.watchdog_ticks=1000", "--set", "link.timeout=2.0")
LENIENT_EMULATOR = ("--set", "emulator.command_timeout=1.0")


def hil(*args: str) -> list:
    return [sys.executable, "-m", "hilrig.cli", *args]


def set_args(items) -> list[str]:
    """``--set`` before each of ``items`` (key=value strings): a command line's options."""
    return [a for s in items for a in ("--set", s)]


def hil_ok(command: list[str], cwd: Path) -> str:
    """``hil COMMAND`` in ``cwd``, which must exit 0 (else its output's tail is the
    failure); its stdout."""
    done = subprocess.run(hil(*command), cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def control_against_emulator(config: Path, log: Path, link: list, hidden: list,
                             ready: Path) -> None:
    """`hil emulate CONFIG` with the ``link`` and ``hidden`` settings (those on the
    emulator's side only: the rig's truth), then, once ``ready`` exists (its drives' bus
    or port), `hil control CONFIG` with the ``link`` settings, its log in ``log``."""
    emu = subprocess.Popen(hil("emulate", str(config), *set_args(link + hidden)),
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = emu.stdout.readline()
        assert banner.startswith("emulating"), banner + emu.stderr.read()
        wait_for(ready.exists, 120, "the emulated drives")
        hil_ok(["control", str(config), *set_args(link), "--log", str(log)], log.parent)
    finally:
        emu.terminate()
        emu.communicate(timeout=30)


def endpoint(tmp_path: Path) -> str:
    """A fresh ipc endpoint (short path: ipc paths are limited to ~100 bytes)."""
    return f"ipc:///tmp/hil-test-{uuid.uuid4().hex[:10]}"


class EmulatorProcess:
    """``hil emulate`` in a subprocess; ready once it printed its banner.

    ``EmulatorProcess.reap()`` kills any still running (a test that failed midway).
    """

    running: list = []

    def __init__(self, config: str, endpoint: str | None, log: Path | None, *extra: str,
                 **popen):
        """``endpoint``: --bind (None: the config's); ``log``: --log (None: no log);
        ``popen``: more keyword arguments of subprocess.Popen (env, preexec_fn)."""
        self.log = log
        options = (["--bind", endpoint] if endpoint else []) + (["--log", str(log)] if log else [])
        self.proc = subprocess.Popen(
            hil("emulate", str(ROOT / "configs" / f"{config}.toml"), *options, *extra),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
        EmulatorProcess.running.append(self)
        line = self.ready = self.proc.stdout.readline()
        if not line.startswith("emulating"):
            self.proc.kill()
            raise RuntimeError(f"emulator did not start: {line}{self.proc.stderr.read()}")

    @classmethod
    def reap(cls) -> None:
        for emulator in cls.running:
            if emulator.proc.poll() is None:
                emulator.proc.kill()
                emulator.proc.communicate()
        cls.running.clear()

    def stop(self, sig=signal.SIGINT, timeout: float = 30.0) -> tuple[str, str]:
        """Stop it (Ctrl-C by default) and return its stdout and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return out, err


def stderr_lines(stderr: str) -> list:
    """The non-empty lines of a ``hil`` stderr, without the numba cache's progress lines
    (``hilrig: compiling ...``, ``hilrig: compiled ...``) of a cold kernel cache."""
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith("hilrig: compil")]


def read_complete(path: Path):
    """read_log, failing if the log was not finished properly."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteLogWarning)
        return read_log(path)


def wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def ticks_logged(log: Path) -> int:
    """The rows a running controller's log holds so far (0 while it has none)."""
    if not log.exists():
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return len(read_log(log)[0].get("tick", ()))
        except Exception:      # noqa: BLE001 - a log being written: not readable yet
            return 0


def estop_running_controller(estop: str, ctl: subprocess.Popen, *options: str):
    """``hil estop --connect estop *options`` to the running ``hil control`` ``ctl``; its
    completed process. A busy host may take seconds to start the client and to schedule
    its answer: 10 s for it (its time is not these tests' subject). A refusal names
    whether the controller had already ended, and its last words."""
    stop = subprocess.run(hil("estop", "--connect", estop, "--timeout", "10", *options),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    if stop.returncode != 0:
        if ctl.poll() is None:
            state = "the controller still running"
        else:
            state = f"the controller had ended (exit {ctl.returncode}): {ctl.stderr.read()[-600:]}"
        raise AssertionError(f"{stop.stderr.strip()} ({state})")
    return stop
