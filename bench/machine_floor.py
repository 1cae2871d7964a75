"""The machine's own timing floor, to read the real-time benchmarks against.

On a shared VM the host takes vCPUs away for milliseconds at a time (steal
time). ``floor_run`` is the loop with nothing in it: the same clock, the same
sleep-then-spin wait and the same scheduling as rt.realtime.run_loop, but no
tick. Whatever lateness and missed deadlines it shows, no loop can do better
on that machine at that time (the idea of rt-tests' cyclictest). ``steal_ms``
reads the kernel's steal time of one CPU.
"""
from __future__ import annotations

import threading

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.timing.clock import now_ns, timespec, wait_until_ns
from hilrig.timing.sched import apply_thread


@kernel
def _empty_loop(ts, period_ns, spin_ns, lateness):
    """Wait for each deadline and record how late it woke, ns; nothing else.

    After a deadline is missed, skip to the next one ahead (the loop's ``skip``
    policy): skipped ticks keep lateness -1. Returns the number of overruns.
    """
    start = now_ns(ts) + period_ns
    overruns = 0
    k = 0
    while k < lateness.shape[0]:
        deadline = start + k * period_ns
        lateness[k] = wait_until_ns(ts, deadline, spin_ns) - deadline
        k += 1
        now = now_ns(ts)
        if now > start + k * period_ns:
            overruns += 1
            k = (now - start) // period_ns + 1
    return overruns


def steal_ms(cpu: int) -> float:
    """Steal time since boot (time the host ran something else on the vCPU) of CPU
    ``cpu``, or of every CPU for cpu = -1 (a thread that is not pinned), ms."""
    name = f"cpu{cpu}" if cpu >= 0 else "cpu"
    with open("/proc/stat") as stat:
        for line in stat:
            fields = line.split()
            if fields[0] == name:
                return int(fields[8]) * 10.0      # USER_HZ = 100
    raise ValueError(f"{name} not in /proc/stat")


def floor_run(duration: float, period: float, spin: float, cpu: int,
              fifo_priority: int) -> tuple[np.ndarray, int, float]:
    """Run the empty loop for ``duration`` s in a thread with the given scheduling.

    Returns its timing rows as rt.realtime records them ((ticks, 5), s: lateness,
    then zero compute; NaN rows for skipped ticks), its overruns, and the steal
    time of ``cpu`` (``steal_ms``) during the run, ms.
    """
    period_ns = int(round(period * 1e9))
    spin_ns = int(min(spin, 0.5 * period) * 1e9)
    lateness = np.full(int(duration / period), -1, np.int64)
    _empty_loop(timespec(), period_ns, spin_ns, lateness[:2])     # compile before timing
    result = {}

    def run() -> None:
        apply_thread(cpu, fifo_priority)
        before = steal_ms(cpu)
        result["overruns"] = _empty_loop(timespec(), period_ns, spin_ns, lateness)
        result["steal_ms"] = steal_ms(cpu) - before

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    timings = np.zeros((len(lateness), 5))
    timings[:, 0] = np.where(lateness >= 0, lateness * 1e-9, np.nan)
    return timings, result["overruns"], result["steal_ms"]
