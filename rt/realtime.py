"""The in-process real-time loop: controller and plant in one compiled kernel.

``run_loop`` runs a whole session inside numba (nogil), so no tick crosses
the Python boundary: per tick it waits for the absolute deadline t0 + k·period
(sleep, then spin: timing.pacing, as every paced loop), applies due faults and live
changes, then runs rt.tick.tick, the tick body every compiled loop shares: it reads
the measurement, runs the controller and the command limits, records one telemetry
row and steps the plant. A run of n steps has n + 1 ticks and rows, at t = 0, h, ..., n h (as ``hil
sim``'s): the last tick measures and controls but steps nothing. Python threads talk
to it through two preallocated arrays read and written with atomics: ``mail`` (stop
and fault requests, acknowledgements, progress) and ``events`` (fault, overrun and
stop events for the telemetry). Unpaced (``--fast``: no deadline), a tick whose row
would overwrite one the telemetry writer has not taken yet waits for it, so the log
keeps every row; a paced loop never waits (telemetry.recorder.RowLoss).

Telemetry row (telemetry.recorder.run_groups; ``cols`` from ``row_columns``): the
loop writes t (plant time, s), q, qd (all coordinates), u (command, V or N m),
i (motor currents, A), tick, lateness (wake-up time after the deadline, s),
compute_read, compute_control, compute_write (the plant step) and compute_tick
(wake-up to step done), s; the telemetry writer derives the model's
diagnostics off the critical path. Rows of ticks the loop skipped after an
overrun (policy "skip": the plant goes on under the held command) have NaN
lateness and compute times.

Deadlines never drift: tick k is due at t0 + k·period (int64 ns), whatever
happened before it.
"""
from typing import NamedTuple

import numpy as np
from hilrig.controllers.interface import D_CODE, D_TICK
from hilrig.jit.kernel import kernel
from hilrig.plant.faults import (
    C_CHANNEL,
    C_DURATION,
    C_JOINT,
    C_KIND,
    C_LIVE,
    C_P0,
    C_P1,
    C_P2,
    C_P3,
    C_REPORTED,
    C_STATE,
    C_T1,
    K_CLEAR,
    K_JAM,
    S_OVER,
    S_PENDING,
    add_row,
    faults_due,
)
from hilrig.plant.layout import H_NACT, H_NQ
from hilrig.plant.stepping import advance, apply_schedule, correct
from hilrig.rt.live_mailbox import apply_pending
from hilrig.rt.tick import (T_BAD_COMMAND, T_JOINT_LIMIT, T_OK, LawArrays, PlantArrays, TickIO,
                            limit_tick, ring_currents, tick)
from hilrig.telemetry.rows import fill_row, publish_row, ring_full
from hilrig.timing.clock import (
    atomic_load,
    atomic_store,
    now_ns,
    sleep_until_ns,
    wait_until_ns,
)
from hilrig.timing.pacing import GO_ON, STOP_RUN, after_overrun, deadline_ns, missed_ticks

# mail slots (2-4 are free: a live fault's request is Supervision.request now; the others
# keep their numbers)
M_STOP, M_REQ_SEQ = 0, 1
M_ACK_SEQ, M_ACK_TICK, M_ACK_TIME, M_ACK_ERROR, M_TICK, M_EVENTS, M_OVERRUNS, \
    M_REASON = range(5, 13)
MAIL_SIZE = 16
# a live fault request's refusals (mail[M_ACK_ERROR])
ERR_JOINT, ERR_FULL = 1.0, 3.0
# event kinds; event rows: [kind, tick, t, a, b, c, then a fault's: kind code, channel,
# duration (s), its parameters P0..P3]
EV_JAM, EV_CLEAR, EV_OVERRUN, EV_STOP, EV_FAULT, EV_FAULT_END, EV_DETECTED = 1, 2, 3, 4, 5, 6, 7
EVENT_COLUMNS = 13
# why a run ended
R_DONE, R_STOP_REQUEST, R_OVERRUNS, R_INVALID_STATE, R_BAD_COMMAND, R_JOINT_LIMIT = \
    1, 2, 3, 4, 5, 6
REASONS = {R_DONE: "done", R_STOP_REQUEST: "stop requested", R_OVERRUNS: "too many overruns",
           R_INVALID_STATE: "plant state invalid (NaN or singular mass matrix)",
           R_BAD_COMMAND: "controller produced a non-finite command",
           R_JOINT_LIMIT: "a joint left its safety limits"}
