"""An in-process real-time session: ``hil run``.

Builds plant, controller and telemetry from a config, warms the kernels up,
then runs rt.realtime.run_loop in a real-time thread (nogil: the loop never
needs the interpreter) while the main thread stays free to forward events to
the telemetry and catch Ctrl-C; live faults and changes are posted to the loop's
mailboxes from the `hil set` endpoint's thread (live.tuning: ``request_fault``). The loop thread and the
3RRR correction worker run at SCHED_FIFO ``loop.fifo_priority``, the main thread, the
telemetry writer and the live view at normal priority (timing.sched). Whatever ends the
run — its duration, Ctrl-C, an invalid plant state, too many overruns, rows the
telemetry lost (``telemetry.on_overrun``) — the log is closed complete, with the
timing summary. A run of sim.duration T logs the ticks at t = 0, h, ..., T. A loop that
stands still (a law that never returns: rt.law_watchdog.TickStall) ends the run from the
main thread after ``safety.tick_timeout``, or one timeout after Ctrl-C: one line naming
where it stopped, the log closed with every row so far, exit 1 (``os._exit``: the stuck
thread cannot be joined).
"""
from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from hilrig.controllers.factory import controller_from_config
from hilrig.controllers.interface import (
    bad_command_reason,
    detection_event,
    placeholder_controller,
)
from hilrig.controllers.limits import config_limits, violation
from hilrig.drivers.link import Measurement
from hilrig.drivers.registry import command_unit
from hilrig.errors import ConfigError
from hilrig.plant.factory import fault_schedule, initial_plant, plant_model
from hilrig.plant.family import for_plant
from hilrig.plant.faults import FAULT_COLUMNS, LIVE_ROWS, fault_event, live_row
from hilrig.plant.integrators import split_step_parts
from hilrig.plant.model import METHODS
from hilrig.plant.stepping import correct_initial_state
from hilrig.rt import realtime as rtk
from hilrig.rt.law_watchdog import TickStall, demote, end_process, tick_timeout
from hilrig.rt.live_mailbox import new_mailbox
from hilrig.rt.tick import (LawArrays, PlantArrays, RingArrays, Stepping, TickIO, control_parts,
                            plant_arrays)
from hilrig.schema import Config
from hilrig.telemetry.derived import Diagnostics
from hilrig.telemetry.recorder import (
    RowLoss,
    Telemetry,
    TelemetryError,
    ring_capacity,
    run_groups,
)
from hilrig.telemetry.rows import ring_full, row_columns
from hilrig.telemetry.scene import attach as attach_scene
from hilrig.timing.clock import spin_window_ns, timespec
from hilrig.timing.pacing import POLICIES, Pacing
from hilrig.timing.sched import FrozenGC, apply_thread, restore_thread
from hilrig.timing.signals import ignored_signals
from hilrig.timing.summary import summarize

POLL_SECONDS = 0.02
# --fast: the loop waits for the telemetry writer when its ring is full, and the writer for
# the supervisor to release the rows (after their events): both wake this often instead
FAST_POLL_SECONDS = 0.002

log = logging.getLogger("hil.session")


@dataclass
class SessionResult:
    ticks: int
    reason: str
    summary: dict
    log: Path
    status: str = "ok"          # "ok", "interrupted" (Ctrl-C, e-stop) or "error"
    events: list = field(default_factory=list)


def in_background(work: Callable[[], Any]) -> tuple[bool, Any]:
    """``work()`` (which compiles or loads kernels) in a daemon thread while this thread,
    the main one, waits: (True, None) if Ctrl-C came first, else (False, what it returned);
    its exception is raised here. Python runs a signal's handler in the main thread, so
    the KeyboardInterrupt lands in this wait, never inside numba's compiling or loading,
    whose callbacks from LLVM cannot take an exception (seen as a crash, or as another
    exception). After a Ctrl-C the work goes on to its end in the background."""
    result, errors = [], []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:         # handed to the main thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="hil-start-up", daemon=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(POLL_SECONDS)
    except KeyboardInterrupt:
        return True, None
    if errors:
        raise errors[0]
    return False, result[0]


