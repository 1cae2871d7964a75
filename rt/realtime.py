"""The in-process real-time loop: controller and plant in one compiled kernel.

``run_loop`` runs a whole session inside numba (nogil), so no tick crosses
the Python boundary: per tick it waits for the absolute deadline t0 + k·period
(sleep, then spin), applies due faults, reads the measurement, runs the
controller and the command limits, steps the plant, and records one telemetry
row. A run of n steps has n + 1 ticks and rows, at t = 0, h, ..., n h (as ``hil
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
import numpy as np
from hilrig.plant.jam import clear_jam, start_jam
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.layout import H_NACT, H_NQ
from hilrig.plant.motor import currents
from hilrig.plant.stepping import advance, apply_schedule, correct
from hilrig.rt.live_mailbox import apply_pending
from hilrig.telemetry.rows import fill_row, publish_row, ring_full
from hilrig.timing.clock import (
    atomic_load,
    atomic_store,
    now_ns,
    sleep_until_ns,
    wait_until_ns,
)

# mail slots
M_STOP, M_REQ_SEQ, M_REQ_KIND, M_REQ_JOINT, M_REQ_DURATION, M_ACK_SEQ, M_ACK_TICK, \
    M_ACK_TIME, M_ACK_ERROR, M_TICK, M_EVENTS, M_OVERRUNS, M_REASON = range(13)
MAIL_SIZE = 16
# fault request kinds
F_JAM = 1
F_CLEAR = 2
# event kinds; event rows: [kind, tick, t, a, b, c]
EV_JAM, EV_CLEAR, EV_OVERRUN, EV_STOP = 1, 2, 3, 4
EVENT_COLUMNS = 6
# why a run ended
R_DONE, R_STOP_REQUEST, R_OVERRUNS, R_INVALID_STATE, R_BAD_COMMAND = 1, 2, 3, 4, 5
REASONS = {R_DONE: "done", R_STOP_REQUEST: "stop requested", R_OVERRUNS: "too many overruns",
           R_INVALID_STATE: "plant state invalid (NaN or singular mass matrix)",
           R_BAD_COMMAND: "controller produced a non-finite command"}
# overrun policies
SKIP, CATCH_UP, STOP = 0, 1, 2
POLICIES = {"skip": SKIP, "catch_up": CATCH_UP, "stop": STOP}
# limits rows: max |u| (V or N m), max slew (V/s or N m/s)
L_MAX, L_SLEW = 0, 1
RING_WAIT_NS = 100_000   # unpaced: a full telemetry ring is polled this often, ns


def new_mail() -> np.ndarray:
    return np.zeros(MAIL_SIZE)


@kernel
def _event(events, mail, kind, tick, t, a, b, c):
    n = int(atomic_load(mail, M_EVENTS))
    row = n % events.shape[0]
    events[row, 0] = kind
    events[row, 1] = tick
    events[row, 2] = t
    events[row, 3] = a
    events[row, 4] = b
    events[row, 5] = c
    atomic_store(mail, M_EVENTS, n + 1.0)


@kernel
def _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, tick):
    """Start the config's jams that are due (plant.stepping.apply_schedule) and report each once.

    A reported row's applied flag goes from 1 to 2.
    """
    apply_schedule(p, jams, schedule, t, x, tol)
    for r in range(schedule.shape[0]):
        if schedule[r, 3] == 1.0:
            schedule[r, 3] = 2.0
            _event(events, mail, EV_JAM, tick, t, schedule[r, 0] + 1.0, schedule[r, 2], 0.0)


@kernel
def _serve_request(p, jams, x, mail, events, tick, t):
    """Apply a pending live fault request (at this tick boundary) and acknowledge it."""
    seq = atomic_load(mail, M_REQ_SEQ)
    if seq == mail[M_ACK_SEQ]:
        return
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    kind = int(mail[M_REQ_KIND])
    joint = int(mail[M_REQ_JOINT])
    error = 0.0
    if joint < 0 or joint >= nact:
        error = 1.0
    elif kind == F_JAM:
        start_jam(jams, x, nq, joint, t, mail[M_REQ_DURATION])
        _event(events, mail, EV_JAM, tick, t, joint + 1.0, mail[M_REQ_DURATION], 1.0)
    elif kind == F_CLEAR:
        clear_jam(jams, joint)
        _event(events, mail, EV_CLEAR, tick, t, joint + 1.0, 0.0, 1.0)
    else:
        error = 2.0
    mail[M_ACK_TICK] = tick
    mail[M_ACK_TIME] = t
    mail[M_ACK_ERROR] = error
    atomic_store(mail, M_ACK_SEQ, seq)


@inline_kernel
def _limit(limits, h, u, held):
    """Clamp u's change per tick to max slew · h, then u to ±max (the bound wins: a max
    lowered below the held command clamps at once); False if u is not finite."""
    for j in range(u.shape[0]):
        if not np.isfinite(u[j]):
            return False
        step = limits[L_SLEW, j] * h
        u[j] = min(max(u[j], held[j] - step), held[j] + step)
        u[j] = min(max(u[j], -limits[L_MAX, j]), limits[L_MAX, j])
    return True


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
    """The control law (controllers.interface), then the command limits; the result
    becomes ``held``.

    Returns False (``held`` unchanged) if the controller produced a non-finite command.
    """
    law(t, pos, vel, cur, params, state, u)
    return limit_tick(limits, h, u, held)


@inline_kernel
def limit_tick(limits, h, u, held):
    """The command limits on a command u computed elsewhere (a Python law); the result
    becomes ``held``. Returns False (``held`` unchanged) if u is not finite."""
    if not _limit(limits, h, u, held):
        return False
    for j in range(u.shape[0]):
        held[j] = u[j]
    return True


def rehearsal_scratch(jams, x, u, held, meas, state) -> tuple:
    """The copies ``run_loop``'s rehearsals step (``scratch``): of the jams, the state, the
    command and the held command, the measurement buffer and the law's state."""
    return jams.copy(), x.copy(), u.copy(), held.copy(), meas.copy(), state.copy()


