"""Scheduling for the real-time threads: CPU pinning, SCHED_FIFO, a frozen garbage collector.

Each setting is applied when the config asks for it and reported either way,
so a timing summary always says under which scheduling it was measured.
``apply_thread`` acts on the calling thread (Linux applies affinity and
policy per thread); ``FrozenGC`` acts on the process.

A loop is only as punctual as the threads it waits on: ZeroMQ's I/O threads, a CAN
bus' reader, the emulated drives' threads, the correction worker. They run at the
loop's SCHED_FIFO priority too: a ZeroMQ context gets it through its own options
(drivers.endpoint.context), and threads that a library starts get it with
``spawning``, since a Linux thread is born with its creator's policy and priority.
Threads that only serve people (the live view, the telemetry writer, `hil set`)
run below every real-time one: at normal priority, except where the loop itself runs
Python (``helper_priority``), and the live view, which has a latency to keep, at
``helper_priority`` wherever the loop runs at SCHED_FIFO (live.foxglove.view_priority).

SCHED_FIFO needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of at least the priority.
``fifo_refusal`` finds out once per process, on a short-lived thread, and a refusal
is said once, in one line (logger ``hil.sched``); everything then runs at normal
priority and the summaries say so. docs/RIGPC.md describes the set-up of a rig PC.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import resource
import threading

log = logging.getLogger("hil.sched")
_refusal_said = False     # the one line about a refused SCHED_FIFO, once per process


@functools.lru_cache(maxsize=None)
def fifo_refusal(priority: int) -> str | None:
    """Why this process cannot run threads at SCHED_FIFO ``priority`` (None: it can).

    Probed by a short-lived thread that asks for it (nothing else changes); the first
    refusal in a process is logged as one line (docs/RIGPC.md names the remedies).
    """
    global _refusal_said
    refused = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, AttributeError) as exc:
            refused.append(getattr(exc, "strerror", None) or str(exc))

    thread = threading.Thread(target=probe, name="hil-fifo-probe")
    thread.start()
    thread.join()
    if not refused:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    reason = (f"SCHED_FIFO {priority} refused ({refused[0]}; needs root, CAP_SYS_NICE or "
              f"RLIMIT_RTPRIO >= {priority}, which is {soft})")
    if not _refusal_said:
        _refusal_said = True
        log.warning("%s: the real-time threads run at normal priority (docs/RIGPC.md)",
                    reason)
    return reason


HELPER_PRIORITY = 1     # SCHED_FIFO's lowest: above every process of normal priority


def helper_priority(loop_priority: int) -> int:
    """SCHED_FIFO priority for the telemetry writer and the live view of a loop that runs
    Python code (`hil control`, `hil emulate`): HELPER_PRIORITY (1) when the loop runs at
    SCHED_FIFO above it, else 0 (normal scheduling).

    Such a loop needs Python's interpreter lock every tick, and the lock has no priority
    inheritance: a helper of normal priority that holds it and is preempted by a busy
    process keeps the loop waiting for milliseconds (measured: 5-9 ms, `hil control`
    under a CPU hog; bench/bench_rigs.py). At priority 1 the helper stays below every
    real-time thread but is never preempted by normal processes while it holds the lock.
    `hil run`'s loop runs without the lock: its helpers stay at normal priority.
    """
    return HELPER_PRIORITY if loop_priority > HELPER_PRIORITY else 0


@contextlib.contextmanager
def spawning(fifo_priority: int):
    """Inside, the calling thread runs at SCHED_FIFO ``fifo_priority`` (0: unchanged), so
    that the threads it starts, its own or a library's (python-can's bus reader and
    periodic senders), are born with it; afterwards the caller's policy is back."""
    if fifo_priority <= 0 or fifo_refusal(fifo_priority) is not None:
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo_priority))
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)


def apply_thread(cpu: int, fifo_priority: int) -> dict:
    """Pin the calling thread to ``cpu`` (-1: leave) and set SCHED_FIFO (0: leave).

    Returns what is in force, e.g. {"cpu": "1", "policy": "SCHED_FIFO 80"} or
    the reason a request was refused (said once per process, see ``fifo_refusal``).
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
        refused = fifo_refusal(fifo_priority)
        if refused is not None:
            report["policy"] = f"SCHED_OTHER ({refused})"
            return report
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
