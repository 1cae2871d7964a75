"""The fault table: every scheduled, triggered, intermittent and live fault of a run in one
array the compiled loops read at each tick boundary (docs/FAULTS.md).

One row per fault (``FAULT_COLUMNS`` float64): what (``C_KIND``, a code of ``KINDS``),
where (``C_JOINT`` 0-based, ``C_CHANNEL`` for a sensor fault), when (``C_T1`` s, the
condition ``C_WHEN_JOINT``/``C_WHEN_SIGNAL``/``C_ABOVE``/``C_BELOW``), how long
(``C_DURATION`` s, inf: until cleared), its parameters (``C_P0``..``C_P3``, in the order
of its table's own keys in hilrig.schema), its state (``C_STATE``: pending, active,
over; ``C_T_ON`` the time it started, ``C_MEM`` what a stuck or dropped-out sensor
holds, ``C_T_OFF`` the time it ended) and the state a loop last reported as an event
(``C_REPORTED``). The first row also carries the table's summary, which spares the
loops their passes over the rows on the ticks where nothing is to do: ``C_NEXT``, the
earliest time (s) at which a row may start or end (``apply_faults`` skips the table
before it; -inf: check at the next boundary, as a new row requires), ``C_SENSING`` (1
while a sensor row is active: the tick calls ``sense``) and ``C_HOLD`` (1 while a
dropout that has started has not yet taken the value it holds: ``hold_previous``).
Rows of kind 0
are spare and come last: live faults (``hil fault``) are written there, in the order they
arrive, so that a replay that puts them there from the log's events does the same
arithmetic; every loop over the rows stops at the first spare one.

``apply_faults`` (plant.stepping.apply_schedule, at each tick boundary) starts the due
rows and ends the expired ones; actuator faults then set the coordinates' ``A_*``
columns of ``jams`` (plant.actuator_faults), a brake or jam starts the jam law
(plant.jam). ``sense`` corrupts what the law is about to see (rt.tick's measure step).
A table without faults costs one check a tick (``holds_faults``: the loops call
no fault pass while its first row is spare); one with faults, a comparison a pass
(``faults_due``, ``holding``, ``sensing``) on the ticks where that pass has nothing to do.
"""
from __future__ import annotations

import dataclasses
import math
import typing

import numpy as np
from hilrig.jit.kernel import inline_kernel, kernel
from hilrig.plant.actuator_faults import healthy_actuators
from hilrig.plant.jam import clear_jam, start_jam
from hilrig.plant.layout import (
    A_GAIN,
    A_OFFSET,
    A_ON,
    A_SAG,
    A_VISCOUS,
    A_VMAX,
    A_WINDING,
    DRIVE_VOLTAGE_FULL,
    H_DRIVE,
    H_NQ,
    W_OPEN,
    W_SHORT,
)
from hilrig.schema import FaultsTable

# columns of a row
(C_KIND, C_JOINT, C_CHANNEL, C_T1, C_DURATION, C_STATE, C_REPORTED, C_T_ON, C_T_OFF,
 C_WHEN_JOINT, C_WHEN_SIGNAL, C_ABOVE, C_BELOW, C_LIVE, C_P0, C_P1, C_P2, C_P3, C_MEM,
 C_HELD, C_NEXT, C_SENSING, C_HOLD) = range(23)
FAULT_COLUMNS = 23      # C_NEXT, C_SENSING, C_HOLD: the table's summary, in its first row
N_PARAMS = 4
LIVE_ROWS = 64          # spare rows for live faults in a real-time run's table
# row states
S_PENDING, S_ACTIVE, S_OVER = 0.0, 1.0, 2.0
# channels of a sensor fault
CH_POSITION, CH_RATE, CH_CURRENT = 0, 1, 2
CHANNELS = {"position": CH_POSITION, "rate": CH_RATE, "current": CH_CURRENT}
CHANNEL_NAMES = {code: name for name, code in CHANNELS.items()}
SIGNALS = {"q": 0, "qd": 1}