@kernel
def _rehearse(p, jams, law, params, state, limits, h, t, x, held, work, stages, method,
              correction, scratch_jams, scratch_x, scratch_u, scratch_held, scratch_meas,
              scratch_state, mech):
    """The tick's arithmetic (measure, control, limits, step, correction) on scratch copies.

    Run in the spin shortly before a deadline. After the sleep, the vCPU's caches,
    TLB and branch predictors hold other work: the tick's first pass through its
    code costs about twice a warm one (bench/bench_rt.py, with and without
    ``loop.rehearse``). Rehearsing it
    moves those misses ahead of the deadline, so the real tick (and the command
    it sends) runs warm. The run's state, jams and commands are left untouched;
    The law runs on a copy of its state (``scratch_state``); ``work`` and ``stages``
    are scratch that every tick overwrites (but for the Rosenbrock step's lagged
    Jacobian in ``work``, of which the rehearsal refreshes a column at the run's state).
    """
    nq = int(p[H_NQ])
    nact = held.shape[0]
    for r in range(jams.shape[0]):   # element loops: kernels run without numba's runtime
        for c in range(jams.shape[1]):
            scratch_jams[r, c] = jams[r, c]
    for i in range(x.shape[0]):
        scratch_x[i] = x[i]
    for j in range(nact):
        scratch_held[j] = held[j]
    for i in range(state.shape[0]):
        scratch_state[i] = state[i]
    pos = scratch_meas[1:1 + nact]
    vel = scratch_meas[1 + nact:1 + 2 * nact]
    cur = scratch_meas[1 + 2 * nact:1 + 3 * nact]
    for j in range(nact):
        pos[j] = scratch_x[j]
        vel[j] = scratch_x[nq + j]
    currents(p, scratch_x, scratch_held, cur)
    if control_tick(law, params, scratch_state, limits, h, t, pos, vel, cur, scratch_u,
                    scratch_held):
        advance(p, scratch_jams, t, scratch_x, scratch_held, h, method, correction, work,
                stages, mech)