def _inside(row) -> str | None:
    """What a tick's timing row (rt.tick.tick: each entry set as soon as known) shows it
    inside: "law" ([1] set, [2] not), "plant" ([2] set, [3] not), else None."""
    if not math.isnan(row[1]) and math.isnan(row[2]):
        return "law"
    if not math.isnan(row[2]) and math.isnan(row[3]):
        return "plant"
    return None


class _WarmUpInterrupted(Exception):
    """Ctrl-C before the first tick: the run ends with no tick and a finished log."""


def close_log(telemetry: Telemetry, summary: dict) -> None:
    """Finish the log with ``summary`` and write the summary beside it (LOG.timing.json).

    A write error here has already been reported (``Telemetry.failure``) or is reported
    now as one warning line: the run's summary is printed all the same.
    """
    with ignored_signals():
        try:
            telemetry.close(summary)
        except TelemetryError as exc:
            if summary.get("log_failure") is None:
                log.error("%s", exc)
                summary["log_failure"] = str(exc)
    try:
        telemetry.path.with_suffix(".timing.json").write_text(json.dumps(summary, indent=1))
    except OSError as exc:      # said once: a full disk has already been reported
        if summary.get("log_failure") is None:
            log.warning("cannot write %s: %s", telemetry.path.with_suffix(".timing.json"),
                        exc.strerror or exc)


