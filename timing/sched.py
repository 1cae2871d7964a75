"""Scheduling for the real-time thread: CPU pinning, SCHED_FIFO, a frozen garbage collector.

Each setting is applied when the config asks for it and reported either way,
so a timing summary always says under which scheduling it was measured.
``apply_thread`` acts on the calling thread (Linux applies affinity and
policy per thread); ``freeze_gc`` acts on the process.
"""
from __future__ import annotations

import gc
import os


def apply_thread(cpu: int, fifo_priority: int) -> dict:
    """Pin the calling thread to ``cpu`` (-1: leave) and set SCHED_FIFO (0: leave).

    Returns what is in force, e.g. {"cpu": "1", "policy": "SCHED_FIFO 80"} or
    the reason a request was refused.
    """
    report = {}
    if cpu >= 0:
        try:
            os.sched_setaffinity(0, {cpu})
            report["cpu"] = str(cpu)
        except (OSError, ValueError) as exc:
            report["cpu"] = f"not pinned ({exc})"
    else:
        report["cpu"] = "any"
    if fifo_priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo_priority))
            report["policy"] = f"SCHED_FIFO {fifo_priority}"
        except (OSError, AttributeError) as exc:
            report["policy"] = f"SCHED_OTHER (SCHED_FIFO refused: {exc})"
    else:
        report["policy"] = "SCHED_OTHER"
    return report


def restore_thread() -> None:
    """Back to normal scheduling on any CPU (for a thread that outlives its real-time part)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except (OSError, AttributeError):
        pass


class FrozenGC:
    """Context: gc.freeze() and gc.disable() while inside, when ``enabled``."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.was_enabled = gc.isenabled()

    def __enter__(self) -> "FrozenGC":
        if self.enabled:
            gc.collect()
            gc.freeze()
            gc.disable()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            gc.unfreeze()
            if self.was_enabled:
                gc.enable()