@kernel
def run_loop(p, jams, law, params, state, schedule, x, h, n_steps, method, correction, work,
             stages, limits, u, held, meas, ring, head, cols, mail, events, timings, paced,
             period_ns, spin_ns, rehearse_ns, policy, max_overruns, ts, handoff, snap, delta,
             scratch, mech=None, live=None):
    """Run ticks k = 0 .. n_steps (plant time t = k h at tick k), the plant stepped after
    each but the last; returns the tick count run (n_steps + 1 for a whole run).

    ``timings`` (n_steps + 1, 5): per tick lateness, read, control, write and whole
    tick compute time, s (NaN for skipped ticks).
    ``u`` and ``held`` (n_act): the new and the held command; ``meas``: a
    drivers.link.Measurement buffer; ``paced`` False runs as fast as it can
    (lockstep, no deadline; the arithmetic is the same as rt.lockstep.run), waiting
    only for room in the telemetry ring (``ring``, ``head``: telemetry.recorder).
    The reason the run ended is left in mail[M_REASON]. With ``handoff`` of
    length > 0 the constraint correction runs in ``correction_worker`` (pass
    correction = 0): the loop only swaps snapshots and corrections at tick
    boundaries. With ``rehearse_ns`` > 0 (at most ``spin_ns``) each paced tick
    is rehearsed (``_rehearse``) that long before its deadline. ``mech``: a user's
    chain's mechanism (plant.interface; None for the built-in models). ``live``: a
    live-parameter mailbox (rt.live_mailbox), polled once per tick before the controller.
    ``scratch``: the rehearsal's copies (``rehearsal_scratch``), made before the loop.

    Compiled without numba's runtime, as every kernel it calls: it allocates nothing, and
    no tick counts references to the arrays it passes on (with the runtime, the inlined
    plant step counted about 18 a tick).
    """
    use_worker = handoff.shape[0] > 0
    nq = int(p[H_NQ])
    nact = int(p[H_NACT])
    pos = meas[1:1 + nact]
    vel = meas[1 + nact:1 + 2 * nact]
    cur = meas[1 + 2 * nact:1 + 3 * nact]
    tol = 1e-9 * h
    overruns = 0
    reason = R_DONE
    rehearse_ns = min(rehearse_ns, spin_ns) if paced else 0
    scratch_jams, scratch_x, scratch_u, scratch_held, scratch_meas, scratch_state = scratch
    start = now_ns(ts) + period_ns
    k = 0
    while k <= n_steps:
        if not paced:       # no deadline: wait for the writer rather than lap it
            while ring_full(ring, head) and atomic_load(mail, M_STOP) == 0.0:
                sleep_until_ns(ts, now_ns(ts) + RING_WAIT_NS)
        if atomic_load(mail, M_STOP) != 0.0:
            reason = R_STOP_REQUEST
            break
        deadline = start + k * period_ns
        if rehearse_ns > 0:
            woke = wait_until_ns(ts, deadline - rehearse_ns, spin_ns - rehearse_ns)
            if woke < deadline - rehearse_ns // 2:      # not when already late
                _rehearse(p, jams, law, params, state, limits, h, k * h, x, held, work, stages,
                          method, correction, scratch_jams, scratch_x, scratch_u,
                          scratch_held, scratch_meas, scratch_state, mech)
        wake = wait_until_ns(ts, deadline, spin_ns) if paced else now_ns(ts)
        t = k * h
        # read: a finished correction, faults due now, then the measurement
        if use_worker:
            _apply_correction(handoff, snap, delta, x)
        _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, k)
        _serve_request(p, jams, x, mail, events, k, t)
        if live is not None:
            apply_pending(live, params, limits, k, t)
        meas[0] = t
        for j in range(nact):
            pos[j] = x[j]
            vel[j] = x[nq + j]
        currents(p, x, held, cur)
        t_read = now_ns(ts)
        # control and safety limits
        if not control_tick(law, params, state, limits, h, t, pos, vel, cur, u, held):
            reason = R_BAD_COMMAND
            break
        t_control = now_ns(ts)
        # write: the plant steps under the command (the row holds the state before it
        # and the currents under the new command, as rt.lockstep rows do); not after
        # the last tick, at t = n_steps h
        currents(p, x, held, cur)
        fill_row(ring, head, cols, k, t, x, nq, held, cur)
        last = k == n_steps
        ok = True
        if not last:
            ok = advance(p, jams, t, x, held, h, method, correction, work, stages, mech)
            if use_worker:
                _request_correction(handoff, snap, x)
        t_write = now_ns(ts)
        timing = timings[k]
        timing[0] = (wake - deadline) * 1e-9 if paced else 0.0
        timing[1] = (t_read - wake) * 1e-9
        timing[2] = (t_control - t_read) * 1e-9
        timing[3] = (t_write - t_control) * 1e-9
        timing[4] = (t_write - wake) * 1e-9
        publish_row(ring, head, cols, timing)
        k += 1
        atomic_store(mail, M_TICK, float(k))
        if not ok:
            reason = R_INVALID_STATE
            break
        if paced and not last and now_ns(ts) > start + k * period_ns:
            overruns += 1
            missed = (now_ns(ts) - (start + k * period_ns)) // period_ns + 1
            atomic_store(mail, M_OVERRUNS, float(overruns))
            _event(events, mail, EV_OVERRUN, k - 1, t, float(missed), timing[0], timing[4])
            if policy == STOP and overruns >= max_overruns:
                reason = R_OVERRUNS
                break
            if policy == CATCH_UP:
                continue
            for m in range(missed):  # skip: no control, the plant goes on under the held command
                if k >= n_steps or not ok:      # (the last tick is never skipped)
                    break
                t = k * h
                _scheduled_faults(p, jams, schedule, t, x, tol, events, mail, k)
                currents(p, x, held, cur)
                fill_row(ring, head, cols, k, t, x, nq, held, cur)
                ok = advance(p, jams, t, x, held, h, method, correction, work, stages, mech)
                for c in range(timings.shape[1]):
                    timings[k, c] = np.nan
                publish_row(ring, head, cols, timings[k])
                k += 1
                atomic_store(mail, M_TICK, float(k))
            if not ok:
                reason = R_INVALID_STATE
                break
    mail[M_REASON] = reason
    # the stop: at the ticks run, and the time the run got to
    _event(events, mail, EV_STOP, k, min(k, n_steps) * h, float(reason), float(overruns), 0.0)
    return k