class Session:
    """Everything one in-process run needs, allocated before the first tick.

    ``log_errors``: what a telemetry write error (a full disk) does: "stop" the run
    safely (the default), or "continue" it unlogged.
    """

    def __init__(self, cfg: Config, log_path: str | Path, fast: bool = False,
                 log_errors: str = "stop", hooks=(), on_abandon=None, ahead=None,
                 loop_only: bool = False):
        self.cfg = cfg
        # a second process compiling this session's loop (rt.loop_ahead.LoopAhead), which
        # warm_up waits for before it loads the loop from the cache; loop_only: a session
        # built only for compile_loop (that process's): its plant's initial state is not
        # corrected, it derives no diagnostics and its controller is a placeholder, none of
        # which the loop's kernels depend on
        self.ahead = ahead
        # what a run the law watchdog ended reports before the process ends (hil run's
        # lines): on_abandon(SessionResult)
        self.on_abandon = on_abandon
        self.loop_thread: int | None = None     # the loop thread's native id, once started
        self.rehearsal_marks = None             # the running loop's rehearsal timing row
        self.hooks = list(hooks)   # start(session) after the warm-up, stop() at the end
        self.fast = fast
        self.log_errors = log_errors
        self.log_failure: str | None = None
        sim, loop = cfg.sim, cfg.loop
        self.h = sim.dt
        self.n_steps = int(round(sim.duration / self.h))
        self.n_ticks = self.n_steps + 1          # t = 0, h, ..., duration
        if sim.integrator == "accurate":
            raise ConfigError("sim.integrator: 'accurate' is for offline runs (hil sim); "
                              "a real-time run needs 'rk4' or 'euler'")
        model = plant_model(cfg.plant.model)
        own_tick = model.tick(cfg) if model.tick is not None else None
        self.method = METHODS[sim.integrator] if own_tick is None else own_tick
        self.rehearse = own_tick is None     # a tick with state of its own is not rehearsed
        self.plant, self.correction = initial_plant(cfg, corrected=False)
        self.use_worker = self.correction != 0 and loop.correction == "worker" and not fast
        nx = len(self.plant.x)
        self.handoff = np.zeros(3 if self.use_worker else 0)
        self.snap, self.delta, self.corrected = np.zeros(nx), np.zeros(nx), np.zeros(nx)
        self.worker_work = np.zeros_like(self.plant.work)
        unit = command_unit(cfg.link.type, cfg.plant.drive)
        self.schedule = fault_schedule(cfg, LIVE_ROWS)      # spare rows: live faults
        self.request = np.zeros(FAULT_COLUMNS)
        nq, nact = self.plant.nq, self.plant.nact
        self.u, self.held = np.zeros(nact), np.zeros(nact)
        self.meas = Measurement(nact)
        self.limits = config_limits(cfg, nact, unit)
        self.mail = rtk.new_mail()
        self.events = np.zeros((1024, rtk.EVENT_COLUMNS))
        self.timings = np.full((self.n_ticks, 5), np.nan)
        # with a second process compiling the loop (rt.loop_ahead), some of its parts are
        # compiled here, around this process's own set-up (_compile_beside_ahead)
        helping = self.ahead is not None and self.ahead.running()
        arrays = plant_arrays(self.plant)
        if helping:
            self._compile_beside_ahead(self._tick_parts(arrays))
        if not loop_only:
            correct_initial_state(self.plant, self.correction)
        if helping:
            self._compile_beside_ahead(rtk.fault_parts(arrays, self.schedule, rtk.Supervision(
                self.mail, self.events, self.timings, self.request), self.h))
        self.controller = placeholder_controller() if loop_only else \
            controller_from_config(cfg, unit)
        self.live_box = new_mailbox(self.controller.params, self.limits)   # live.params
        groups = run_groups(plant_model(cfg.plant.model).diagnostics, nq, nact,
                            cfg.plant.drive)
        capacity = ring_capacity(self.h, cfg.telemetry.ring_rows, self.n_ticks)
        self.poll = FAST_POLL_SECONDS if fast else POLL_SECONDS
        self.telemetry = Telemetry(log_path, groups, cfg.to_dict(), capacity=capacity,
                                   **({"period": FAST_POLL_SECONDS} if fast else {}))
        try:
            self.row_loss = RowLoss(self.telemetry, cfg.telemetry.on_overrun, log)
            self.telemetry.released[0] = 0      # rows wait until their events are forwarded
            if not loop_only:
                interrupted, derive = in_background(
                    lambda: Diagnostics(cfg, self.telemetry.columns))
                if interrupted:
                    raise KeyboardInterrupt
                self.telemetry.derive = derive
                attach_scene(self.telemetry, cfg)       # the robot's 3D frames in the log
        except BaseException:               # Ctrl-C while it compiles: the log says so
            self.telemetry.close({"reason": "interrupted during start-up"})
            raise
        self.cols = row_columns(self.telemetry.columns)
        self.events_seen = 0
        self.lost_events = 0       # loop events overwritten before they were forwarded
        self.request_seq = 0
        self.scheduling: dict = {}
        self.finished = threading.Event()

    # -- the loop thread -----------------------------------------------------------
    def _loop_arguments(self, plant, state, detection, schedule, n_steps, paced, ring, head,
                        mail, events, timings, ts, handoff, live, request) -> tuple:
        """run_loop's arguments over ``plant`` (a plant.model.Plant), the law's ``state`` and
        its ``detection`` record, with its records built here: the run's own arrays, or the
        warm-up's copies."""
        loop = self.cfg.loop
        c = self.controller
        arrays = plant_arrays(plant)
        ctrl = LawArrays(c.params, state, self.limits, detection)
        io = TickIO(self.meas.buffer, self.u, self.held)
        pace = Pacing(paced, int(round(self.h * 1e9)), spin_window_ns(loop.spin, self.h),
                      POLICIES[loop.overrun], loop.max_overruns, ts)
        scratch = rtk.rehearsal(int(loop.rehearse * 1e9) if self.rehearse else 0, arrays, ctrl,
                                io)
        self.rehearsal_marks = scratch.marks     # (the warm-up's, then the run's)
        return (c.law, arrays, ctrl, io,
                Stepping(self.h, self.method, 0 if self.use_worker else self.correction),
                schedule, n_steps, RingArrays(ring, head, self.cols),
                rtk.Supervision(mail, events, timings, request), pace,
                rtk.Worker(handoff, self.snap, self.delta), scratch, for_plant(plant, self.method),
                live)

    def _worker_arguments(self, handoff) -> tuple:
        """correction_worker's arguments, with its ``handoff`` slots (rt.realtime.W_*)."""
        return (self.plant.params, handoff, self.snap, self.delta, self.corrected,
                self.correction, self.worker_work, int(self.cfg.loop.worker_poll * 1e9),
                timespec())

    def _warm_up_kernels(self) -> list:
        """(kernel, arguments) of every loop kernel the run calls, on copies: run_loop for
        two paced steps, and the correction worker (if any) told to stop at once."""
        ring = np.zeros_like(self.telemetry.ring[:4])
        kernels = [(rtk.run_loop, self._loop_arguments(
            self.plant.copy(), self.controller.state.copy(), self.controller.detection.copy(),
            self.schedule.copy(), 2, True, ring, np.zeros(2, np.int64), rtk.new_mail(),
            np.zeros_like(self.events), np.zeros((3, 5)), timespec(), self.handoff.copy(),
            self.live_box.copy(), self.request.copy()))]
        if self.use_worker:
            stopped = np.array([rtk.W_IDLE, 1.0, 0.0])
            kernels.append((rtk.correction_worker, self._worker_arguments(stopped)))
        return kernels

    def warm_up(self) -> None:
        """Compile or load every kernel on copies, so the first tick pays nothing. With a
        second process compiling the loop (``ahead``), wait for it first: the loop then
        loads from the cache."""
        if self.ahead is not None:
            if self.ahead.running():      # the correction worker, which it compiles last
                self._compile_beside_ahead(self._warm_up_kernels()[1:])
            self.ahead.wait()
        for kernel, arguments in self._warm_up_kernels():
            kernel(*arguments)
        self.u[:] = 0.0
        self.held[:] = 0.0

    def _tick_parts(self, arrays: PlantArrays) -> list:
        """The parts of the loop's tick (rt.tick.control, over a placeholder law of the same
        type, and the generic integrators of the plant's step), (kernel, arguments) each."""
        placeholder = placeholder_controller()
        ctrl = LawArrays(placeholder.params, placeholder.state, self.limits,
                         placeholder.detection)
        io = TickIO(self.meas.buffer, self.u, self.held)
        return control_parts(placeholder.law, ctrl, io, self.schedule, self.h) \
            + split_step_parts(arrays.p, arrays.jams, arrays.x, self.held, self.h, arrays.work,
                               arrays.stages, for_plant(self.plant, self.method))

    def _compile_beside_ahead(self, parts: list) -> None:
        """Compile ``parts`` of the loop, (kernel, arguments) each, while the second
        process compiles run_loop (rt.loop_ahead), each unless that process has claimed it
        already (jit.kernel.Kernel.compile_unclaimed): run_loop's typing then loads them
        from the cache. The set-up does so with the parts that its typing reaches in the
        middle (the tick's law call and generic integrators, before the plant's correction)
        and at its end (the fault table's kernels, after the correction; the correction
        worker at the warm-up), so that each is compiled before the second process needs it
        (docs/MEASURED.md, "Start-up")."""
        for kernel, arguments in parts:
            kernel.compile_unclaimed(arguments)

    def compile_loop(self) -> None:
        """Compile (or load) the kernels warm_up runs, for the same argument types, without
        running them (rt.loop_ahead's second process)."""
        for kernel, arguments in self._warm_up_kernels():
            kernel.compile(tuple(kernel.typeof_pyval(a) for a in arguments))

    def _worker_thread(self) -> None:
        """The correction worker at the loop's priority (any CPU): the loop takes its
        corrections only when ready, but a starved worker would leave the plant
        uncorrected for longer."""
        apply_thread(-1, self.cfg.loop.fifo_priority)
        try:
            rtk.correction_worker(*self._worker_arguments(self.handoff))
        finally:
            restore_thread()

    def _thread(self) -> None:
        loop = self.cfg.loop
        self.loop_thread = threading.get_native_id()
        self.scheduling = apply_thread(loop.cpu, 0 if self.fast else loop.fifo_priority)
        try:
            rtk.run_loop(*self._loop_arguments(
                self.plant, self.controller.state, self.controller.detection, self.schedule,
                self.n_steps, not self.fast, self.telemetry.ring, self.telemetry.head,
                self.mail, self.events, self.timings, timespec(), self.handoff,
                self.live_box, self.request))
        finally:
            restore_thread()
            self.finished.set()

    # -- the supervisor (main thread) --------------------------------------------------
    def request_fault(self, kind: str, joint: int, duration: float = 0.0,
                      params: dict | None = None, channel: str = "position") -> None:
        """Post a live fault for the next tick boundary: ``kind`` (plant.faults.KINDS: jam,
        clear, an actuator or sensor kind) on ``joint`` (1-based) for ``duration`` s (a
        jam's: its jamming dt; inf: until cleared), with ``params`` by name and a sensor
        fault's ``channel``. ValueError naming why this plant cannot take it."""
        p = self.plant
        self.request[:] = live_row(kind, joint, duration, params or {}, channel, p.nact,
                                   p.jammable_joints > 0,
                                   plant_model(self.cfg.plant.model).takes_actuator_faults(),
                                   self.cfg.plant.drive)
        self.request_seq += 1
        self.mail[rtk.M_REQ_SEQ] = self.request_seq

    def fault_acknowledged(self) -> tuple[int, float] | None:
        """(tick, plant time) at which the last posted fault took effect, or None yet;
        ValueError when the loop refused it (no spare row left in its fault table)."""
        if self.request_seq and self.mail[rtk.M_ACK_SEQ] == self.request_seq:
            if self.mail[rtk.M_ACK_ERROR] == rtk.ERR_FULL:
                raise ValueError(f"no room for another live fault ({LIVE_ROWS} taken)")
            return int(self.mail[rtk.M_ACK_TICK]), float(self.mail[rtk.M_ACK_TIME])
        return None

    def forward_events(self) -> list:
        """Copy new loop events into the telemetry, then release the rows they belong
        among to its writer; returns them as dicts."""
        out = []
        # the loop writes a tick's events before it counts the next tick (M_TICK): every
        # event of the ticks before ticks - 1 is in the array now
        ticks = int(self.mail[rtk.M_TICK])
        n = int(self.mail[rtk.M_EVENTS])
        first = max(self.events_seen, n - len(self.events))   # older ones were overwritten
        if first > self.events_seen:
            lost = first - self.events_seen
            self.lost_events += lost
            log.warning("the loop's event ring overflowed: %d events lost (the supervisor "
                        "fell behind)", lost)
            self.telemetry.event("event_overrun", lost=lost)
        for i in range(first, n):
            row = self.events[i % len(self.events)]
            kind, tick, t, a, b, c = (float(v) for v in row[:6])
            if kind in (rtk.EV_FAULT, rtk.EV_FAULT_END):
                event = fault_event(kind == rtk.EV_FAULT, int(a), bool(c), row[6:])
            elif kind == rtk.EV_JAM:
                event = {"kind": "jam", "joint": int(a), "t1": t, "t2": t + b, "duration": b,
                         "live": bool(c)}
            elif kind == rtk.EV_CLEAR:
                event = {"kind": "clear", "joint": int(a), "live": bool(c)}
            elif kind == rtk.EV_DETECTED:
                event = detection_event(a)
            elif kind == rtk.EV_OVERRUN:
                event = {"kind": "overrun", "missed": int(a), "lateness": b, "compute": c}
            else:
                event = {"kind": "stop", "reason": rtk.REASONS.get(int(a), "unknown"),
                         "overruns": int(b)}
            event.update(tick=int(tick), t=float(t))
            fields = {k: v for k, v in event.items() if k != "kind"}
            self.telemetry.event(event["kind"], **fields)
            out.append(event)
        self.events_seen = n
        self.telemetry.released[0] = max(0, ticks - 1)
        return out

    def _check_log(self) -> None:
        """A telemetry write error: stop the run (one line), or note it once and go on.
        Rows lost to a ring overrun: what ``telemetry.on_overrun`` says (RowLoss)."""
        if self.row_loss.check():
            self.mail[rtk.M_STOP] = 1.0
        failure = self.telemetry.failure
        if failure is None or self.log_failure is not None:
            return
        self.log_failure = failure
        if self.log_errors == "stop":
            log.error("%s: stopping the run", failure)
            self.mail[rtk.M_STOP] = 1.0
        else:
            log.warning("%s: the run goes on unlogged (--log-errors continue)", failure)

    def _check_stall(self, stall: TickStall, interrupted: bool) -> None:
        """The law watchdog of this loop (rt.law_watchdog.TickStall): a loop that stands
        still ends the run and the process (``_abandon``). A --fast loop waiting for room
        in a full ring is not standing still."""
        waiting = self.fast and ring_full(self.telemetry.ring, self.telemetry.head)
        standing = stall.check(int(self.mail[rtk.M_TICK]), waiting)
        if standing is not None:
            self._abandon(standing, stall.timeout_ns, interrupted)

    def _abandon(self, standing_ns: int, timeout_ns: int, interrupted: bool) -> None:
        """End a run whose loop stood still ``standing_ns`` at tick k (the main thread, the
        loop thread stuck): the loop thread put back to normal scheduling, one line naming
        the part that did not return (the law, the plant step, in the tick or its
        rehearsal, from their timing rows: rt.tick.tick), the log closed with every row so
        far and the summary, ``on_abandon``; then the process ends, exit 1."""
        demote(self.loop_thread)
        k = int(self.mail[rtk.M_TICK])
        row = self.timings[k] if k < len(self.timings) else np.full(5, np.nan)
        part, where = _inside(row), ""
        if part is None and self.rehearsal_marks is not None:
            part, where = _inside(self.rehearsal_marks), " (in its rehearsal, loop.rehearse)"
        what = "controller law" if part == "law" else "plant step" if part == "plant" \
            else "tick (the law or the plant step)"
        if interrupted:
            cause = f"interrupted (Ctrl-C or SIGTERM), but the {what} had not returned for " \
                    f"{standing_ns / 1e6:.0f} ms at tick {k}{where}"
        else:
            cause = f"{what} did not return within {timeout_ns / 1e6:g} ms at tick {k}{where}"
        reason = f"{cause}; run stopped"
        try:       # the process ends whatever fails here (a closed stdout, say)
            log.error("%s", reason)
            self.forward_events()
            self.telemetry.event("stop", t=k * self.h, tick=k, reason=reason)
            for hook in self.hooks:
                hook.stop()
            summary = summarize(self.timings[:k], int(self.mail[rtk.M_OVERRUNS]), self.scheduling)
            summary.update(reason=reason, rate_hz=1.0 / self.h, fast=self.fast,
                           policy=self.cfg.loop.overrun)
            self.telemetry.released[0] = k
            close_log(self.telemetry, summary)
            if self.on_abandon is not None:
                self.on_abandon(SessionResult(k, reason, summary, self.telemetry.path, "error"))
        finally:
            end_process(1)

    def run(self, on_tick=None) -> SessionResult:
        """Run to the end (or Ctrl-C); ``on_tick(session)`` is called every ``poll`` s
        (POLL_SECONDS; --fast: FAST_POLL_SECONDS)."""
        events, interrupted = [], False
        stall = TickStall(tick_timeout(self.cfg), self.h)
        thread = threading.Thread(target=self._thread, name="hil-rt", daemon=True)
        worker = threading.Thread(target=self._worker_thread, name="hil-correction",
                                  daemon=True)
        try:
            interrupted, _ = in_background(self.warm_up)
            if interrupted:
                self.telemetry.event("interrupt", t=0.0, during="warm-up")
                raise _WarmUpInterrupted
            self.telemetry.event("start", t=0.0, fast=self.fast, rate_hz=1.0 / self.h)
            for hook in self.hooks:
                hook.start(self)
            with FrozenGC(self.cfg.loop.gc_freeze and not self.fast):
                if self.use_worker:
                    worker.start()
                thread.start()
                while not self.finished.is_set():
                    try:
                        self.finished.wait(self.poll)
                        events += self.forward_events()
                        self._check_log()
                        self._check_stall(stall, interrupted)
                        if on_tick is not None:
                            on_tick(self)
                    except KeyboardInterrupt:
                        interrupted = True
                        self.mail[rtk.M_STOP] = 1.0
                        stall.stop_requested()
                        self.telemetry.event("interrupt", t=self.mail[rtk.M_TICK] * self.h)
        except _WarmUpInterrupted:
            pass
        finally:
            # (Thread.join interrupted by Ctrl-C can report a running thread as stopped:
            # the loop thread signals its end through ``finished`` instead)
            if thread.ident is not None and not self.finished.is_set():
                self.mail[rtk.M_STOP] = 1.0
                self.finished.wait(5.0)
            if self.use_worker:
                self.handoff[rtk.W_STOP] = 1.0
                if worker.is_alive():
                    worker.join(5.0)
            events += self.forward_events()
            self._check_log()
            for hook in self.hooks:
                hook.stop()
            reason = rtk.REASONS.get(int(self.mail[rtk.M_REASON]), "interrupted")
            if int(self.mail[rtk.M_REASON]) == rtk.R_BAD_COMMAND:   # the law's, with its inputs
                m = self.meas
                reason = bad_command_reason(self.controller.name, m.t, m.pos, m.vel,
                                            m.current, self.u)
            if int(self.mail[rtk.M_REASON]) == rtk.R_JOINT_LIMIT:   # the joint, its limit
                reason = violation(self.limits, self.meas.pos, self.meas.vel)
            if interrupted and thread.ident is None:
                reason = "interrupted during warm-up"
            elif self.log_failure is not None and self.log_errors == "stop":
                reason = self.log_failure
            if interrupted and thread.ident is not None:
                reason = "interrupted (Ctrl-C)"
            # every row written, so that the count of lost ones is final
            lost = self.row_loss.settle(reason) if self.log_failure is None else None
            if lost is not None:
                reason = lost
            if self.lost_events:
                reason += f", but {self.lost_events} loop events lost (event ring overflow)"
            if lost is not None or self.lost_events:
                log.error("%s", reason)
            ran = int(self.mail[rtk.M_TICK])
            summary = summarize(self.timings[:ran], int(self.mail[rtk.M_OVERRUNS]),
                                self.scheduling)
            summary.update(reason=reason,
                           rate_hz=1.0 / self.h, fast=self.fast,
                           correction=("worker" if self.use_worker else "inline")
                           if self.correction else "none",
                           corrections_by_worker=int(self.handoff[rtk.W_DONE])
                           if self.use_worker else 0,
                           policy=self.cfg.loop.overrun,
                           rehearse=self.cfg.loop.rehearse)
            if self.log_failure is not None:
                summary["log_failure"] = self.log_failure
            if self.telemetry.lost_rows:
                summary["lost_rows"] = self.telemetry.lost_rows
            if self.lost_events:
                summary["lost_events"] = self.lost_events
            close_log(self.telemetry, summary)
        status = "interrupted" if interrupted else (
            "error" if reason == self.log_failure else
            "ok" if reason in (rtk.REASONS[rtk.R_DONE], rtk.REASONS[rtk.R_STOP_REQUEST]) else "error")
        return SessionResult(ran, reason, summary, self.telemetry.path, status, events)