# kind codes (the wire's, drivers.wire FAULT): 1-2 the jam and a clear, 10-17 actuator,
# 20-26 sensor, 30-37 link (reserved here for the emulated devices' link faults)
K_JAM, K_CLEAR = 1, 2
K_FREE_SWING, K_EFFECTIVENESS, K_TORQUE_OFFSET, K_WINDING_OPEN, K_WINDING_SHORT, \
    K_SUPPLY_SAG, K_BRAKE, K_FRICTION = range(10, 18)
K_SENSOR_BIAS, K_SENSOR_DRIFT, K_SENSOR_STUCK, K_SENSOR_DROPOUT, K_QUANTIZE, \
    K_COUNT_JUMP, K_NOISE_BURST = range(20, 27)
ACTUATOR, SENSOR, LINK, JAM = "actuator", "sensor", "link", "jam"


@dataclasses.dataclass(frozen=True)
class Kind:
    """A fault kind: its code, its family (ACTUATOR, SENSOR, LINK, JAM) and its
    parameters (the keys of its [[faults.KIND]] table beyond the trigger's, in row order
    C_P0..; a parameter's default NaN where the table leaves it unset)."""
    code: int
    family: str
    params: tuple = ()
    motor: bool = False        # needs a motor model (plant.drive voltage or voltage_full)


KINDS = {
    "jam": Kind(K_JAM, JAM, ("duration",)),
    "clear": Kind(K_CLEAR, JAM),
    "free_swing": Kind(K_FREE_SWING, ACTUATOR),
    "effectiveness": Kind(K_EFFECTIVENESS, ACTUATOR, ("factor",)),
    "torque_offset": Kind(K_TORQUE_OFFSET, ACTUATOR, ("torque",)),
    "winding_open": Kind(K_WINDING_OPEN, ACTUATOR, motor=True),
    "winding_short": Kind(K_WINDING_SHORT, ACTUATOR, motor=True),
    "supply_sag": Kind(K_SUPPLY_SAG, ACTUATOR, ("factor", "max_voltage"), motor=True),
    "brake": Kind(K_BRAKE, ACTUATOR, ("stop_time",)),
    "friction": Kind(K_FRICTION, ACTUATOR, ("viscous",)),
    "sensor_bias": Kind(K_SENSOR_BIAS, SENSOR, ("bias",)),
    "sensor_drift": Kind(K_SENSOR_DRIFT, SENSOR, ("rate",)),
    "sensor_stuck": Kind(K_SENSOR_STUCK, SENSOR, ("value",)),
    "sensor_dropout": Kind(K_SENSOR_DROPOUT, SENSOR),
    "quantize": Kind(K_QUANTIZE, SENSOR, ("counts_per_rev", "step")),
    "count_jump": Kind(K_COUNT_JUMP, SENSOR, ("counts", "counts_per_rev", "size")),
    "noise_burst": Kind(K_NOISE_BURST, SENSOR, ("std", "seed")),
    # link faults: served by the emulated devices (devices/), not by this table
    "drop": Kind(30, LINK), "delay": Kind(31, LINK), "corrupt": Kind(32, LINK),
    "bus_off": Kind(33, LINK), "heartbeat_loss": Kind(34, LINK), "sync_loss": Kind(35, LINK),
    "crc_error": Kind(36, LINK), "stall": Kind(37, LINK),
}
NAMES = {kind.code: name for name, kind in KINDS.items()}
# what a [[faults.KIND]] table names: the plant's kinds but the jam's own table and clear
TABLE_KINDS = tuple(name for name, kind in KINDS.items() if kind.family in (ACTUATOR, SENSOR))


# -- the table, from a config ------------------------------------------------------------