RING_WAIT_NS = 100_000   # unpaced: a full telemetry ring is polled this often, ns


def new_mail() -> np.ndarray:
    return np.zeros(MAIL_SIZE)


@kernel
def _event(events, mail, kind, tick, t, a, b, c):
    """Append an event row [kind, tick, t, a, b, c] (its fault columns zero)."""
    n = int(atomic_load(mail, M_EVENTS))
    row = n % events.shape[0]
    events[row, 0] = kind
    events[row, 1] = tick
    events[row, 2] = t
    events[row, 3] = a
    events[row, 4] = b
    events[row, 5] = c
    for i in range(6, events.shape[1]):
        events[row, i] = 0.0
    atomic_store(mail, M_EVENTS, n + 1.0)


@kernel
def _fault_event(events, mail, kind, tick, t, fault):
    """Append the event ``kind`` of the fault table's row ``fault`` (plant.faults): a jam
    as EV_JAM [joint, jamming dt, live], a clear as EV_CLEAR [joint, 0, live], the others
    [joint, 0, live, kind code, channel, duration, P0..P3] in full, so that a replay can
    rebuild a live fault from its event."""
    code = int(fault[C_KIND])
    joint = fault[C_JOINT] + 1.0
    if code == K_JAM:
        _event(events, mail, EV_JAM, tick, t, joint, fault[C_P0], fault[C_LIVE])
        return
    if code == K_CLEAR:
        _event(events, mail, EV_CLEAR, tick, t, joint, 0.0, fault[C_LIVE])
        return
    n = int(atomic_load(mail, M_EVENTS))
    row = events[n % events.shape[0]]
    row[0], row[1], row[2], row[3], row[4], row[5] = kind, tick, t, joint, 0.0, fault[C_LIVE]
    row[6], row[7], row[8] = code, fault[C_CHANNEL], fault[C_DURATION]
    row[9], row[10], row[11], row[12] = fault[C_P0], fault[C_P1], fault[C_P2], fault[C_P3]
    atomic_store(mail, M_EVENTS, n + 1.0)


@kernel
def _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, tick):
    """Start and end the fault table's rows that are due (plant.stepping.apply_schedule) and
    report each change once (C_REPORTED follows C_STATE): a start as EV_JAM, EV_CLEAR or
    EV_FAULT, an end as EV_FAULT_END (a jam ends only by a clear, its own event)."""
    apply_schedule(p, jams, schedule, t, x, tol)
    for r in range(schedule.shape[0]):
        row = schedule[r]
        if row[C_KIND] == 0.0:
            break
        if row[C_STATE] == row[C_REPORTED]:
            continue
        if row[C_REPORTED] == S_PENDING:
            _fault_event(events, mail, EV_FAULT, tick, t, row)
        if row[C_STATE] == S_OVER and row[C_KIND] != K_JAM and row[C_KIND] != K_CLEAR:
            _fault_event(events, mail, EV_FAULT_END, tick, t, row)
        row[C_REPORTED] = row[C_STATE]


@kernel
def _serve_request(p, jams, x, schedule, request, mail, events, tick, t, tol):
    """Take a pending live fault request (the row ``request``, plant.faults.fault_row) at
    this tick boundary: written into the fault table's first spare row with t1 = t, started
    (and reported) there at once; acknowledged with the tick and time, or refused
    (ERR_JOINT: no such joint; ERR_FULL: no spare row left)."""
    seq = atomic_load(mail, M_REQ_SEQ)
    if seq == mail[M_ACK_SEQ]:
        return
    error = 0.0
    joint = int(request[C_JOINT])
    if joint < 0 or joint >= int(p[H_NACT]):
        error = ERR_JOINT
    else:
        request[C_T1] = t
        if add_row(schedule, request) < 0:
            error = ERR_FULL
        else:
            _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, tick)
    mail[M_ACK_TICK] = tick
    mail[M_ACK_TIME] = t
    mail[M_ACK_ERROR] = error
    atomic_store(mail, M_ACK_SEQ, seq)


# the post-adjustment worker's handoff array: [state, stop flag, corrections done]
W_STATE, W_STOP, W_DONE = 0, 1, 2
W_IDLE, W_REQUESTED, W_READY = 0.0, 1.0, 2.0


