"""The paced loop: deadlines, overruns and the overrun policy, one copy for every loop.

Tick k is due at start + k·period (int64 ns of CLOCK_MONOTONIC, timing.clock), whatever
happened before it, so deadlines never drift. A loop sleeps and then spins to each
deadline (``wait_until_ns``). A tick that ends after the next tick's deadline is an
*overrun*: ``missed_ticks`` says how many deadlines have passed, and ``after_overrun``
what the policy (``loop.overrun``) does next:

- ``skip`` (SKIP_TICKS): the missed ticks get no control (the compiled loop steps the
  plant through them under the held command, a loop over a link leaves them out); the
  last tick of a run is never skipped;
- ``catch_up`` (GO_ON): the missed ticks run back to back;
- ``stop`` (STOP_RUN once ``loop.max_overruns`` overruns are counted; skip before).

The arithmetic is compiled kernels, so the compiled loop (rt.realtime.run_loop: ``hil
run``) calls it inline and the Python loops (rt.loop: ``hil control``; devices.zmq_plant:
``hil emulate``) call the same functions through ``Pacer``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hilrig.jit.kernel import kernel
from hilrig.timing.clock import now_ns, timespec, wait_until_ns

# overrun policies (loop.overrun)
SKIP, CATCH_UP, STOP = 0, 1, 2
POLICIES = {"skip": SKIP, "catch_up": CATCH_UP, "stop": STOP}
# what follows an overrun
GO_ON, SKIP_TICKS, STOP_RUN = 0, 1, 2


class Pacing(NamedTuple):
    """How a compiled loop is paced (rt.realtime.run_loop), built once at set-up.

    ``paced``: False runs as fast as it can (no deadline, no overrun); ``period_ns``,
    ``spin_ns`` (the spin before each deadline, timing.clock.spin_window_ns), ns;
    ``policy`` (POLICIES), ``max_overruns``; ``ts``: timing.clock.timespec scratch.
    """
    paced: bool
    period_ns: int
    spin_ns: int
    policy: int
    max_overruns: int
    ts: np.ndarray


@kernel
def deadline_ns(start, k, period):
    """Tick k's deadline, ns: start + k·period."""
    return start + k * period


@kernel
def missed_ticks(now, start, k, period):
    """How many deadlines have passed at ``now`` (ns) counting from tick k's: 0 when tick k
    is not due yet, else (now - deadline) // period + 1."""
    late = now - (start + k * period)
    if late <= 0:
        return 0
    return late // period + 1


@kernel
def after_overrun(policy, overruns, max_overruns):
    """What the ``overruns``-th overrun of a run leads to under ``policy``: STOP_RUN,
    GO_ON (catch up) or SKIP_TICKS."""
    if policy == STOP and overruns >= max_overruns:
        return STOP_RUN
    if policy == CATCH_UP:
        return GO_ON
    return SKIP_TICKS


class Pacer:
    """The paced loop of a Python caller (rt.loop, devices.zmq_plant), with the arithmetic
    of the compiled one.

    ``period_ns``, ``spin_ns``: ns; ``policy`` (POLICIES) and ``max_overruns`` decide what an
    overrun leads to (``overrun``). ``start()`` fixes tick 0's deadline; ``wait(k)`` sleeps
    and spins to tick k's and returns (deadline, wake-up time), ns; ``overrun(k)`` after a
    tick, with k the next tick, counts an overrun if tick k is already late.
    """

    def __init__(self, period_ns: int, spin_ns: int, policy: int = CATCH_UP,
                 max_overruns: int = 0):
        self.period = int(period_ns)
        self.spin = int(spin_ns)
        self.policy = policy
        self.max_overruns = max_overruns
        self.ts = timespec()
        self.start_ns = 0
        self.overruns = 0

    def warm_up(self) -> None:
        """Load (or compile) every kernel a tick calls, so the first tick pays nothing."""
        wait_until_ns(self.ts, 0, 0)
        now_ns(self.ts)
        deadline_ns(0, 0, 1)
        missed_ticks(0, 0, 0, 1)
        after_overrun(self.policy, 0, self.max_overruns)

    def start(self) -> int:
        """Tick 0 is due now; returns the time, ns."""
        self.start_ns = now_ns(self.ts)
        return self.start_ns

    def deadline(self, k: int) -> int:
        return deadline_ns(self.start_ns, k, self.period)

    def wait(self, k: int) -> tuple[int, int]:
        """Sleep, then spin to tick k's deadline: (deadline, the time woken), ns."""
        deadline = deadline_ns(self.start_ns, k, self.period)
        return deadline, wait_until_ns(self.ts, deadline, self.spin)

    def overrun(self, k: int, now: int | None = None) -> tuple[int, int]:
        """After a tick, with k the next one, at ``now`` (ns; read if None): (deadlines
        missed, what follows: GO_ON, SKIP_TICKS or STOP_RUN). (0, GO_ON) if in time;
        otherwise the overrun is counted."""
        missed = missed_ticks(now_ns(self.ts) if now is None else now, self.start_ns, k,
                              self.period)
        if missed == 0:
            return 0, GO_ON
        self.overruns += 1
        return missed, after_overrun(self.policy, self.overruns, self.max_overruns)
