"""``hil run``'s loop compiled in a second process while the first one sets up.

numba compiles in one thread of one process at a time. When ``hil run`` has kernels to
compile (an empty cache, a new source version, a plant family not run before), it spends
about a third of its start-up on the set-up's kernels (building the plant, correcting its
initial state onto its constraints, the law, the derived diagnostics) and the rest on the
loop: rt.realtime.run_loop with everything it calls, and the correction worker.
``LoopAhead`` then starts this module as a second process (``python -m
hilrig.rt.loop_ahead``) at the first kernel the first process compiles. The second builds
the same session without that set-up (``Session(loop_only=True)``), compiles its loop
into the shared cache (``Session.compile_loop``: the same kernels, for the same argument
types, never run) and ends. The first process sets up meanwhile, and compiles the parts
of the loop that the second one's typing reaches late (``Session._compile_beside_ahead``:
the tick's law call and generic integrators, the fault table's kernels, the correction
worker). Its warm-up then waits for the second, and loads the loop from the cache
(jit.compilation: both processes key the cache by the same fingerprint, save under a lock,
and claim each kernel they compile, so that the other waits for it and loads it rather
than compiling it again). On a 2-core machine the first tick comes in about half the
time of one process alone (docs/MEASURED.md, "Start-up"). A run that compiles nothing
starts no second process.

What the second process compiles is what the first would have: if it fails (one line on
stderr says why), the first compiles the loop itself, as without it. It prints its
kernels as the first does, marked as its own, ignores Ctrl-C (the first process handles
it and stops the second) and ends with the first (``_end_with_parent``). The config
goes to it as JSON on its stdin.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hilrig.jit import compilation
from hilrig.schema import Config
from hilrig.settings.live_changes import raw_config

PARENT_POLL = 0.2             # s between the second process's checks of the first
LABEL = "the loop, in a second process"
SWITCH = "HILRIG_LOOP_AHEAD"  # "0": no second process, the loop compiles in the first


class LoopAhead:
    """The second process compiling the loop of a config's session (module docstring):
    armed when made, started at the first kernel this process compiles, until ``wait``
    or ``stop``."""

    def __init__(self, cfg: Config, fast: bool):
        """For a session of ``cfg`` (``fast``: hil run --fast)."""
        self.argv = [sys.executable, "-m", "hilrig.rt.loop_ahead", str(os.getpid())] \
            + (["--fast"] if fast else [])
        self.config = json.dumps(raw_config(cfg.to_dict()))
        self.process: subprocess.Popen | None = None
        self._armed = True
        self._lock = threading.Lock()
        compilation.progress.on_compile.append(self._on_compile)

    @classmethod
    def arm(cls, cfg: Config, fast: bool) -> "LoopAhead | None":
        """A LoopAhead for a session of ``cfg``; None when $HILRIG_LOOP_AHEAD is "0"."""
        return None if os.environ.get(SWITCH, "1") == "0" else cls(cfg, fast)

    def _on_compile(self) -> None:
        """A kernel starts compiling in this process: start the second one (once)."""
        with self._lock:
            if not self._armed or self.process is not None:
                return
            self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, text=True)
        try:
            self.process.stdin.write(self.config)
            self.process.stdin.close()
        except OSError:             # it ended already (and said why)
            pass

    def _disarm(self) -> None:
        with self._lock:
            self._armed = False
        if self._on_compile in compilation.progress.on_compile:
            compilation.progress.on_compile.remove(self._on_compile)

    def running(self) -> bool:
        """Whether the second process was started and has not ended yet."""
        return self.process is not None and self.process.poll() is None

    def wait(self) -> None:
        """Start no second process from now on, and wait until a started one has ended
        (saying so on stderr, with its pid, if it still runs)."""
        self._disarm()
        if self.process is None:
            return
        if self.process.poll() is None:
            print(f"hilrig: waiting for {LABEL} (pid {self.process.pid})", file=sys.stderr,
                  flush=True)
        self.process.wait()

    def stop(self) -> None:
        """Start no second process from now on, and end a started one that still runs
        (the run ended before its warm-up)."""
        self._disarm()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _end_with_parent(parent: int) -> None:
    """End this process (exit 1) once ``parent``, the first process, has ended: a daemon
    thread checks every PARENT_POLL s whether this process was handed to another parent.
    (Not PR_SET_PDEATHSIG, which fires when the parent's *thread* that started this one
    ends: a start-up thread of the first process, soon.)"""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL)
        os._exit(1)

    threading.Thread(target=watch, name="hil-loop-ahead-parent", daemon=True).start()


def main(argv: list[str]) -> int:
    """The second process: ``PARENT_PID [--fast]``, the config as JSON on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent(int(argv[0]))
    from hilrig.rt.session import Session
    from hilrig.settings.config import resolve

    compilation.progress.label = LABEL
    try:
        cfg = resolve(json.loads(sys.stdin.read()))
        with tempfile.TemporaryDirectory(prefix="hil-loop-ahead-") as scratch:
            session = Session(cfg, Path(scratch) / "loop.mcap", fast="--fast" in argv,
                              loop_only=True)
            try:
                session.compile_loop()
            finally:
                session.telemetry.close({"reason": "compiled the loop"})
    except Exception as exc:     # the first process compiles the loop itself
        print(f"hilrig: {LABEL}: not compiled ({type(exc).__name__}: {exc}); the run "
              f"compiles it itself", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