@kernel
def _apply_correction(handoff, snap, delta, x):
    """Tick start: add a finished correction delta = P(snap) - snap to the state.

    The snapshot was taken at the end of a previous tick; if the worker finished
    before this tick began, x still equals snap and x becomes P(snap) exactly as
    an in-line correction would make it.
    """
    if atomic_load(handoff, W_STATE) == W_READY:
        for i in range(x.shape[0]):
            x[i] += delta[i]
        atomic_store(handoff, W_STATE, W_IDLE)


@kernel
def _request_correction(handoff, snap, x):
    """Tick end (after the step): hand the worker a snapshot if it is idle."""
    if atomic_load(handoff, W_STATE) == W_IDLE:
        for i in range(x.shape[0]):
            snap[i] = x[i]
        atomic_store(handoff, W_STATE, W_REQUESTED)


@kernel
def correction_worker(p, handoff, snap, delta, corrected, correction, work, poll_ns, ts):
    """Serve correction requests until handoff[W_STOP] is set (run it in its own thread).

    Projects each snapshot onto the constraint manifolds (plant.stepping.correct
    with ``correction``) and publishes delta = P(snap) - snap. Sleeps ``poll_ns``
    between checks. Returns the number of corrections made.
    """
    done = 0
    while atomic_load(handoff, W_STOP) == 0.0:
        if atomic_load(handoff, W_STATE) == W_REQUESTED:
            for i in range(snap.shape[0]):
                corrected[i] = snap[i]
            correct(p, corrected, correction, work)
            for i in range(snap.shape[0]):
                delta[i] = corrected[i] - snap[i]
            done += 1
            handoff[W_DONE] = done
            atomic_store(handoff, W_STATE, W_READY)
        else:
            sleep_until_ns(ts, now_ns(ts) + poll_ns)
    return done


@kernel
def control_tick(law, params, state, limits, h, t, pos, vel, cur, u, held):
    """The control law (controllers.interface), then the command limits (rt.tick.limit_tick);
    the result becomes ``held``: what a Python loop (rt.loop) calls per tick.

    Returns False (``held`` unchanged) if the controller produced a non-finite command.
    """
    law(t, pos, vel, cur, params, state, u)
    return limit_tick(limits, h, u, held)


class Supervision(NamedTuple):
    """What run_loop shares with the thread that supervises it (rt.session): ``mail``
    (MAIL_SIZE slots: requests, acknowledgements, progress), ``events`` (rows of
    EVENT_COLUMNS), ``timings`` (a row of 5 per tick, s: lateness, read, control,
    write, whole tick; NaN for skipped ticks) and ``request`` (a live fault's row of the
    fault table, plant.faults, posted with mail[M_REQ_SEQ])."""
    mail: np.ndarray
    events: np.ndarray
    timings: np.ndarray
    request: np.ndarray


class Worker(NamedTuple):
    """The constraint correction's worker (``correction_worker``): ``handoff`` (W_* slots;
    no entries: no worker), the ``snap`` shot of the state and the ``delta`` to add."""
    handoff: np.ndarray
    snap: np.ndarray
    delta: np.ndarray


class Rehearsal(NamedTuple):
    """The rehearsal (``_rehearse``): ``ns`` before each paced deadline (0: none), and the
    copies it steps: the plant's jams and state (its params and scratch shared), the
    law's state, the command, the held command and the measurement buffer; ``marks``, its
    timing row (rt.tick.tick: [1] set and [2] NaN while the rehearsal is inside the law,
    which the law watchdog reads)."""
    ns: int
    plant: PlantArrays
    ctrl: LawArrays
    io: TickIO
    marks: np.ndarray


def rehearsal(ns: int, plant: PlantArrays, ctrl: LawArrays, io: TickIO) -> Rehearsal:
    """The Rehearsal record of a loop over ``plant``, ``ctrl`` and ``io``: its copies made
    here, before the loop (run_loop allocates nothing)."""
    return Rehearsal(ns, plant._replace(jams=plant.jams.copy(), x=plant.x.copy()),
                     ctrl._replace(state=ctrl.state.copy(), detection=ctrl.detection.copy()),
                     TickIO(io.meas.copy(), io.u.copy(), io.held.copy()), np.full(5, np.nan))