def fault_row(kind: str, joint: int, t1: float, duration: float, params: dict,
              channel: str = "position", live: bool = False, when: tuple | None = None
              ) -> np.ndarray:
    """One pending row: ``kind`` on ``joint`` (0-based) from ``t1`` (s) for ``duration``
    (s); ``params`` by name (missing: NaN); ``when`` (joint 0-based, signal "q"|"qd",
    above, below) or None."""
    spec = KINDS[kind]
    row = np.zeros(FAULT_COLUMNS)
    row[C_KIND], row[C_JOINT], row[C_T1], row[C_DURATION] = spec.code, joint, t1, duration
    row[C_CHANNEL] = CHANNELS[channel]
    row[C_LIVE] = 1.0 if live else 0.0
    row[C_WHEN_JOINT], row[C_ABOVE], row[C_BELOW] = -1.0, -np.inf, np.inf
    if when is not None:
        row[C_WHEN_JOINT], row[C_WHEN_SIGNAL] = when[0], SIGNALS[when[1]]
        row[C_ABOVE] = -np.inf if when[2] is None else when[2]
        row[C_BELOW] = np.inf if when[3] is None else when[3]
    for i, name in enumerate(spec.params):
        value = params.get(name)
        row[C_P0 + i] = np.nan if value is None else float(value)
    row[C_MEM] = np.nan
    row[C_T_OFF] = np.nan
    row[C_NEXT] = -np.inf      # as the first row: the table is checked at its first boundary
    return row


def started_rows(table: np.ndarray) -> np.ndarray:
    """The rows of a fault table that started, as [kind code, joint (1-based), channel
    (CHANNELS), start (s), end (s; NaN: still active)] rows in the order they started
    (telemetry.logfile reads the same from a log's events)."""
    started = table[(table[:, C_KIND] != 0.0) & (table[:, C_STATE] != S_PENDING)]
    started = started[np.argsort(started[:, C_T_ON], kind="stable")]
    return np.column_stack([started[:, C_KIND], started[:, C_JOINT] + 1, started[:, C_CHANNEL],
                            started[:, C_T_ON], started[:, C_T_OFF]]) if len(started) else \
        np.zeros((0, 5))


def phases(t1: float, mean_on: float, mean_off: float, seed: int, end: float) -> list:
    """An intermittent fault's (start, length) on-phases from t1 to ``end`` (s): on and off
    lengths drawn from exponential distributions of the given means (s), seeded."""
    rng = np.random.default_rng(seed)
    out, t = [], t1
    while t < end:
        on = float(rng.exponential(mean_on))
        out.append((t, on))
        t += on + float(rng.exponential(mean_off))
    return out


def config_rows(cfg) -> list:
    """The rows of a resolved config's [[faults.KIND]] tables (jams first, as
    plant.factory has always scheduled them), intermittent ones expanded into phases."""
    rows = [fault_row("jam", j.joint - 1, j.t1, np.inf, {"duration": j.duration})
            for j in cfg.faults.jam]
    for name in TABLE_KINDS:
        for f in getattr(cfg.faults, name):
            params = {p: getattr(f, p) for p in KINDS[name].params}
            channel = getattr(f, "channel", "position")
            when = None if f.when_joint is None else (f.when_joint - 1, f.when_signal,
                                                      f.above, f.below)
            if f.mean_on is not None:
                for start, length in phases(f.t1, f.mean_on, f.mean_off, f.seed,
                                            cfg.sim.duration):
                    rows.append(fault_row(name, f.joint - 1, start, length, params, channel,
                                          when=when))
            else:
                rows.append(fault_row(name, f.joint - 1, f.t1, f.duration, params, channel,
                                      when=when))
    return rows


def fault_table(cfg, spare: int = 0) -> np.ndarray:
    """The config's fault table, with ``spare`` empty rows (kind 0) for live faults."""
    rows = config_rows(cfg)
    table = np.zeros((len(rows) + spare, FAULT_COLUMNS))
    if rows:
        table[:len(rows)] = rows
    return table


@kernel
def add_row(table, row):
    """Write ``row`` into the first spare row of ``table``; its index, or -1 when full.
    The table is then checked at the next boundary (its summary's ``C_NEXT``)."""
    for r in range(table.shape[0]):
        if table[r, C_KIND] == 0.0:
            for c in range(table.shape[1]):
                table[r, c] = row[c]
            table[0, C_NEXT] = -np.inf
            return r
    return -1


def fault_event(started: bool, joint: int, live: bool, values) -> dict:
    """A log event of a fault's start ("fault") or end ("fault_end") from a loop's event
    columns ``values`` [kind code, channel, duration (s), P0..P3] (rt.realtime): its kind
    by name, joint (1-based), channel, duration, parameters by name and whether it came
    live (a replay rebuilds the row of a live one from it: ``event_row``)."""
    code, channel, duration = int(values[0]), int(values[1]), float(values[2])
    name = NAMES[code]
    spec = KINDS[name]
    event = {"kind": "fault" if started else "fault_end", "fault": name, "joint": joint,
             "duration": duration, "live": live,
             "params": {p: float(values[3 + i]) for i, p in enumerate(spec.params)}}
    if spec.family == SENSOR:
        event["channel"] = CHANNEL_NAMES[channel]
    return event


