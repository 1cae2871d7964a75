"""``hil run``'s loop compiled in a second process while the first one sets up.

numba compiles in one thread of one process at a time. On a kernel cache that holds no
loop yet, the first ``hil run`` spends about a third of its start-up on the set-up's
kernels (building the plant, correcting its initial state onto its constraints, the law,
the derived diagnostics) and the rest on the loop: rt.realtime.run_loop with everything it
calls, and the correction worker. ``LoopAhead.start`` then starts this module as a second
process (``python -m hilrig.rt.loop_ahead``) that builds the same session without that
set-up (``Session(loop_only=True)``), compiles its loop into the shared cache
(``Session.compile_loop``: the same kernels, for the same argument types, never run) and
ends. The first process sets up meanwhile; its warm-up waits for the second, then loads
the loop from the cache (jit.compilation: both processes key the cache by the same
fingerprint and save under a lock). On a 2-core machine the first tick comes 30 % sooner
when it is quiet, 17 % sooner with a busy loop on each core (docs/MEASURED.md, "Start-up").

What the second process compiles is what the first would have: if it fails (one line on
stderr says why), the first compiles the loop itself, as without it. It prints its
kernels as the first does, marked as its own, ignores Ctrl-C (the first process handles
it and stops the second) and ends with the first (``PR_SET_PDEATHSIG``). The config
goes to it as JSON on its stdin.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from hilrig.schema import Config

PR_SET_PDEATHSIG = 1          # linux/prctl.h
LABEL = "the loop, in a second process"
SWITCH = "HILRIG_LOOP_AHEAD"  # "0": no second process, the loop compiles in the first


class LoopAhead:
    """The second process compiling the loop of a config's session (module docstring)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process

    @classmethod
    def start(cls, cfg: Config, fast: bool) -> "LoopAhead | None":
        """The second process for a session of ``cfg`` (``fast``: hil run --fast), started
        now; None when the cache already holds a loop (a later run loads it at once) or
        when $HILRIG_LOOP_AHEAD is "0"."""
        from hilrig.jit import compilation
        from hilrig.rt import realtime
        from hilrig.settings.live_changes import raw_config

        if os.environ.get(SWITCH, "1") == "0" or compilation.holds(realtime.run_loop):
            return None
        process = subprocess.Popen(
            [sys.executable, "-m", "hilrig.rt.loop_ahead", str(os.getpid())]
            + (["--fast"] if fast else []),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        try:
            process.stdin.write(json.dumps(raw_config(cfg.to_dict())))
            process.stdin.close()
        except OSError:             # it ended already: wait() reports nothing to load
            pass
        return cls(process)

    def wait(self) -> bool:
        """Wait until the second process has ended (saying so on stderr, with its pid, if it
        still runs); whether it compiled the loop."""
        if self.process.poll() is None:
            print(f"hilrig: waiting for {LABEL} (pid {self.process.pid})", file=sys.stderr,
                  flush=True)
        return self.process.wait() == 0

    def stop(self) -> None:
        """End the second process if it still runs (the run ended before its warm-up)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _end_with_parent(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` (the first process) ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:          # it ended before prctl
        os._exit(1)


def main(argv: list[str]) -> int:
    """The second process: ``PARENT_PID [--fast]``, the config as JSON on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent(int(argv[0]))
    from hilrig.jit import compilation
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
