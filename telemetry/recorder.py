"""Telemetry of the real-time loop: a preallocated ring, a writer thread, an MCAP file.

The loop writes one row per tick into ``Telemetry.ring`` and counts it in
``Telemetry.head``, with no call into this module (works from Python and from
numba kernels alike)::

    ring, head, cap = tel.ring, tel.head, tel.capacity
    row = ring[head[0] % cap]     # a view: fill it in place, group by group
    row[tel.columns["t"]] = t     # (or precomputed column offsets in a kernel)
    ...
    head[0] += 1                  # after the row is complete, never before

A writer thread wakes every ``period`` seconds; once ``CHUNK_ROWS`` rows are
waiting, or ``CHUNK_PERIOD`` seconds have passed, it copies them out of the ring
and writes them as MCAP chunks built with numpy (telemetry.mcap_writer), a few numpy
calls per chunk, so that it never keeps the GIL from the loop for long. It counts
the rows it has taken out of the ring in ``head[TAKEN]``.

A full ring (``head[0] - head[TAKEN] == capacity - 1``: the writer counts a row lost
once the loop may be writing over it, so one slot stays spare): a loop with no deadline
(``hil run --fast``, a lockstep link or emulator) waits for the writer before its next
row (telemetry.rows.ring_full in a kernel, ``wait_for_room`` in Python), so it loses
nothing. A paced loop never waits: if it laps the writer (overwrites rows not yet
written) the lost rows are counted in ``lost_rows`` and a ``ring_overrun`` event says
how many, and the loop applies ``telemetry.on_overrun`` (``RowLoss``): stop the run,
or go on saying so; either way its summary and exit code say how many rows were lost.

The file is MCAP (see docs/TELEMETRY.md): channel ``/hil/tick`` carries one
ros1msg message per row whose bytes are the row itself (little-endian float64;
ROS 1 writes fixed-size arrays without a length prefix); channel ``/hil/event``
carries JSON events; with a ``scene`` (telemetry.scene.attach), ``/hil/frames`` and
``/hil/scene`` carry the robot's frames and shape; metadata ``meta`` holds the resolved
config and ``summary``,
written by ``close``, the run's summary. A killed process loses at most the rows
of its last CHUNK_PERIOD (``hil log repair`` finishes such a file).

Messages are written in log-time order: events go into the chunk whose rows span
their time, each after the rows up to it. A loop whose events reach the telemetry
later than its rows (the in-process loop's events go through its supervisor) holds
the writer back with ``released``: rows from that index on wait.

A write error (a full disk) stops the writer at once; ``failure`` then names it, so
that the loop can stop safely (or go on unlogged), and what was written stays readable.
"""
from __future__ import annotations

import atexit
import collections
import json
import logging
import threading
import time
from pathlib import Path

import numpy as np
from hilrig.telemetry.mcap_writer import McapWriter
from hilrig.timing.sched import apply_thread
from hilrig.timing.signals import deferred_signals, ignored_signals

TICK_TOPIC = "/hil/tick"
EVENT_TOPIC = "/hil/event"
TICK_SCHEMA = "hilrig/Tick"
EVENT_SCHEMA = "hilrig/Event"
EVENT_JSON_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "t": {"type": "number"}},
    "required": ["kind", "t"],
}
CHUNK_PERIOD = 0.5     # s between chunks: what a killed writer loses at most
CHUNK_ROWS = 256       # rows per chunk at most: bounds what one chunk holds the GIL for
COMPRESSION = "zstd"   # chunk compression (see docs/TELEMETRY.md for the measurements)
TAKEN = 1              # head[TAKEN]: rows the writer has taken out of the ring
WAIT_SECONDS = 2e-4    # a loop without a deadline polls a full ring this often (wait_for_room)
RING_SECONDS = 4.0     # a loop's ring holds this long of its ticks by default (ring_capacity)
MIN_RING_ROWS = 4096   # ... and at least this many rows

# the timing arrays of a real-time run, all in s except ``tick`` (the tick index)
TIMING_GROUPS = [("tick", 1), ("lateness", 1), ("compute_read", 1), ("compute_control", 1),
                 ("compute_write", 1), ("compute_tick", 1)]



