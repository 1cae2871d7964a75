"""The law watchdog: a controller law that never returns cannot hold a run.

A compiled law runs in the loop's thread as machine code. While it runs, that thread
takes no signal (Python runs a signal's handler only between two bytecodes of the main
thread), polls no e-stop endpoint and sends the drives nothing: before this watchdog, a
law stuck in a loop ignored Ctrl-C, SIGTERM and `hil estop`, and only SIGKILL ended the
process (the drives then left to their own watchdogs). So the stop is decided outside
the law's thread:

- ``LawWatchdog`` (``hil control``, rt.loop, where the law runs in the loop's Python
  thread): a thread of its own, at one SCHED_FIFO priority above the loop's (so that a
  law spinning at the loop's priority on the same CPU cannot starve it), wakes every
  ``poll`` s (at most 50 ms) and at each SIGINT or SIGTERM (timing.signals.SignalTap).
  The loop marks the law's call (``enter``/``leave``, a few hundred ns a tick). Once a
  call has run longer than one period, the watchdog looks closer; it stops the run when
  the call has run longer than ``safety.tick_timeout`` (unset: max(0.25 s, 100 ticks);
  the warm-up's call, which compiles, has no bound), or when SIGINT, SIGTERM or an ESTOP
  frame on the run's e-stop endpoint came while the call runs.
- ``TickStall`` (``hil run``, rt.session, where the whole loop is one compiled call in
  its own thread): the main thread, which supervises the loop anyway, sees the tick
  count stand still for longer than ``safety.tick_timeout`` plus a period (a full ring
  of --fast, waiting for the log's writer, does not count), or for STOP_GRACE_S (or ten
  ticks, if longer) after a stop request (Ctrl-C, SIGTERM), which the loop takes at its
  next tick.

What the stop does (the caller's ``on_trip``): the stuck thread is put back to normal
scheduling (``demote``), the link is safe-stopped from the watchdog's thread (``hil
control``: the drives disabled, below), one line names the cause ("controller law did
not return within 250 ms at tick 1234; drives stopped"), the log is closed with every row
written so far and its summary, and the process ends with exit code 1 through
``os._exit`` (``end_process``), since the thread stuck in compiled code can be neither
interrupted nor joined.

Safe-stopping from another thread: the loop holds the ``gate`` (a lock) at all times
but during the law's call, and takes it back when the call returns. The watchdog
decides only while it holds the gate, so the loop thread is then inside the law and in
no call of the link: ZeroMQ's socket (not thread-safe), the CAN bus, the serial port
are used by one thread at a time, and ``Link.safe_stop`` works unchanged (ZeroMQ: the
BYE, then ``close`` lets it leave within the socket's linger; CANopen: quick stop and
disable voltage through the bus's send, then the bus is shut down). Once tripped, the
watchdog never gives the gate back: a law that returns late finds the loop thread
blocked until the process ends, and it never sends another command.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import time
from typing import Callable

from hilrig.schema import Config
from hilrig.timing.sched import apply_thread, restore_thread
from hilrig.timing.signals import SignalTap

log = logging.getLogger("hil.watchdog")

POLL_MAX_S = 0.05        # the watchdog looks at least this often, s
WARM_UP = -1             # the tick of the warm-up's call (it compiles: no time bound)
STOP_GRACE_S = 0.1       # s a compiled loop has to end after a stop request (TickStall)


def tick_timeout(cfg: Config) -> float:
    """``safety.tick_timeout``, s; unset: max(0.25 s, 100 ticks of sim.dt)."""
    if cfg.safety.tick_timeout is not None:
        return float(cfg.safety.tick_timeout)
    return max(0.25, 100 * cfg.sim.dt)


def demote(native_id: int | None) -> None:
    """Put the thread ``native_id`` (a stuck loop thread) back to normal scheduling, so
    that a law spinning at SCHED_FIFO no longer keeps its CPU from the threads that close
    the run (lowering a priority needs no right)."""
    if native_id is None:
        return
    try:
        os.sched_setscheduler(native_id, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


def end_process(code: int = 1):
    """Flush stdout and stderr and end the process at once (``os._exit``): a thread stuck
    in compiled code cannot be joined, and the interpreter's exit would wait on it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class LawWatchdog:
    """The watchdog of a loop whose law runs in the loop's own thread (rt.loop).

    ``timeout``: safety.tick_timeout, s; ``period``: the loop's, s; ``priority``: the
    loop's SCHED_FIFO priority (0: normal scheduling; the watchdog runs one above);
    ``on_trip(cause, tick)``: stops the run and ends the process (never returns); it runs
    in the watchdog's thread while the loop thread is inside the law. ``estop(tick)``:
    the category of a valid ESTOP frame waiting on the run's e-stop endpoint (answered
    with the tick), else None; called only while the loop thread is inside the law.

    The loop calls ``enter(tick)`` right before the law and ``leave()`` right after it,
    and ``start()`` / ``stop()`` around the run, from the main thread (``start`` taps
    SIGINT and SIGTERM there).
    """

    def __init__(self, timeout: float, period: float, priority: int,
                 on_trip: Callable[[str, int], None],
                 estop: Callable[[int], int | None] | None = None):
        self.timeout_ns = int(timeout * 1e9)
        self.period_ns = int(period * 1e9)
        self.poll = min(POLL_MAX_S, max(timeout / 5, 0.005))
        self.priority = min(99, priority + 1) if priority > 0 else 0
        self.on_trip, self.estop = on_trip, estop
        self.gate = threading.Lock()
        self.gate.acquire()                 # the loop's, but during the law's call
        self.since_ns = 0                   # when the law's call began (0: not in one)
        self.tick = WARM_UP
        self.loop_thread: int | None = None
        self.signals: list[tuple[int, int]] = []     # (number, ns) taken from the tap
        self.tripped = False
        self._stopping = False
        self._tap: SignalTap | None = None
        self._thread = threading.Thread(target=self._run, name="hil-law-watchdog",
                                        daemon=True)

    # -- the loop's side ----------------------------------------------------------------
    def enter(self, tick: int) -> None:
        """The law's call at ``tick`` (WARM_UP: the warm-up's) begins."""
        self.tick = tick
        self.since_ns = time.monotonic_ns()
        self.gate.release()

    def leave(self) -> None:
        """The law's call returned (or raised): the gate back, before anything else (a
        Ctrl-C landing in the wait is raised after it); blocks for good once the watchdog
        has tripped."""
        interrupted = None
        while True:
            try:
                self.gate.acquire()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
        self.since_ns = 0
        if interrupted is not None:
            raise interrupted

    def start(self) -> None:
        self.loop_thread = threading.get_native_id()
        self._tap = SignalTap()
        self._tap.install()
        self._thread.start()

    def stop(self) -> None:
        """End the watchdog's thread (at most one poll) and untap the signals."""
        self._stopping = True
        if self._tap is None:
            return
        self._tap.wake()
        if self._thread.is_alive():
            self._thread.join(1.0)
        self._tap.close()
        self._tap = None

    # -- the watchdog's thread ------------------------------------------------------------
    def _run(self) -> None:
        apply_thread(-1, self.priority)
        try:
            poller = select.poll()
            poller.register(self._tap.fileno(), select.POLLIN)
            while not self._stopping:
                if poller.poll(self.poll * 1000):
                    now = time.monotonic_ns()
                    self.signals += [(number, now) for number in self._tap.take()]
                self._check()
        finally:
            restore_thread()

    def _check(self) -> None:
        """Stop the run if the law's call is stuck (module docstring)."""
        since = self.since_ns
        if not since or self._stopping:
            return
        running = time.monotonic_ns() - since
        if running < self.period_ns or not self.gate.acquire(blocking=False):
            return                        # in time, or the call has just returned
        if self.since_ns != since:        # it returned and the next call began
            self.gate.release()
            return
        tick, cause = self.tick, None
        where = "in the warm-up" if tick == WARM_UP else f"at tick {tick}"
        late = [number for number, at in self.signals if at >= since]
        if tick != WARM_UP and running > self.timeout_ns:
            cause = f"controller law did not return within {self.timeout_ns / 1e6:g} ms {where}"
        elif late:
            cause = f"{signal_name(late[0])}: the controller law had not returned for " \
                    f"{running / 1e6:.0f} ms {where}"
        elif self.estop is not None and (category := self.estop(max(tick, 0))) is not None:
            cause = f"e-stop from the CLI (hil estop, category {category}): the controller law " \
                    f"had not returned for {running / 1e6:.0f} ms {where}"
        if cause is None:
            self.signals = [(number, at) for number, at in self.signals if at >= since]
            self.gate.release()
            return
        self.tripped = True               # the gate stays taken: the loop never goes on
        demote(self.loop_thread)
        self.on_trip(cause, tick)


