"""The one tick body every compiled loop runs: measure, control, limit, record, step.

``tick`` is inlined into each loop that ticks a plant with a controller:
rt.realtime.run_loop (``hil run``, paced and ``--fast``) and its rehearsal,
rt.lockstep.run (``hil sim``, campaigns) and rt.replay.replay_ticks (``hil sim
--replay``). What a loop does around it (faults due now, live changes, the pacing, the
telemetry row's publication) stays in the loop; what differs inside it is an argument,
None where a loop has no such part (numba compiles only the branches a loop uses). One
body is why ``hil sim`` = ``--fast`` = lockstep = replay, bit for bit.

The arrays travel in named records built once at set-up (NamedTuples, which numba
passes as structs: the loops are compiled without numba's runtime, so a record costs no
reference counting):

- ``PlantArrays``: the plant (plant.model.Plant: params ``p``, ``jams``, state ``x``,
  scratch ``work`` and ``stages``); ``Stepping``: step h (s), integrator and correction;
- ``LawArrays``: the law's ``params`` and ``state`` (controllers.interface) and the
  command ``limits`` (controllers.limits: row 0 max |u|, row 1 max slew per s);
- ``TickIO``: the measurement buffer ``meas`` (drivers.link.Measurement: t, pos, vel,
  current), the command ``u`` this tick computes and the ``held`` command (V or N m);
- ``RingArrays``: the telemetry ring a real-time loop fills (telemetry.rows);
- ``Records``: the rows an offline loop keeps (t, x and u per tick);
- ``Imperfections``: an offline run's measurement noise and command latency.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hilrig.controllers.builtin import builtin_command
from hilrig.controllers.interface import Controller, note_detection
from hilrig.controllers.limits import L_MAX, L_SLEW, outside   # the limits' rows
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.faults import hold_previous, holding, holds_faults, sense_rows, sensing
from hilrig.plant.layout import H_NQ
from hilrig.plant.motor import currents
from hilrig.plant.stepping import advance
from hilrig.telemetry.rows import COL_I, fill_row
from hilrig.timing.clock import now_ns
from numba import types
from numba.extending import overload

# what a tick ends with
T_OK, T_BAD_COMMAND, T_INVALID_STATE, T_JOINT_LIMIT = 0, 1, 2, 3


class PlantArrays(NamedTuple):
    """A plant's arrays as the loops step them (plant.model.Plant)."""
    p: np.ndarray        # params (plant.layout)
    jams: np.ndarray     # jam rows (plant.jam)
    x: np.ndarray        # state: q (rad or m), qd, currents (A) for the full motor model
    work: np.ndarray     # scratch of the step
    stages: np.ndarray   # scratch of the integrator's stages


class Stepping(NamedTuple):
    """How the plant steps: ``h`` (s), ``method`` (plant.model.METHODS or a model's own
    tick), ``correction`` (plant.factory.correction_id; 0 when a worker corrects)."""
    h: float
    method: int
    correction: int


class LawArrays(NamedTuple):
    """The law's ``params`` and ``state``, the ``limits`` (controllers.limits: LIMIT_ROWS,
    nact: the command's and the joints' position and rate limits) and its ``detection``
    record (controllers.interface.detection_record; empty: the law reports none)."""
    params: np.ndarray
    state: np.ndarray
    limits: np.ndarray
    detection: np.ndarray


class TickIO(NamedTuple):
    """The measurement buffer ``meas``, the command ``u`` a tick computes and the
    ``held`` command (nact; V or N m)."""
    meas: np.ndarray
    u: np.ndarray
    held: np.ndarray


class RingArrays(NamedTuple):
    """The telemetry ring (telemetry.recorder.Telemetry: ``ring``, ``head``) and the
    columns of a row (telemetry.rows.row_columns)."""
    ring: np.ndarray
    head: np.ndarray
    cols: np.ndarray