def to_json(cfg: dict) -> str:
    """A resolved config as a JSON string, keys sorted: the ``meta`` of every log and result."""
    return json.dumps(cfg, sort_keys=True)

class TelemetryError(RuntimeError):
    """The telemetry file could not be written; names the cause."""


def ring_capacity(h: float, configured: int = 0, rows: int | None = None) -> int:
    """Rows of a loop's telemetry ring: ``configured`` (``telemetry.ring_rows``) if set,
    else RING_SECONDS of ticks of ``h`` s, at least MIN_RING_ROWS, no more than the
    run's ``rows`` if it is known."""
    if configured:
        return int(configured)
    seconds = int(RING_SECONDS / h)
    return max(MIN_RING_ROWS, seconds if rows is None else min(seconds, rows))


def run_groups(diagnostics: tuple, nq: int, nact: int, drive: str,
               seen: bool = True) -> list[tuple[str, int | tuple]]:
    """The row layout of a real-time run: the arrays of ``hil sim`` plus TIMING_GROUPS;
    ``diagnostics``: the plant model's (PlantModel.diagnostics); ``seen``: with q_meas and
    qd_meas, what the controller saw of the actuated joints (rad, rad/s; sensor faults
    included: plant.faults).

    Vector groups have a tuple width, so they stay 2-D on export even when one
    wide (a one-link arm).
    """
    groups = [("t", 1), ("q", (nq,)), ("qd", (nq,)), ("u", (nact,))]
    if drive != "torque":
        groups.append(("i", (nact,)))
    if seen:
        groups += [("q_meas", (nact,)), ("qd_meas", (nact,))]
    return groups + list(diagnostics) + TIMING_GROUPS


def schema_text(groups) -> str:
    """The ros1msg definition of a row: ``float64 name`` (width 1) or ``float64[n] name``."""
    lines = []
    for name, width in groups:
        if isinstance(width, tuple):
            lines.append(f"float64[{width[0]}] {name}")
        elif width == 1:
            lines.append(f"float64 {name}")
        else:
            lines.append(f"float64[{width}] {name}")
    return "\n".join(lines) + "\n"