class TickStall:
    """A compiled loop in another thread that stopped counting ticks (rt.session's
    supervisor): ``check`` once per poll with the ticks done so far.

    ``timeout``: safety.tick_timeout, s; ``period``: the loop's, s (the first tick is
    due one period after the start).
    """

    def __init__(self, timeout: float, period: float):
        self.timeout_ns = int(timeout * 1e9)
        self.bound_ns = int((timeout + period) * 1e9)
        self.grace_ns = int(max(STOP_GRACE_S, 10 * period) * 1e9)
        self.ticks = -1
        self.since_ns = 0
        self.stop_since_ns = 0

    def stop_requested(self) -> None:
        """A stop (Ctrl-C, SIGTERM) was asked of the loop: it has the grace to end."""
        if not self.stop_since_ns:
            self.stop_since_ns = time.monotonic_ns()

    def check(self, ticks: int, waiting: bool = False) -> int | None:
        """The ns the loop has stood at ``ticks`` once that is past the bound (or past
        the grace after a stop request), else None. ``waiting``: the loop waits for
        the log's writer (a full ring, --fast), which resets the clock."""
        now = time.monotonic_ns()
        if ticks != self.ticks or waiting:
            self.ticks, self.since_ns = ticks, now
            return None
        standing = now - self.since_ns
        if standing > self.bound_ns:
            return standing
        if self.stop_since_ns and now - self.stop_since_ns > self.grace_ns \
                and standing > self.grace_ns:
            return standing
        return None