def report_changes(table: np.ndarray, tick: int, t: float) -> list:
    """The log events of the rows whose state changed since the last report (as a
    real-time loop reports them: rt.realtime._scheduled_faults), marked reported: a jam's
    start ("jam": joint, t1, t2, duration), a clear ("clear"), another fault's start and
    end ("fault", "fault_end": ``fault_event``). For loops in Python (devices/)."""
    events = []
    for row in table:
        if row[C_KIND] == 0.0:
            break
        if row[C_STATE] == row[C_REPORTED]:
            continue
        code, joint, live = int(row[C_KIND]), int(row[C_JOINT]) + 1, bool(row[C_LIVE])
        values = [row[C_KIND], row[C_CHANNEL], row[C_DURATION], row[C_P0], row[C_P1],
                  row[C_P2], row[C_P3]]
        if row[C_REPORTED] == S_PENDING:
            if code == K_JAM:
                events.append({"kind": "jam", "joint": joint, "t1": t, "t2": t + row[C_P0],
                               "duration": row[C_P0], "live": live})
            elif code == K_CLEAR:
                events.append({"kind": "clear", "joint": joint, "live": live})
            else:
                events.append(fault_event(True, joint, live, values))
        if row[C_STATE] == S_OVER and code not in (K_JAM, K_CLEAR):
            events.append(fault_event(False, joint, live, values))
        row[C_REPORTED] = row[C_STATE]
    for event in events:
        event.update(tick=tick, t=t)
    return events


def event_row(event: dict, h: float) -> np.ndarray | None:
    """The fault table row that a live fault's log event (jam, clear, fault) stands for,
    pending from its tick's time (tick h, as the loop computes it); None for any other
    event, or one that was not live."""
    if not event.get("live"):
        return None
    t1 = event["tick"] * h
    joint = event["joint"] - 1
    if event["kind"] == "jam":
        return fault_row("jam", joint, t1, np.inf, {"duration": event["duration"]}, live=True)
    if event["kind"] == "clear":
        return fault_row("clear", joint, t1, np.inf, {}, live=True)
    if event["kind"] == "fault":
        return fault_row(event["fault"], joint, t1, event["duration"], event["params"],
                         event.get("channel", "position"), live=True)
    return None


def parse_params(kind: str, pairs) -> dict:
    """A live fault's ``PARAM=VALUE`` words as {name: float}; ValueError naming a bad one."""
    known = KINDS[kind].params
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in known:
            raise ValueError(f"{kind}: unknown parameter {pair!r} (known: "
                             f"{', '.join(known) or 'none'})")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{kind}: {name} must be a number, got {value!r}") from None
        if not math.isfinite(number) and not (name == "max_voltage" and number == math.inf):
            raise ValueError(f"{kind}: {name} must be finite, got {value!r}")
        out[name] = number
    return out


def plant_refusal(kind: str, jams: bool, actuators: bool) -> str | None:
    """Why a plant cannot take a fault of ``kind``, or None: a jam or brake where it has
    no jams (``jams`` False: the jam law is modelled for chains), another actuator fault
    where it takes none (``actuators``: plant.interface.PlantModel.actuator_faults)."""
    spec = KINDS[kind]
    if (spec.family == JAM or kind == "brake") and not jams:
        return (f"{kind}: jams and brakes follow the jam law, modelled for chains only "
                "(serial arms, a user's chain)")
    if spec.family == ACTUATOR and not actuators:
        return f"{kind}: actuator faults are not modelled for this plant"
    return None