class Records(NamedTuple):
    """The rows an offline loop keeps: ``t`` (s), ``x`` (the state before the step),
    ``u`` (the command applied over the step), ``seen`` (what the law saw: nact
    positions, then nact rates, sensor faults included) and ``i`` (the motor currents
    under u, A: a faulty winding's, as a real-time tick's telemetry row has them; no
    rows: not recorded), one row per tick."""
    t: np.ndarray
    x: np.ndarray
    u: np.ndarray
    seen: np.ndarray
    i: np.ndarray


class Imperfections(NamedTuple):
    """An offline run's ``noise`` (a row per tick of nact position noises, rad, then nact
    rate noises, rad/s, added to what the law sees; no rows: none) and ``pending`` (d
    rows of nact: commands computed, applied d ticks later; no rows: no latency)."""
    noise: np.ndarray
    pending: np.ndarray


def plant_arrays(plant) -> PlantArrays:
    """The record of a plant.model.Plant's arrays (views: the loop steps the plant)."""
    return PlantArrays(plant.params, plant.jams, plant.x, plant.work, plant.stages)


def law_arrays(controller: Controller, limits: np.ndarray) -> LawArrays:
    """The record of a controller's arrays (views: the loop runs the law on them)."""
    return LawArrays(controller.params, controller.state, limits, controller.detection)


def law_of(controller: Controller):
    """What the loops take as the law of ``controller``: None for the built-in law, which
    ``tick`` then calls directly (about 30 ns a tick less than through its pointer, the
    same arithmetic), else its compiled law."""
    return None if controller.builtin else controller.law


def command(law, t, pos, vel, cur, params, state, u):
    """law(t, pos, vel, cur, params, state, u), in a kernel; law None: the built-in law,
    called directly. numba chooses by the type of ``law`` while typing the caller (an
    overload, inlined), so a loop compiled for a law's pointer does not compile the
    built-in law nor the feed-forward's model kernels it calls (about 5 s of a first
    run's compile time, bench/bench_compile.py). (``if law is None`` would compile both:
    numba prunes such a branch only where ``law`` is None.)"""
    raise TypeError("rt.tick.command runs inside kernels only")


@overload(command, inline="always")
def _command(law, t, pos, vel, cur, params, state, u):
    if isinstance(law, types.NoneType):
        def built_in(law, t, pos, vel, cur, params, state, u):
            builtin_command(t, pos, vel, cur, params, state, u)
        return built_in

    def through_pointer(law, t, pos, vel, cur, params, state, u):
        law(t, pos, vel, cur, params, state, u)
    return through_pointer


@inline_kernel
def limit_tick(limits, h, u, held):
    """Clamp u's change per tick to max slew · h, then u to ±max (the bound wins: a max
    lowered below the held command clamps at once); the result becomes ``held``. Returns
    False (``held`` unchanged) if u is not finite."""
    for j in range(u.shape[0]):
        if not np.isfinite(u[j]):
            return False
        step = limits[L_SLEW, j] * h
        u[j] = min(max(u[j], held[j] - step), held[j] + step)
        u[j] = min(max(u[j], -limits[L_MAX, j]), limits[L_MAX, j])
    for j in range(u.shape[0]):
        held[j] = u[j]
    return True


@kernel   # a call of its own, as the loops measured fastest (inlined: 20-40 ns a tick more)
def control(law, t, pos, vel, cur, params, state, out, limits, h, u, held, faults, k, meas,
            faulty):
    """The active sensor faults of the fault table ``faults`` on ``meas`` at tick k
    (plant.faults.sense, while the table holds a fault, ``faulty``, and its summary says a
    sensor row is active; ``pos``, ``vel`` and ``cur`` are views of ``meas``), then the
    law into ``out`` (``command``), then the limits on ``u`` into ``held``
    (``limit_tick``; ``out`` is ``u`` but under a command latency); False on a non-finite
    command. The sensor pass is here, not in ``tick``, so that it costs no call of its
    own (docs/FAULTS.md, Cost)."""
    if faulty and sensing(faults):
        sense_rows(faults, t, k, meas, pos.shape[0])
    command(law, t, pos, vel, cur, params, state, out)
    return limit_tick(limits, h, u, held)


