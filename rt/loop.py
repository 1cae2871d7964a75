"""The fixed-step loop of a controller that talks to its plant through a link.

``hil control``: bring-up as ros2_control's lifecycle: configure the link
(communication up, the drives not powered), build the controller, compile or
load and run once every kernel of the tick and of its telemetry, then activate
the link (the drives enabled) and tick at once: no drive waits powered while
numba compiles. The summary gives the bring-up times (``lifecycle_summary``),
among them ``enable_to_first_command_s``.

Then per tick, wait for the absolute deadline t0 + k·period (or,
in lockstep, for the emulator's answer), then read (link), control (one
compiled call: controller and command limits), write (link), record. The
controller's time is its own tick clock, t = k·h. A watchdog stops the run
safely when no fresh measurement came for ``safety.watchdog_ticks`` ticks; until
the link's first valid measurement the command is held at zero and the run waits at
most ``link.first_measurement_timeout`` for it (then stops, naming the link); a
telemetry write error (``log_errors``), a link error, a non-finite command, too many overruns, Ctrl-C or ``hil estop`` (the
e-stops) do the same, and so do rows the telemetry lost (``telemetry.on_overrun`` = "stop";
a lockstep loop, with no deadline, waits for its writer instead). Whatever the cause, the
drives get ``safe_stop``, further writes are blocked, and the log is closed complete with
the timing summary. A run of sim.duration T has ticks at t = 0, h, ..., T.

``hil estop --category`` (IEC 60204-1, docs/LINK_FAULTS.md): 0 (the default) is the stop
above; 1 and 2 hand the stop to the link's drives (``Link.controlled_stop``: to rest
within ``safety.stop_time``) while the loop goes on reading, logging and watching (the law
no longer commands: u is logged as 0); 1 then ends the run with ``safe_stop`` at the stop
time, 2 holds to the end of the run. A link without a controlled stop stops at once, the
reason saying so.

The loop thread runs at SCHED_FIFO ``loop.fifo_priority`` on ``loop.cpu`` from the
enable on (in lockstep too: it blocks on each answer, it never spins); the threads the
link needs (ZeroMQ's I/O, a CAN bus' reader) and the e-stop's I/O thread run at the same
priority; the telemetry writer and the live view below every real-time thread, at
SCHED_FIFO 1, since they share the interpreter lock with this loop
(timing.sched.helper_priority). A process without the right to SCHED_FIFO says so once,
in one line, and runs on.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import zmq
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import D_CODE, bad_command_reason, detection_event
from hilrig.controllers.limits import LIMIT_ROWS, config_limits, outside_measured, violation
from hilrig.drivers import endpoint as endpoints
from hilrig.drivers.link import Link, LinkError, LinkTimeout, Measurement
from hilrig.drivers.wire import ERROR_VALUE, MessageType, WireError, decode, encode
from hilrig.rt import realtime as rtk
from hilrig.rt.law_watchdog import WARM_UP, LawWatchdog, end_process, tick_timeout
from hilrig.rt.live_mailbox import apply_pending, new_mailbox
from hilrig.rt.session import SessionResult, close_log
from hilrig.rt.tick import limit_tick
from hilrig.schema import Config
from hilrig.telemetry.recorder import TIMING_GROUPS, RowLoss, Telemetry, ring_capacity
from hilrig.telemetry.rows import fill_row, publish_row, row_columns
from hilrig.telemetry.scene import attach as attach_scene
from hilrig.timing.clock import now_ns, spin_window_ns, timespec, wait_until_ns
from hilrig.timing.pacing import POLICIES, SKIP_TICKS, STOP_RUN, Pacer
from hilrig.timing.sched import (
    FrozenGC,
    apply_thread,
    fifo_refusal,
    helper_priority,
    restore_thread,
)
from hilrig.timing.summary import summarize

log = logging.getLogger("hil.loop")


def link_groups(nact: int, drive: str) -> list:
    """Telemetry row of a controller: its time, measurement, command and timing."""
    groups = [("t", 1), ("q", (nact,)), ("qd", (nact,)), ("u", (nact,))]
    if drive != "torque":
        groups.append(("i", (nact,)))
    return groups + TIMING_GROUPS


class EStopRequested(Exception):
    """An ESTOP frame of stop category 0 arrived on the e-stop endpoint (or a controlled
    stop the link cannot do, or a category-1 stop whose stop time is over); ``reason``
    says which."""

    def __init__(self, reason: str = "e-stop from the CLI (hil estop)"):
        super().__init__(reason)
        self.reason = reason


STOP_TEXT = {0: "power removed at once", 1: "controlled stop, then power removed",
             2: "controlled stop, power kept (holding)"}     # IEC 60204-1, 9.2.2


class LinkLoop:
    """A controller from ``cfg`` driving ``link`` for sim.duration seconds.

    ``estop_endpoint``: optional ZeroMQ endpoint where ``hil estop`` can stop the run:
    checked once per tick (a non-blocking receive), answered with ESTOP_ACK. It is bound
    first (drivers.endpoint.bind: refused with a ConfigError when a live process serves
    it, owner-only), so a refused run leaves no log behind.
    ``log_errors``: a telemetry write error (a full disk) stops the run ("stop") or
    leaves it running unlogged ("continue").
    """

    def __init__(self, cfg: Config, link: Link, log_path: str | Path,
                 estop_endpoint: str | None = None, log_errors: str = "stop",
                 hooks=(), on_abandon=None):
        self.cfg = cfg
        # what a run the law watchdog ended reports before the process ends (hil control's
        # lines): on_abandon(SessionResult)
        self.on_abandon = on_abandon
        self.hooks = list(hooks)   # start(loop) after the warm-up, stop() at the end
        self.live_box = None       # the live-parameter mailbox (live.params), once built
        self.link = link
        self.log_errors = log_errors
        self.log_failure: str | None = None
        self.h = cfg.sim.dt
        self.n_steps = int(round(cfg.sim.duration / self.h))
        self.n_ticks = self.n_steps + 1          # t = 0, h, ..., duration
        self.controller = None            # built at open: it depends on link.command_unit
        self.estop = None
        self.estop_endpoint = estop_endpoint
        if estop_endpoint is not None:
            # the e-stop's I/O thread at the loop's priority: heard on a busy host too
            self.estop_context = endpoints.context(cfg.loop.fifo_priority)
            self.estop = self.estop_context.socket(zmq.ROUTER)
            self.estop.setsockopt(zmq.LINGER, 0)
            self.estop.setsockopt(zmq.MAXMSGSIZE, 4096)
            self.estop.setsockopt(zmq.RCVHWM, 100)
            try:
                endpoints.bind(self.estop, estop_endpoint, "e-stop")
            except BaseException:
                self.estop.close(0)
                self.estop_context.term()
                raise
        nact = link.n_axes
        self.limits = np.full((LIMIT_ROWS, nact), np.inf)   # set at configure (link.command_unit)
        self.meas = Measurement(nact)
        self.u, self.held = np.zeros(nact), np.zeros(nact)
        capacity = ring_capacity(self.h, cfg.telemetry.ring_rows, self.n_ticks)
        # this loop runs Python: its writer and live view must not hold the interpreter
        # lock while preempted (timing.sched.helper_priority)
        self.helper_priority = helper_priority(cfg.loop.fifo_priority)
        self.telemetry = Telemetry(log_path, link_groups(nact, cfg.plant.drive), cfg.to_dict(),
                                   capacity=capacity, priority=self.helper_priority)
        self.telemetry.released[0] = 0   # a tick's overrun event comes after its row
        attach_scene(self.telemetry, cfg)   # the measured arm in 3D, where q is all of it
        self.row_loss = RowLoss(self.telemetry, cfg.telemetry.on_overrun, log)
        self.cols = row_columns(self.telemetry.columns)
        self.timings = np.full((self.n_ticks, 5), np.nan)
        self.ts = timespec()
        loop = cfg.loop
        self.pacer = Pacer(int(round(self.h * 1e9)), spin_window_ns(loop.spin, self.h),
                           POLICIES[loop.overrun], loop.max_overruns)
        self.configured_at_ns = self.warmed_at_ns = self.first_command_ns = None
        self.stopping: int | None = None     # the category of a controlled stop under way
        self.stop_at: int | None = None      # category 1: the tick the power is removed
        self.stop_reason = ""
        self.scheduling: dict = {}
        # the watchdog of the law's calls (rt.law_watchdog), from the warm-up on
        self.watchdog = LawWatchdog(tick_timeout(cfg), self.h, cfg.loop.fifo_priority,
                                    self._abandon, self._receive_estop if self.estop else None)

    def _check_estop(self, tick: int) -> None:
        """Act on a valid ESTOP frame if one is waiting (others are ignored): category 0
        (or none given) raises EStopRequested; 1 and 2 start the link's controlled stop
        (``_controlled_stop``)."""
        category = self._receive_estop(tick)
        if category == 0:
            raise EStopRequested()
        if category is not None:
            self._controlled_stop(category, tick)

    def _receive_estop(self, tick: int) -> int | None:
        """The category of a valid ESTOP frame waiting on the e-stop endpoint, answered with
        ESTOP_ACK at ``tick`` and logged as an event; None when none is waiting (a bad frame
        is said and dropped). Called by the loop thread, or by the law watchdog while the
        loop thread is inside the law (never both: the watchdog's gate)."""
        try:
            peer, frame = self.estop.recv_multipart(flags=zmq.NOBLOCK)
        except (zmq.Again, ValueError):
            return None
        try:
            _, _, _, values = decode(frame, {MessageType.ESTOP: None})
            category = int(values[0]) if len(values) else 0
            if len(values) > 1 or category not in STOP_TEXT or category != values[0]:
                raise WireError(ERROR_VALUE, f"ESTOP {list(values)}: expected [] or [0, 1 "
                                             "or 2] (the stop category)")
        except WireError as exc:
            log.warning("e-stop endpoint: ignored a bad frame: %s", exc)
            return None
        self.estop.send_multipart([peer, encode(MessageType.ESTOP_ACK, tick, tick * self.h,
                                                [tick])])
        self.telemetry.event("estop", t=tick * self.h, tick=tick, category=category)
        return category

    def _controlled_stop(self, category: int, tick: int) -> None:
        """Category 1 or 2: the link's drives bring the joints to rest within
        safety.stop_time (the loop goes on reading and logging, the law no longer
        commands); category 1 ends the run when that time is over (``stop_at``), 2 holds
        to the end of the run. A link without a controlled stop, or a second e-stop of a
        category the stop in progress already covers, stops at once (category 0)."""
        stop_time = self.cfg.safety.stop_time
        if self.stopping is not None:
            if category >= self.stopping:
                return                   # already stopping, at least as strictly
        try:
            self.link.controlled_stop(category, stop_time)
        except LinkError as exc:
            raise EStopRequested(f"e-stop from the CLI (hil estop): category {category} "
                                 f"refused ({exc}): category 0, {STOP_TEXT[0]}") from None
        self.stopping = category
        self.stop_reason = f"e-stop from the CLI (hil estop): category {category}, " \
                           f"{STOP_TEXT[category]}"
        if category == 1:
            self.stop_at = tick + max(1, int(round(stop_time / self.h)))
        log.warning("%s, within safety.stop_time = %g s, from tick %d", self.stop_reason,
                    stop_time, tick)

    def _control(self, t: float, k: int) -> bool:
        """The law on tick k's measurement, then the limits; False on a non-finite command.
        The call is marked for the law watchdog (``enter``, ``leave``)."""
        c, m, watchdog = self.controller, self.meas, self.watchdog
        watchdog.enter(k)
        try:
            if c.compiled:
                return rtk.control_tick(c.law, c.params, c.state, self.limits, self.h, t,
                                        m.pos, m.vel, m.current, self.u, self.held)
            c.law(t, m.pos, m.vel, m.current, c.params, c.state, self.u)
            return limit_tick(self.limits, self.h, self.u, self.held)
        finally:
            watchdog.leave()

    def _abandon(self, cause: str, tick: int) -> None:
        """The law watchdog's end of the run (rt.law_watchdog), in its thread while the loop
        thread is stuck inside the law at ``tick``: the link safe-stopped and closed (its
        last frames leave), the one line, the e-stop endpoint closed, the log closed with
        every row so far and the summary, ``on_abandon``; then the process ends, exit 1."""
        try:       # the process ends whatever fails here (a closed stdout, say)
            reason = f"{cause}; drives stopped"
            self.link.safe_stop()
            self.link.close()
            log.error("%s", reason)
            if self.estop is not None:
                endpoints.close(self.estop, self.estop_endpoint)
                self.estop_context.term()
            ran = max(tick, 0)
            tel = self.telemetry
            tel.event("stop", t=ran * self.h, tick=ran, reason=reason)
            for hook in self.hooks:
                hook.stop()
            summary = summarize(self.timings[:ran], self.pacer.overruns, self.scheduling)
            summary.update(reason=reason, status="error", rate_hz=1.0 / self.h,
                           policy=self.cfg.loop.overrun, **self.lifecycle_summary())
            close_log(tel, summary)
            if self.on_abandon is not None:
                self.on_abandon(SessionResult(ran, reason, summary, tel.path, "error"))
        finally:
            end_process(1)

    def warm_up(self) -> None:
        """Compile or load, and call once, every kernel the tick calls from Python (the link
        configured, not active). Each has its own entry: loading ``wait_until_ns`` from the
        numba cache does not load ``now_ns`` for Python callers, which would otherwise cost
        the first tick milliseconds. A compiled law runs once on a copy of its state; a
        Python law has nothing to compile and is not called before the first tick.
        """
        c = self.controller
        if c.compiled:
            self.watchdog.enter(WARM_UP)     # no time bound (it compiles); a stop request holds
            try:
                rtk.control_tick(c.law, c.params, c.state.copy(), self.limits, self.h, 0.0,
                                 self.meas.pos, self.meas.vel, self.meas.current, self.u,
                                 self.held.copy())
            finally:
                self.watchdog.leave()
        limit_tick(self.limits, self.h, self.u, self.held.copy())
        outside_measured(self.limits, self.meas.pos, self.meas.vel)
        apply_pending(self.live_box.copy(), c.params.copy(), self.limits.copy(), 0, 0.0)
        self.u[:] = 0.0
        ring, head = np.zeros_like(self.telemetry.ring[:2]), np.zeros(2, np.int64)
        fill_row(ring, head, self.cols, 0, 0.0, self.meas.buffer[1:], self.link.n_axes,
                 self.held, self.meas.current, self.meas.buffer)
        publish_row(ring, head, self.cols, np.zeros(5))
        wait_until_ns(self.ts, 0, 0)
        now_ns(self.ts)
        self.pacer.warm_up()

    def lifecycle_summary(self) -> dict:
        """Bring-up times in s, as far as the run got: ``warm_up_s`` (link configured to
        kernels warm), ``warm_to_enable_s`` (to the drives enabled, ``link.enabled_at_ns``),
        ``enable_to_first_command_s`` (to the first command written)."""
        marks = (self.configured_at_ns, self.warmed_at_ns, self.link.enabled_at_ns,
                 self.first_command_ns)
        names = ("warm_up_s", "warm_to_enable_s", "enable_to_first_command_s")
        return {name: (marks[i + 1] - marks[i]) * 1e-9 for i, name in enumerate(names)
                if marks[i] is not None and marks[i + 1] is not None}

    def run(self) -> SessionResult:
        loop, safety = self.cfg.loop, self.cfg.safety
        watchdog = safety.watchdog_ticks
        tel, ring, head, cols = self.telemetry, self.telemetry.ring, self.telemetry.head, self.cols
        nact = self.link.n_axes
        reason, status, stale, k = "done", "ok", 0, 0
        measured = False     # no fresh measurement yet: the controller is not run on NaN
        first_timeout = int(self.cfg.link.first_measurement_timeout * 1e9)
        pacer = self.pacer
        if loop.fifo_priority > 0:
            fifo_refusal(loop.fifo_priority)     # a refusal is said now, before the bring-up
        try:
            self.link.configure()
            self.configured_at_ns = time.monotonic_ns()
            unit = self.link.command_unit
            self.controller = controller_from_config(self.cfg, unit, allow_python=True)
            self.limits[:] = config_limits(self.cfg, nact, unit)
            paced = not getattr(self.link, "lockstep", False)
            self.live_box = new_mailbox(self.controller.params, self.limits)
            detecting = self.controller.detection.shape[0] > 0   # the law reports faults
            self.watchdog.start()
            self.warm_up()
            self.warmed_at_ns = time.monotonic_ns()
            for hook in self.hooks:
                hook.start(self)
            tel.event("start", t=0.0, link=type(self.link).__name__, paced=paced)
            self.scheduling = apply_thread(loop.cpu, loop.fifo_priority)
            with FrozenGC(loop.gc_freeze):
                self.link.activate()
                start = pacer.start()     # tick 0 right after the enable
                while k < self.n_ticks:
                    deadline, wake = pacer.wait(k) if paced else (0, now_ns(self.ts))
                    if self.estop is not None:
                        self._check_estop(k)
                    if self.stop_at is not None and k >= self.stop_at:
                        raise EStopRequested(self.stop_reason)
                    fresh = self.link.read(self.meas)
                    t_read = now_ns(self.ts)
                    if not (measured or fresh) and t_read - start > first_timeout:
                        raise LinkTimeout(self._no_first_measurement())
                    stale = 0 if fresh or not measured else stale + 1
                    if stale >= watchdog:
                        raise LinkTimeout(f"watchdog: no fresh measurement for {stale} ticks "
                                          f"({stale * self.h * 1e3:.0f} ms): link lost")
                    t = k * self.h
                    apply_pending(self.live_box, self.controller.params, self.limits, k, t)
                    measured = measured or fresh
                    if measured and outside_measured(self.limits, self.meas.pos,
                                                     self.meas.vel):
                        reason = violation(self.limits, self.meas.pos, self.meas.vel)
                        status = "error"
                        break
                    if self.stopping is not None:      # the drives command themselves
                        self.held[:] = 0.0
                    elif measured and not self._control(t, k):   # before any: hold zero
                        m = self.meas
                        reason = bad_command_reason(self.controller.name, t, m.pos, m.vel,
                                                    m.current, self.u)
                        status = "error"
                        break
                    t_control = now_ns(self.ts)
                    self.link.write(self.held)
                    t_write = now_ns(self.ts)
                    if k == 0:
                        self.first_command_ns = t_write
                    if not paced:          # no deadline: wait for the writer, lose no row
                        tel.wait_for_room()
                    fill_row(ring, head, cols, k, t, self.meas.buffer[1:], nact,
                             self.held, self.meas.current, self.meas.buffer)
                    timing = self.timings[k]
                    timing[0] = (wake - deadline) * 1e-9 if paced else 0.0
                    timing[1] = (t_read - wake) * 1e-9
                    timing[2] = (t_control - t_read) * 1e-9
                    timing[3] = (t_write - t_control) * 1e-9
                    timing[4] = (t_write - wake) * 1e-9
                    publish_row(ring, head, cols, timing)
                    if detecting and measured and self.stopping is None \
                            and self.controller.detected(k, t):     # the law's first report
                        event = detection_event(self.controller.detection[D_CODE])
                        tel.event(event.pop("kind"), **event, tick=k, t=t)
                    k += 1
                    if tel.failure is not None and self._log_failed(tel.failure):
                        break
                    if self.row_loss.check():
                        status = "error"     # the reason, with the final count, at the end
                        break
                    if paced and k < self.n_ticks:
                        missed, action = pacer.overrun(k)
                        if missed:
                            tel.event("overrun", t=t, tick=k - 1, missed=int(missed))
                        if action == STOP_RUN:
                            reason, status = "too many overruns", "error"
                            break
                        if action == SKIP_TICKS:    # (the last tick is never skipped)
                            k = min(k + int(missed), self.n_steps)
                    tel.released[0] = k
                if self.stopping == 2 and status == "ok":
                    reason, status = f"{self.stop_reason}: held to the end of the run", \
                        "interrupted"
        except KeyboardInterrupt:
            reason, status = "interrupted (e-stop)", "interrupted"
        except EStopRequested as stop:
            reason, status = stop.reason, "interrupted"
        except (LinkError, ValueError) as exc:
            reason, status = str(exc), "error"
            log.error("%s", exc)
        finally:
            self.watchdog.stop()
            restore_thread()
            self.link.safe_stop()
            self.link.close()
            if self.estop is not None:
                endpoints.close(self.estop, self.estop_endpoint)
                self.estop_context.term()
            tel.event("stop", t=min(k, self.n_steps) * self.h, tick=k, reason=reason)
            for hook in self.hooks:
                hook.stop()
            if self.log_failure is None and tel.failure is not None:
                self._log_failed(tel.failure)
            if self.log_failure is not None and self.log_errors == "stop":
                reason, status = self.log_failure, "error"
            elif self.log_failure is None:
                lost = self.row_loss.settle(reason)   # every row written: the final count
                if lost is not None:
                    reason = lost
                    status = "interrupted" if status == "interrupted" else "error"
            ran = self.timings[:min(k, self.n_ticks)]
            summary = summarize(ran, self.pacer.overruns, self.scheduling)
            summary.update(reason=reason, status=status, rate_hz=1.0 / self.h,
                           policy=loop.overrun, **self.lifecycle_summary())
            if self.log_failure is not None:
                summary["log_failure"] = self.log_failure
            if tel.lost_rows:
                summary["lost_rows"] = tel.lost_rows
            close_log(tel, summary)
        return SessionResult(k, reason, summary, tel.path, status)

    def _log_failed(self, failure: str) -> bool:
        """A telemetry write error, reported once; True if the run is to stop."""
        if self.log_failure is not None:
            return False
        self.log_failure = failure
        if self.log_errors == "stop":
            log.error("%s: stopping the run", failure)
            return True
        log.warning("%s: the run goes on unlogged (--log-errors continue)", failure)
        return False

    def _no_first_measurement(self) -> str:
        """Why the run stopped before its first measurement, naming the link."""
        link = self.cfg.link
        where = {"zmq": f" at {link.endpoint}"}.get(link.type, "")
        return (f"no measurement from the {link.type} link{where} within "
                f"link.first_measurement_timeout = {link.first_measurement_timeout:g} s of "
                "the enable (commands held at zero): is the plant or drive answering?")