class Telemetry:
    """A ring of rows the loop fills, drained to an MCAP file by a writer thread.

    Args:
        path: the .mcap file to write (its folder is created).
        groups: ordered (name, width) pairs: width 1 is a scalar column (1-D on
            export), an int n > 1 or a tuple (n,) a vector of n columns (2-D).
            A scalar group ``t`` (s, >= 0) is required: it is each row's log time.
        meta: the resolved config as a dict (``Config.to_dict()``), stored as JSON in the
            ``meta`` metadata.
        capacity: rows in the ring (capacity x width float64 preallocated).
        period: writer wake-up period, s.
        derive: optional ``derive(rows)``, called by the writer thread on each block of
            copied rows (a (n, width) array) before they are written, to fill columns
            the loop leaves to it (e.g. telemetry.derived.Diagnostics), off the critical path.
        priority: SCHED_FIFO priority of the writer thread (0: normal scheduling; a loop
            that runs Python gives timing.sched.helper_priority).

    Attributes:
        ring: (capacity, width) float64; row k of the run goes to ``ring[k % capacity]``.
        head: int64[2]: ``head[0]`` the number of rows ever written (the loop increments
            it after writing a row), ``head[TAKEN]`` the rows the writer has taken out of
            the ring (copied, or counted lost); a failed or closed writer sets it far
            beyond ``head[0]``, so that a loop waiting for room never waits for it.
        columns: group name -> column index (scalar groups) or slice (vector groups).
        width: float64 columns per row.
        lost_rows: rows overwritten before the writer copied them.
    """

    def __init__(self, path, groups, meta: dict, capacity: int = 1 << 16, period: float = 0.025,
                 derive=None, priority: int = 0):
        self.path = Path(path)
        self.groups = [(str(n), w if isinstance(w, tuple) else int(w)) for n, w in groups]
        self.columns = {}
        col = 0
        for name, width in self.groups:
            n = width[0] if isinstance(width, tuple) else width
            if n < 1 or name in self.columns:
                raise ValueError(f"telemetry group {name!r}: duplicate name or width {n} < 1")
            self.columns[name] = col if width == 1 else slice(col, col + n)
            col += n
        if not isinstance(self.columns.get("t"), int):
            raise ValueError("telemetry groups need a scalar 't' group (the row's time, s)")
        self.width = col
        self.capacity = int(capacity)
        self.ring = np.zeros((self.capacity, self.width))
        self.head = np.zeros(2, dtype=np.int64)
        self.period = float(period)
        self.derive = derive
        self.scene = None          # a telemetry.scene.LogScene: the robot's frames and shape
        self.priority = int(priority)
        self.copied = 0            # rows written to the file, or counted lost
        self.lost_rows = 0
        self.events_written = 0
        self._events = collections.deque()
        self.listeners = []        # listener(kind, fields) for every event (the live view)
        self._closed = False
        self._flushed = False      # flush_rows: every row written, the writer thread stopped
        self._close_lock = threading.Lock()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        # rows from this index on are held back (the loop's events for them may still come)
        self.released = np.full(1, np.iinfo(np.int64).max, dtype=np.int64)
        self._file = None
        try:
            with deferred_signals():    # a Ctrl-C now would leave a file without a header
                self._create(meta)
                self._thread = threading.Thread(target=self._run, name="telemetry-writer",
                                                daemon=True)
                self._thread.start()
                atexit.register(self.close)
        except KeyboardInterrupt:       # held back until the header was written
            self.close({"reason": "interrupted during start-up"})
            raise

    def _create(self, meta: dict) -> None:
        """Open the file and write the header, schemas, channels and ``meta``."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "wb")
            self._mcap = McapWriter(self._file, COMPRESSION, library="hilrig telemetry")
            schema = self._mcap.add_schema(TICK_SCHEMA, "ros1msg",
                                           schema_text(self.groups).encode())
            self._tick_channel = self._mcap.add_channel(TICK_TOPIC, "ros1", schema)
            schema = self._mcap.add_schema(EVENT_SCHEMA, "jsonschema",
                                           json.dumps(EVENT_JSON_SCHEMA).encode())
            self._event_channel = self._mcap.add_channel(EVENT_TOPIC, "json", schema)
            self._mcap.add_metadata("meta", {"json": to_json(meta)})
            self._mcap.flush()
        except OSError as exc:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
            raise TelemetryError(f"telemetry log {self.path}: cannot write it: "
                                 f"{exc.strerror or exc}") from None

    # -- any thread ---------------------------------------------------------------------

    @property
    def failure(self) -> str | None:
        """Why the writer stopped (a write error, e.g. a full disk), or None while it is fine."""
        if self._failure is None:
            return None
        return f"telemetry log {self.path}: writing failed: {_describe(self._failure)}"

    def event(self, kind: str, **fields) -> None:
        """Record an event: fields become JSON (numpy values as numbers, other objects as text).

        ``t`` (s, a number) is the event's time; without it, the time of the latest row.
        Thread-safe without locks (a deque append). Events after ``close`` are dropped.
        Each of ``listeners`` is also called, in the caller's thread (it must be quick).
        """
        if "t" in fields:
            fields["t"] = float(fields["t"])
        else:
            h = int(self.head[0])
            fields["t"] = float(self.ring[(h - 1) % self.capacity, self.columns["t"]]) if h else 0.0
        self._events.append((kind, fields))
        for listener in self.listeners:
            listener(kind, fields)

    def wait_for_room(self) -> None:
        """Return once the ring has room for the next row: what a loop without a deadline
        (lockstep, ``--fast``) calls before writing one, so that it never laps the writer.
        Polls every WAIT_SECONDS; returns at once if the writer has failed or stopped."""
        while self.head[0] - self.head[TAKEN] >= self.capacity - 1:   # (rows.ring_full)
            time.sleep(WAIT_SECONDS)

    def flush_rows(self) -> int:
        """Stop the writer thread and write every row the loop has published; returns
        ``lost_rows``, now final. Call it after the loop has stopped writing rows, to know
        the count before the summary is made; ``close`` then adds the events and the
        summary. A write error is kept for ``close`` to raise (``failure`` names it).
        Ctrl-C and SIGTERM are ignored meanwhile (timing.signals.ignored_signals): one, as a run
        ended with its writer behind, cut this drain and lost the rows not yet written."""
        with ignored_signals(), self._close_lock:
            if self._flushed:
                return self.lost_rows
            self._flushed = True
            self._stop.set()
            self._thread.join()
            if self._failure is None:
                try:
                    self._drain(final=True)
                except Exception as exc:  # noqa: BLE001 -- raised by close(), in its turn
                    self._failure = exc
            self.head[TAKEN] = np.iinfo(np.int64).max // 2     # no loop waits for it now
            return self.lost_rows

    def close(self, summary: dict | None = None) -> None:
        """Write every row and event, then ``summary`` (JSON), and finish the file. Idempotent.

        Call it after the loop has stopped writing rows. Raises TelemetryError if the
        writer failed (the file is then finished as far as possible).
        """
        self.flush_rows()
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            atexit.unregister(self.close)
            try:
                if self._failure is None:
                    self._drain(final=True)       # the events that came after flush_rows
                    self.head[TAKEN] = np.iinfo(np.int64).max // 2
                stats = {"rows": self.copied - self.lost_rows, "lost_rows": self.lost_rows,
                         "events": self.events_written}
                self._mcap.add_metadata("summary", {"json": json.dumps(
                    {**(summary or {}), "telemetry": stats}, default=_plain)})
                self._mcap.finish()
            except Exception as exc:  # noqa: BLE001 -- reported below, with the first cause
                self._failure = self._failure or exc
            try:
                self._file.close()  # flushes: fails again if the disk does
            except OSError as exc:
                self._failure = self._failure or exc
            if self._failure is not None:
                raise TelemetryError(self.failure) from self._failure

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Close; an exception leaving the block is recorded as an ``exception`` event."""
        if exc is not None:
            self.event("exception", type=exc_type.__name__, message=str(exc))
        self.close()

    # -- writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        if self.priority > 0:
            apply_thread(-1, self.priority)
        next_chunk = time.monotonic() + CHUNK_PERIOD
        enough = min(CHUNK_ROWS, self.capacity // 2)  # rows that make a wake-up write
        try:
            while not self._stop.wait(self.period):
                if self.head[0] - self.copied >= enough or time.monotonic() >= next_chunk:
                    self._drain()
                    next_chunk = time.monotonic() + CHUNK_PERIOD
        except Exception as exc:  # noqa: BLE001 -- re-raised by close() in the caller's thread
            self._failure = exc
            self.head[TAKEN] = np.iinfo(np.int64).max // 2     # no loop waits for it now

    def _drain(self, final: bool = False) -> None:
        """Write the rows [copied, head) (before ``released`` unless ``final``) and the
        events up to their time, then hand them to the OS.

        One chunk per CHUNK_ROWS rows at most, each a copy of one contiguous stretch of
        the ring (a chunk stops at the ring's end), so that each step is short. An event
        goes into the chunk that holds the rows up to its time (``final``: the last one).
        """
        end = int(self.head[0]) if final else min(int(self.head[0]), int(self.released[0]))
        cap = self.capacity
        while True:
            self.copied += self._lost(self.copied, end)
            self.head[TAKEN] = self.copied
            first = self.copied
            start = first % cap
            n = min(end - first, CHUNK_ROWS, cap - start)
            rows = self.ring[start:start + n].copy()
            lost = self._lost(first, first + n)  # overwritten while being copied
            if self.derive is not None and n > lost:
                self.derive(rows[lost:])
            if final and first + n >= end:
                until = np.inf                      # the last chunk: every event
            elif n > lost:
                until = rows[n - 1, self.columns["t"]]
            elif int(self.head[0]) <= first:
                until = np.inf                      # no row waits: the events are the newest
            else:
                until = -np.inf
            events, raw = [], []
            while self._events and (self._events[0][1]["t"] <= until
                                    or not np.isfinite(self._events[0][1]["t"])):
                kind, fields = self._events.popleft()
                stamp = int(_stamps(fields["t"]))
                events.append((self._event_channel, stamp, self.events_written & 0xFFFFFFFF,
                               json.dumps({"kind": kind, **fields}, default=_plain).encode()))
                raw.append((stamp, kind, fields))
                self.events_written += 1
            self.copied = first + n
            self.head[TAKEN] = self.copied       # their slots are free for the loop again
            stamps = _stamps(rows[lost:, self.columns["t"]])
            if self.scene is not None:           # the robot's frames at their rate
                try:
                    events += self.scene.chunk(self._mcap, rows[lost:], stamps, raw)
                except Exception as exc:  # noqa: BLE001 -- a model's frames (a user's code)
                    self.scene = None                # must not stop the log: no more 3D
                    self.event("scene_error", message=_describe(exc))
            self._mcap.add_chunk(self._tick_channel, stamps, rows[lost:],
                                 np.arange(first + lost, first + n) & 0xFFFFFFFF, events)
            if self.copied >= end:
                break
            time.sleep(0)  # between chunks, let a waiting loop thread take the GIL
        self._mcap.flush()

    def _lost(self, first: int, end: int) -> int:
        """How many rows from ``first`` (at most up to ``end``) the loop has started to
        overwrite (slot k is rewritten while head goes k + capacity -> + 1); counted
        in ``lost_rows`` and logged as a ``ring_overrun`` event."""
        lost = min(int(self.head[0]) - self.capacity + 1 - first, end - first)
        if lost <= 0:
            return 0
        self.lost_rows += lost
        self.event("ring_overrun", lost=lost, first_row=first)
        return lost


ON_OVERRUN = ("stop", "warn")     # telemetry.on_overrun


class RowLoss:
    """``telemetry.on_overrun`` for a loop that never waits for its writer (a paced loop):
    what it does once the writer has lost rows (``Telemetry.lost_rows``).

    ``check()``, now and then (each tick, or each supervisor poll): on the first lost
    rows, "stop" returns True (the caller stops the run safely), "warn" logs one line on
    stderr (with ``log``) and returns False. ``settle(reason)`` after the loop: every row
    written (``Telemetry.flush_rows``), the reason the run ends with, naming the count,
    or None if no row was lost.
    """

    def __init__(self, telemetry: Telemetry, policy: str, log: logging.Logger):
        if policy not in ON_OVERRUN:
            raise ValueError(f"telemetry.on_overrun: {policy!r} (one of {ON_OVERRUN})")
        self.telemetry = telemetry
        self.policy = policy
        self.log = log
        self.noticed = False      # the first loss was acted on
        self.stopped = False      # ... by stopping the run

    def describe(self, lost: int) -> str:
        """The loss, for a reason or a warning line."""
        return (f"telemetry ring overrun: {lost} rows lost (the log writer fell behind the "
                f"loop's ring of {self.telemetry.capacity} rows)")

    def check(self) -> bool:
        """True once, when rows were lost and the policy is "stop"; "warn": one line."""
        lost = self.telemetry.lost_rows
        if not lost or self.noticed:
            return False
        self.noticed = True
        if self.policy == "stop":
            self.stopped = True
            return True
        self.log.warning("%s so far: the run goes on (telemetry.on_overrun = 'warn'); its "
                         "summary gives the total", self.describe(lost))
        return False

    def settle(self, reason: str) -> str | None:
        """After the loop: write every row; the reason the run ends with if rows were
        lost (``reason`` with the final count), else None."""
        lost = self.telemetry.flush_rows()
        if not lost:
            return None
        if self.stopped:
            return f"{self.describe(lost)}: stopped the run (telemetry.on_overrun = 'stop')"
        return f"{reason}, but {self.describe(lost)}"


def _describe(exc: BaseException) -> str:
    """An OSError as its errno text (``No space left on device``), anything else as type: text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _stamps(t):
    """MCAP log times (ns) of times t (s): NaN -> 0, clipped to [0, 9e9] s."""
    return np.rint(np.clip(np.nan_to_num(t), 0.0, 9e9) * 1e9).astype(np.int64)


def _plain(value):
    """JSON for what json cannot encode: numpy scalars and arrays as numbers, the rest as text."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return str(value)