def live_row(kind: str, joint: int, duration: float, params: dict, channel: str,
             nact: int, jams: bool, actuators: bool, drive: str) -> np.ndarray:
    """The row of a live fault (``hil fault KIND``) on ``joint`` (1-based) for ``duration``
    s (inf: until cleared; a jam's: its jamming dt), or ValueError naming why this plant
    cannot take it: an unknown or link kind, a joint out of 1..nact, a fault the plant
    does not model (``plant_refusal``: ``jams``, ``actuators``), a winding or supply fault
    on a torque drive, a bad parameter. Its t1 is set when the loop takes it."""
    spec = KINDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(KINDS)})")
    if spec.family == LINK:
        raise ValueError(f"{kind} is a link fault: the emulated devices serve it, not the "
                         "plant")
    if not 1 <= joint <= nact:
        raise ValueError(f"joint must be 1..{nact}, got {joint}")
    refusal = plant_refusal(kind, jams, actuators)
    if refusal is not None:
        raise ValueError(refusal)
    if spec.motor and drive == "torque":
        raise ValueError(f"{kind} needs a motor model (plant.drive voltage or voltage_full)")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}")
    if kind == "jam":
        params = {"duration": duration}
        duration = np.inf
    elif kind == "clear":
        duration = np.inf
    elif not duration > 0.0:
        raise ValueError(f"duration must be > 0 s (inf: until cleared), got {duration!r}")
    base = defaults(kind) if kind != "clear" else {}
    full = {name: params.get(name, base.get(name)) for name in spec.params}
    error = check_row(kind, full)
    if error is not None:
        raise ValueError(error)
    return fault_row(kind, joint - 1, 0.0, duration, full, channel, live=True)


def defaults(kind: str) -> dict:
    """The defaults of the keys of a [[faults.KIND]] table (hilrig.schema), by name."""
    cls = typing.get_args(typing.get_type_hints(FaultsTable)[kind])[0]
    return {f.name: f.metadata["key"]["default"] for f in dataclasses.fields(cls)}


def check_row(kind: str, params: dict) -> str | None:
    """Why a fault of ``kind`` with ``params`` cannot run, or None (the checks of
    settings.config, shared with the live path)."""
    from hilrig.plant.jam import jam_duration_error

    if kind == "brake" and "stop_time" in params:
        return jam_duration_error(params["stop_time"])
    if kind == "jam":
        return jam_duration_error(params.get("duration", 0.1))
    if kind == "quantize" and (params.get("counts_per_rev") is None) == (
            params.get("step") is None):
        return "quantize: give one of counts_per_rev and step"
    if kind in ("effectiveness", "supply_sag") and params.get("factor", 0.0) < 0.0:
        return f"{kind}: factor must be >= 0"
    if kind == "noise_burst" and params.get("std") is None:
        return "noise_burst: std is required"
    if kind in ("torque_offset", "sensor_bias", "sensor_drift", "friction"):
        need = KINDS[kind].params[0]
        if params.get(need) is None:
            return f"{kind}: {need} is required"
    return None


# -- the kernels -----------------------------------------------------------------------

@inline_kernel
def holds_faults(table):
    """True while the fault table has a fault row (its first row is not spare): the one
    check a tick makes before any fault pass (apply_faults, the sensor passes, the faulty
    drive's currents), so that a run without faults calls none of them."""
    return table.shape[0] > 0 and table[0, C_KIND] != 0.0


@inline_kernel
def faults_due(table, t, tol):
    """True when a row of the fault table may start or end at the tick boundary t (s,
    within ``tol``): it holds a fault and its summary's ``C_NEXT`` has come. Before, a
    call of ``apply_faults`` would change nothing."""
    return holds_faults(table) and table[0, C_NEXT] <= t + tol


@inline_kernel
def holding(table):
    """True while a dropout of a table that holds faults waits for ``hold_previous``."""
    return table[0, C_HOLD] != 0.0


@inline_kernel
def sensing(table):
    """True while a table that holds faults has an active sensor row (``sense``)."""
    return table[0, C_SENSING] != 0.0


@kernel
def _condition(row, x, nq):
    """True when the row has no condition, or its joint's signal lies in (above, below)."""
    jw = int(row[C_WHEN_JOINT])
    if jw < 0:
        return True
    value = x[jw] if row[C_WHEN_SIGNAL] == 0.0 else x[nq + jw]
    return row[C_ABOVE] < value < row[C_BELOW]