def control_parts(law, ctrl: LawArrays, io: TickIO, faults, h: float) -> list:
    """``control`` as (kernel, arguments of the types ``tick`` passes it: a loop's ``law``,
    ``ctrl``, ``io``, fault table ``faults`` and step ``h``, s): what a run's first process
    compiles while the second types the loop (rt.loop_ahead), so that the loop's typing
    loads it from the cache."""
    meas, nact = io.meas, io.held.shape[0]
    pos, vel = meas[1:1 + nact], meas[1 + nact:1 + 2 * nact]
    cur = meas[1 + 2 * nact:1 + 3 * nact]
    return [(control, (law, 0.0, pos, vel, cur, ctrl.params, ctrl.state, io.u, ctrl.limits, h,
                       io.u, io.held, faults, 0, meas, False))]


@inline_kernel
def _currents(p, x, held, cur, jams, faulty):
    """The motor currents under ``held`` into ``cur`` (plant.motor.currents), a faulty
    winding's (``jams``) only while the fault table has a fault (``faulty``)."""
    if faulty:
        currents(p, x, held, cur, jams)
    else:
        currents(p, x, held, cur)


@inline_kernel
def record_currents(plant, held, rec, k, faulty):
    """Row k of ``rec.i`` (if it has rows): the motor currents under ``held``, a faulty
    winding's while the fault table has a fault (``faulty``), as the telemetry row's."""
    if rec.i.shape[0] > 0:
        _currents(plant.p, plant.x, held, rec.i[k], plant.jams, faulty)


@inline_kernel
def ring_currents(plant, held, ring, faulty):
    """The motor currents under ``held`` into the current columns of the ring's next row
    (if it has them), computed there: the measurement keeps the currents the law saw, which
    a dropout of the current channel holds (plant.faults.hold_previous)."""
    base = ring.cols[COL_I]
    if base >= 0:
        row = ring.ring[ring.head[0] % ring.ring.shape[0]]
        _currents(plant.p, plant.x, held, row[base:base + held.shape[0]], plant.jams, faulty)


@inline_kernel
def record_state(rec, k, t, x, meas):
    """Row k of ``rec`` (Records): t, the state x (its first rec.x.shape[1] entries) and
    what the law saw (the positions and rates of ``meas``)."""
    rec.t[k] = t
    for i in range(rec.x.shape[1]):
        rec.x[k, i] = x[i]
    for i in range(rec.seen.shape[1]):
        rec.seen[k, i] = meas[1 + i]