@kernel
def _rehearse(law, plant, ctrl, io, stepping, faults, t, k, scratch, mech, ts):
    """The tick (rt.tick.tick) on scratch copies, run in the spin shortly before a deadline.

    After the sleep, the vCPU's caches, TLB and branch predictors hold other work: the
    tick's first pass through its code costs about twice a warm one (bench/bench_rt.py,
    with and without ``loop.rehearse``). Rehearsing it moves those misses ahead of the
    deadline, so the real tick (and the command it sends) runs warm. The run's state,
    jams and commands are left untouched: ``scratch`` (Rehearsal) gets copies of them
    (element loops: kernels run without numba's runtime); the plant's ``work`` and
    ``stages`` are scratch that every tick overwrites (but for the Rosenbrock step's lagged
    Jacobian in ``work``, of which the rehearsal refreshes a column at the run's state).
    Its timing row goes to ``scratch.marks`` (``ts``: the loop's clock), where the law
    watchdog sees a law that does not return in the rehearsal (rt.law_watchdog).
    """
    copy = scratch.plant
    for r in range(plant.jams.shape[0]):
        for c in range(plant.jams.shape[1]):
            copy.jams[r, c] = plant.jams[r, c]
    for i in range(plant.x.shape[0]):
        copy.x[i] = plant.x[i]
    for j in range(io.held.shape[0]):
        scratch.io.held[j] = io.held[j]
    for i in range(ctrl.state.shape[0]):
        scratch.ctrl.state[i] = ctrl.state[i]
    for i in range(ctrl.detection.shape[0]):
        scratch.ctrl.detection[i] = ctrl.detection[i]
    for i in range(scratch.marks.shape[0]):
        scratch.marks[i] = np.nan
    tick(law, copy, scratch.ctrl, scratch.io, stepping, faults, t, k, False, None, None, None,
         scratch.marks, ts, now_ns(ts), mech)