@kernel
def _start(p, jams, table, r, t, x, nq):
    """Row r starts at t: the jam law of a jam or brake, a cleared joint, an opened
    winding's current zeroed, a sensor's held value taken afresh."""
    kind = int(table[r, C_KIND])
    joint = int(table[r, C_JOINT])
    table[r, C_STATE] = S_ACTIVE
    table[r, C_T_ON] = t
    table[r, C_HELD] = 0.0
    if kind == K_JAM or kind == K_BRAKE:
        start_jam(jams, x, nq, joint, t, table[r, C_P0] if kind == K_JAM else
                  (0.1 if np.isnan(table[r, C_P0]) else table[r, C_P0]))
    elif kind == K_CLEAR:
        clear_jam(jams, joint)
        for o in range(table.shape[0]):
            if o != r and table[o, C_STATE] == S_ACTIVE and int(table[o, C_JOINT]) == joint \
                    and table[o, C_KIND] != 0.0:
                table[o, C_STATE] = S_OVER
                table[o, C_T_OFF] = t
        table[r, C_STATE] = S_OVER
        table[r, C_T_OFF] = t
    elif kind == K_WINDING_OPEN and int(p[H_DRIVE]) == DRIVE_VOLTAGE_FULL:
        x[2 * nq + joint] = 0.0


@kernel
def _actuators(p, jams, table):
    """After a change: the coordinates' actuator columns from the active actuator rows,
    and the summary's sensor flags (``C_SENSING``, ``C_HOLD``) from the sensor rows."""
    healthy_actuators(jams)
    table[0, C_SENSING] = 0.0
    table[0, C_HOLD] = 0.0
    for r in range(table.shape[0]):
        kind = int(table[r, C_KIND])
        if kind == 0:
            break
        if table[r, C_STATE] != S_ACTIVE:
            continue
        if K_SENSOR_BIAS <= kind <= K_NOISE_BURST:
            table[0, C_SENSING] = 1.0
            if kind == K_SENSOR_DROPOUT and table[r, C_HELD] == 0.0:
                table[0, C_HOLD] = 1.0
            continue
        if kind < K_FREE_SWING or kind > K_FRICTION or kind == K_BRAKE:
            continue
        j = int(table[r, C_JOINT])
        jams[j, A_ON] = 1.0
        if kind == K_FREE_SWING:
            jams[j, A_GAIN] = 0.0
        elif kind == K_EFFECTIVENESS:
            jams[j, A_GAIN] *= table[r, C_P0]
        elif kind == K_TORQUE_OFFSET:
            jams[j, A_OFFSET] += table[r, C_P0]
        elif kind == K_WINDING_OPEN:
            jams[j, A_WINDING] = W_OPEN
        elif kind == K_WINDING_SHORT:
            if jams[j, A_WINDING] != W_OPEN:      # an open winding carries nothing at all
                jams[j, A_WINDING] = W_SHORT
        elif kind == K_SUPPLY_SAG:
            jams[j, A_SAG] *= table[r, C_P0]
            if not np.isnan(table[r, C_P1]):
                jams[j, A_VMAX] = min(jams[j, A_VMAX], table[r, C_P1])
        elif kind == K_FRICTION:
            jams[j, A_VISCOUS] += table[r, C_P0]


@inline_kernel   # inlined: a call costs more than its pass over a few rows (bench_faults)
def apply_faults(p, jams, table, t, x, tol):
    """At the tick boundary t (s): start every pending row whose t1 has come (within
    ``tol``) and whose condition holds, end every active row whose duration has passed
    (a jam or brake released, an actuator fault's columns cleared), in row order; then
    the summary's ``C_NEXT``: the earliest t1 of a pending row, end of an active one (a
    pending row whose condition does not hold yet keeps it at its t1, so it is checked
    at every boundary). Callers skip it before ``C_NEXT`` (``faults_due``)."""
    nq = int(p[H_NQ])
    changed = False
    due = np.inf
    for r in range(table.shape[0]):
        kind = table[r, C_KIND]
        if kind == 0.0:
            break                  # the spare rows: no fault follows
        state = table[r, C_STATE]
        if state == S_PENDING:
            if table[r, C_T1] <= t + tol and _condition(table[r], x, nq):
                _start(p, jams, table, r, t, x, nq)
                changed = True
            else:
                due = min(due, table[r, C_T1])
        if table[r, C_STATE] == S_ACTIVE:
            end = table[r, C_T_ON] + table[r, C_DURATION]
            if state == S_ACTIVE and end <= t + tol:
                table[r, C_STATE] = S_OVER
                table[r, C_T_OFF] = t
                if kind == K_BRAKE:
                    clear_jam(jams, int(table[r, C_JOINT]))
                changed = True
            else:
                due = min(due, end)
    if table.shape[0] > 0:
        table[0, C_NEXT] = due
    if changed:
        _actuators(p, jams, table)


