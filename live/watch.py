"""``hil run --watch``: one status block kept current in the terminal, for people
without Foxglove, and the progress line of long offline work.

The block is redrawn every PERIOD s from the loop's telemetry ring (read only, like the
live view): plant time, tracking error |r - q| (rad, built-in PD and feed-forward laws),
lateness p99 over the last second (ms), overruns, and the last event. On a terminal it
is redrawn in place (ANSI cursor movement); into a pipe or file it is one line a second.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np
from hilrig.live.signals import RowSignals

PERIOD = 0.25


def format_status(t: float, error: float | None, p99: float | None, overruns: int,
                  last: str) -> list[str]:
    """The status block's lines."""
    err = "-" if error is None else f"{error:.3e} rad"
    late = "-" if p99 is None else f"{p99 * 1e3:.3f} ms"
    return [f"t              {t:10.3f} s",
            f"tracking error {err}",
            f"lateness p99   {late} (last second)",
            f"overruns       {overruns}",
            f"last event     {last}"]


class Watch:
    """The status block of one run: a hook (``start(run)``, ``stop()``)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.overruns = 0
        self.last = "-"
        self._drawn = 0
        self._stop = threading.Event()
        self._thread = None

    def start(self, run) -> None:
        self.telemetry = run.telemetry
        self.window = max(1, int(round(1.0 / run.cfg.sim.dt)))
        controller = getattr(run, "controller", None)
        u = run.telemetry.columns["u"]
        self.signals = RowSignals(run.cfg, {k: v for k, v in run.telemetry.columns.items()
                                            if k not in ("residual", "energy")},
                                  getattr(controller, "params", None),
                                  u.stop - u.start)
        self.telemetry.listeners.append(self._event)
        self._thread = threading.Thread(target=self._run, name="hil-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(2.0)
        self.draw()
        self._thread = None

    def _event(self, kind: str, fields: dict) -> None:
        if kind == "overrun":
            self.overruns += 1
        if kind not in ("start", "overrun"):     # overruns have their own line
            detail = fields.get("reason") or fields.get("changes") or fields.get("joint") or ""
            self.last = f"{kind} at t = {fields.get('t', 0.0):.3f} s {detail}".rstrip()

    def _run(self) -> None:
        next_line = 0.0
        while not self._stop.wait(PERIOD):
            if self.tty or time.monotonic() >= next_line:
                self.draw()
                next_line = time.monotonic() + 1.0

    def status(self) -> list[str]:
        tel = self.telemetry
        head = int(tel.head[0])
        if head == 0:
            return format_status(0.0, None, None, self.overruns, self.last)
        n = min(head, self.window, tel.capacity // 2)
        rows = tel.ring[np.arange(head - n, head) % tel.capacity]
        lateness = rows[:, tel.columns["lateness"]]
        lateness = lateness[np.isfinite(lateness)]
        p99 = float(np.percentile(lateness, 99)) if len(lateness) else None
        error = None
        if self.signals.has_reference:
            last = self.signals.block(rows[-1:].copy())
            error = float(np.linalg.norm(last["tracking_error"][0]))
        return format_status(float(rows[-1, tel.columns["t"]]), error, p99, self.overruns,
                             self.last)

    def draw(self) -> None:
        lines = self.status()
        if self.tty:
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._drawn = len(lines)
        else:
            self.stream.write(" | ".join(" ".join(line.split()) for line in lines) + "\n")
        self.stream.flush()


def progress_line(stream=None):
    """``progress(fraction, t)`` for long offline work: one line redrawn in place on a
    terminal (a line per 10 % into a pipe)."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    state = {"shown": -1}

    def progress(fraction: float, t: float) -> None:
        percent = int(fraction * 100)
        if tty:
            stream.write(f"\r  replay {percent:3d} %  (t = {t:.3f} s)")
            if fraction >= 1.0:
                stream.write("\n")
        elif percent // 10 > state["shown"]:
            state["shown"] = percent // 10
            stream.write(f"  replay {percent:3d} %  (t = {t:.3f} s)\n")
        stream.flush()
    return progress