@kernel
def run_loop(law, plant, ctrl, io, stepping, schedule, n_steps, ring, sup, pace, worker,
             scratch, mech=None, live=None):
    """Run ticks k = 0 .. n_steps (plant time t = k h at tick k), the plant stepped after
    each but the last; returns the tick count run (n_steps + 1 for a whole run).

    Records (rt.tick): ``plant`` (PlantArrays), ``ctrl`` (LawArrays), ``io`` (TickIO),
    ``stepping`` (Stepping), ``ring`` (RingArrays: telemetry.recorder), ``sup``
    (Supervision), ``pace`` (timing.pacing.Pacing), ``worker`` (Worker), ``scratch``
    (Rehearsal). ``law``: a compiled law, or None for the built-in (rt.tick.law_of);
    ``schedule``: the fault table (plant.factory.fault_schedule, with spare rows for live
    faults).

    Each tick runs rt.tick.tick, the body every compiled loop shares. Unpaced
    (``pace.paced`` False) the loop runs as fast as it can (no deadline; the arithmetic is
    rt.lockstep.run's), waiting only for room in the telemetry ring. Paced, it waits for
    each deadline and applies the overrun policy (timing.pacing). The reason the run ended
    is left in mail[M_REASON]. With a worker (``worker.handoff`` of length > 0; pass
    ``stepping.correction`` = 0) the constraint correction runs in ``correction_worker``:
    the loop only swaps snapshots and corrections at tick boundaries. With
    ``scratch.ns`` > 0 (at most ``pace.spin_ns``) each paced tick is rehearsed
    (``_rehearse``) that long before its deadline. ``mech``: what the plant code is
    compiled for (plant.family). ``live``: a live-parameter mailbox (rt.live_mailbox),
    polled once per tick before the controller.

    Compiled without numba's runtime, as every kernel it calls: it allocates nothing, and
    no tick counts references to the arrays it passes on (with the runtime, the inlined
    plant step counted about 18 a tick).
    """
    use_worker = worker.handoff.shape[0] > 0
    x, jams, p, held = plant.x, plant.jams, plant.p, io.held
    mail, events, timings = sup.mail, sup.events, sup.timings
    h = stepping.h
    paced, period_ns, ts = pace.paced, pace.period_ns, pace.ts
    nq = int(p[H_NQ])
    cur = io.meas[1 + 2 * held.shape[0]:1 + 3 * held.shape[0]]
    tol = 1e-9 * h
    overruns = 0
    reason = R_DONE
    rehearse_ns = min(scratch.ns, pace.spin_ns) if paced else 0
    start = now_ns(ts) + period_ns
    k = 0
    while k <= n_steps:
        if not paced:       # no deadline: wait for the writer rather than lap it
            while ring_full(ring.ring, ring.head) and atomic_load(mail, M_STOP) == 0.0:
                sleep_until_ns(ts, now_ns(ts) + RING_WAIT_NS)
        if atomic_load(mail, M_STOP) != 0.0:
            reason = R_STOP_REQUEST
            break
        deadline = deadline_ns(start, k, period_ns)
        if rehearse_ns > 0:
            woke = wait_until_ns(ts, deadline - rehearse_ns, pace.spin_ns - rehearse_ns)
            if woke < deadline - rehearse_ns // 2:      # not when already late
                _rehearse(law, plant, ctrl, io, stepping, schedule, k * h, k, scratch, mech, ts)
        wake = wait_until_ns(ts, deadline, pace.spin_ns) if paced else now_ns(ts)
        t = k * h
        # before the tick: a finished correction, faults due now, live changes
        if use_worker:
            _apply_correction(worker.handoff, worker.snap, worker.delta, x)
        if faults_due(schedule, t, tol):       # a row may start or end (plant.faults)
            _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, k)
        _serve_request(p, jams, x, schedule, sup.request, mail, events, k, t, tol)
        if live is not None:
            apply_pending(live, ctrl.params, ctrl.limits, k, t)
        last = k == n_steps
        timing = timings[k]
        timing[0] = (wake - deadline) * 1e-9 if paced else 0.0
        done = tick(law, plant, ctrl, io, stepping, schedule, t, k, last, ring, None, None,
                    timing, ts, wake, mech)
        if done == T_BAD_COMMAND:
            reason = R_BAD_COMMAND
            break
        if done == T_JOINT_LIMIT:
            reason = R_JOINT_LIMIT
            break
        if ctrl.detection.shape[0] > 0 and ctrl.detection[D_TICK] == k:   # first detection
            _event(events, mail, EV_DETECTED, k, t, ctrl.detection[D_CODE], 0.0, 0.0)
        if use_worker and not last:
            _request_correction(worker.handoff, worker.snap, x)
        publish_row(ring.ring, ring.head, ring.cols, timing)
        k += 1
        atomic_store(mail, M_TICK, float(k))
        ok = done == T_OK
        if not ok:
            reason = R_INVALID_STATE
            break
        if not paced or last:
            continue
        missed = missed_ticks(now_ns(ts), start, k, period_ns)
        if missed == 0:
            continue
        overruns += 1
        atomic_store(mail, M_OVERRUNS, float(overruns))
        _event(events, mail, EV_OVERRUN, k - 1, t, float(missed), timing[0], timing[4])
        action = after_overrun(pace.policy, overruns, pace.max_overruns)
        if action == STOP_RUN:
            reason = R_OVERRUNS
            break
        if action == GO_ON:
            continue
        for m in range(missed):  # skip: no control, the plant goes on under the held command
            if k >= n_steps or not ok:      # (the last tick is never skipped)
                break
            t = k * h
            _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, k)
            fill_row(ring.ring, ring.head, ring.cols, k, t, x, nq, held, cur, io.meas)
            ring_currents(plant, held, ring, True)    # a faulty winding's, as a tick's row
            ok = advance(p, jams, t, x, held, h, stepping.method, stepping.correction,
                         plant.work, plant.stages, mech)
            for c in range(timings.shape[1]):
                timings[k, c] = np.nan
            publish_row(ring.ring, ring.head, ring.cols, timings[k])
            k += 1
            atomic_store(mail, M_TICK, float(k))
        if not ok:
            reason = R_INVALID_STATE
            break
    mail[M_REASON] = reason
    # the stop: at the ticks run, and the time the run got to
    _event(events, mail, EV_STOP, k, min(k, n_steps) * h, float(reason), float(overruns), 0.0)
    return k


def fault_parts(plant: PlantArrays, schedule, sup: Supervision, h: float) -> list:
    """run_loop's fault-table kernels (the scheduled faults' starts and ends, a live
    fault's request), each as (kernel, arguments of the types run_loop passes it: its
    ``plant``, ``schedule`` and ``sup``, ``h`` its step, s): what a run's first process
    compiles while the second types run_loop (rt.loop_ahead), so that run_loop's typing
    loads them from the cache."""
    p, jams, x = plant.p, plant.jams, plant.x
    t, tol, k = 0.0, 1e-9 * h, 0
    return [(_scheduled_faults, (p, jams, schedule, t, x, tol, sup.events, sup.mail, k)),
            (_serve_request, (p, jams, x, schedule, sup.request, sup.mail, sup.events, k, t,
                              tol))]