@kernel
def _mix(a, b):
    """A 64-bit hash of two integers (splitmix64's finaliser), as a uint64."""
    z = np.uint64(a) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(b)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@kernel
def gaussian(seed, k, j):
    """A standard normal number that depends on (seed, tick k, index j) only (Box-Muller
    of two hashed uniforms): a noise burst is the same in a run and in its replay."""
    h1 = _mix(_mix(seed, k), 2 * j)
    h2 = _mix(_mix(seed, k), 2 * j + 1)
    u1 = (float(h1 >> np.uint64(11)) + 0.5) / 9007199254740992.0
    u2 = float(h2 >> np.uint64(11)) / 9007199254740992.0
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@kernel
def hold_previous(table, meas, nact):
    """Before the measure step: a dropout that has just started holds what the law saw
    last (``meas`` still holds it: drivers.link.Measurement's layout). Loops call it
    only while the summary says one waits (``holding``)."""
    for r in range(table.shape[0]):
        if table[r, C_KIND] == 0.0:
            break
        if table[r, C_STATE] == S_ACTIVE and table[r, C_HELD] == 0.0 \
                and int(table[r, C_KIND]) == K_SENSOR_DROPOUT:
            table[r, C_MEM] = meas[1 + int(table[r, C_CHANNEL]) * nact + int(table[r, C_JOINT])]
            table[r, C_HELD] = 1.0
    if table.shape[0] > 0:
        table[0, C_HOLD] = 0.0


@kernel
def sense(table, t, k, meas, nact):
    """``sense_rows`` in a call of its own (the emulated drives' plant server,
    devices.zmq_plant)."""
    sense_rows(table, t, k, meas, nact)


@inline_kernel
def sense_rows(table, t, k, meas, nact):
    """Corrupt what the law sees in ``meas`` (t, pos, vel, current: the true values on
    entry) by the active sensor rows at tick k, time t (s), in row order. Inlined into
    the law's call of the loops' tick (rt.tick.control) and into ``sense``."""
    for r in range(table.shape[0]):
        kind = int(table[r, C_KIND])
        if kind == 0:
            break
        if table[r, C_STATE] != S_ACTIVE or kind < K_SENSOR_BIAS or kind > K_NOISE_BURST:
            continue
        j = int(table[r, C_JOINT])
        i = 1 + int(table[r, C_CHANNEL]) * nact + j
        if kind == K_SENSOR_BIAS:
            meas[i] += table[r, C_P0]
        elif kind == K_SENSOR_DRIFT:
            meas[i] += table[r, C_P0] * (t - table[r, C_T_ON])
        elif kind == K_SENSOR_STUCK:
            if table[r, C_HELD] == 0.0:
                table[r, C_MEM] = meas[i] if np.isnan(table[r, C_P0]) else table[r, C_P0]
                table[r, C_HELD] = 1.0
            meas[i] = table[r, C_MEM]
        elif kind == K_SENSOR_DROPOUT:
            meas[i] = table[r, C_MEM]
        elif kind == K_QUANTIZE:
            step = table[r, C_P1] if np.isnan(table[r, C_P0]) else \
                2.0 * math.pi / table[r, C_P0]
            meas[i] = math.floor(meas[i] / step) * step
        elif kind == K_COUNT_JUMP:
            size = table[r, C_P2] if not np.isnan(table[r, C_P2]) else \
                table[r, C_P0] * 2.0 * math.pi / table[r, C_P1]
            meas[i] += size
        elif kind == K_NOISE_BURST:
            meas[i] += table[r, C_P0] * gaussian(int(table[r, C_P1]), k, i)