@inline_kernel
def tick(law, plant, ctrl, io, stepping, faults, t, k, last, ring, rec, imperfect, timing,
         ts, wake, mech):
    """Tick k at plant time t (s): measure, control, limit, record, then step the plant.

    Measure: ``io.meas`` gets t, the actuated joints' positions and rates (plus row k of
    ``imperfect.noise``) and the motor currents under the held command. Control (the call
    of ``control``): the active sensor faults of the fault table ``faults`` corrupt it
    (plant.faults.sense_rows), then the law (``command``) computes ``io.u`` (with
    ``imperfect.pending`` rows: the command computed that many ticks ago, this tick's kept
    for later), ``limit_tick`` clamps it into ``io.held``, and a fault the law reports for
    the first time goes into ``ctrl.detection`` (controllers.interface.note_detection).
    Record: ``ring`` (RingArrays) gets the row (t, x before the step, the held command and
    the currents under it; the caller publishes it), ``rec`` (Records) row k of t, x and
    what the law saw (u is ``io.u``, which the offline loops point at row k). Step: unless
    ``last``, the plant advances over h under the held command (plant.stepping.advance).

    ``timing`` (a row of 5, or None): [1..4] get the read, control (the sensor faults
    included), write and whole-tick times, s, from ``wake`` (ns of ``ts``, timing.clock),
    each as soon as it is known: a row whose [1] is set and [2] not (NaN before) is a tick
    inside its law (rt.law_watchdog.TickStall). ``law``: a compiled law or None (the
    built-in); ``mech``: what the plant code is compiled for (plant.family).
    ``ring``, ``rec``, ``imperfect`` and ``timing`` may be None. Returns T_OK,
    T_BAD_COMMAND (a non-finite command: nothing recorded, nothing stepped),
    T_JOINT_LIMIT (a measured position or rate outside its safety limits,
    controllers.limits.outside: checked before the law, nothing recorded, nothing stepped)
    or T_INVALID_STATE (the step left NaN or a singular mass matrix).
    """
    p, x, meas, held = plant.p, plant.x, io.meas, io.held
    nq = int(p[H_NQ])
    nact = held.shape[0]
    pos = meas[1:1 + nact]
    vel = meas[1 + nact:1 + 2 * nact]
    cur = meas[1 + 2 * nact:1 + 3 * nact]
    # read (the fault passes only while the table has a fault, plant.faults.holds_faults,
    # and its summary says they have something to do: holding, sensing)
    faulty = holds_faults(faults)
    if faulty and holding(faults):
        hold_previous(faults, meas, nact)
    meas[0] = t
    for j in range(nact):
        pos[j] = x[j]
        vel[j] = x[nq + j]
    if imperfect is not None:
        if imperfect.noise.shape[0] > 0:
            for j in range(nact):
                pos[j] += imperfect.noise[k, j]
                vel[j] += imperfect.noise[k, nact + j]
    _currents(p, x, held, cur, plant.jams, faulty)
    if outside(ctrl.limits, pos, vel):          # the true state, before any sensor fault
        return T_JOINT_LIMIT
    if timing is not None:
        t_read = now_ns(ts)
        timing[1] = (t_read - wake) * 1e-9    # set now: a supervisor sees the law began
    # control and safety limits
    u = io.u
    delay = 0 if imperfect is None else imperfect.pending.shape[0]
    if delay == 0:
        controlled = control(law, t, pos, vel, cur, ctrl.params, ctrl.state, u, ctrl.limits,
                             stepping.h, u, held, faults, k, meas, faulty)
    else:
        due = imperfect.pending[k % delay]
        for j in range(nact):
            u[j] = due[j]                                           # computed d ticks ago
        controlled = control(law, t, pos, vel, cur, ctrl.params, ctrl.state, due,  # applied
                             ctrl.limits, stepping.h, u, held, faults, k, meas,  # d ticks on
                             faulty)
    if not controlled:
        return T_BAD_COMMAND
    note_detection(ctrl.detection, ctrl.state, k, t)     # one comparison when not watched
    if timing is not None:
        t_control = now_ns(ts)
        timing[2] = (t_control - t_read) * 1e-9    # and that it returned
    # record: the state before the step, the command over it
    if ring is not None:
        fill_row(ring.ring, ring.head, ring.cols, k, t, x, nq, held, cur, meas)
        ring_currents(plant, held, ring, faulty)
    if rec is not None:
        record_state(rec, k, t, x, meas)
        record_currents(plant, held, rec, k, faulty)
    # write: the plant steps under the command
    ok = True
    if not last:
        ok = advance(p, plant.jams, t, x, held, stepping.h, stepping.method,
                     stepping.correction, plant.work, plant.stages, mech)
    if timing is not None:
        t_write = now_ns(ts)
        timing[3] = (t_write - t_control) * 1e-9
        timing[4] = (t_write - wake) * 1e-9
    return T_OK if ok else T_INVALID_STATE
