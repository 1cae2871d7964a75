"""Reading telemetry logs (MCAP files written by telemetry.recorder) back into arrays.

``read_log`` decodes the tick rows in bulk: inside each decompressed chunk the
tick messages follow one another with one fixed record size, so they are cut out
with one numpy view (the few events interrupt them where their time falls). A log whose
writer did not finish (process killed) is read up to its last intact chunk, with
an ``IncompleteLogWarning``. Rows missing from a log (a ``ring_overrun``: the loop lapped
its writer) are named by a ``RowGapWarning``: each tick message's sequence number is its
row index, so a gap in them, or in the ``tick`` column, is a lost row.
"""
from __future__ import annotations

import io
import json
import re
import struct
import warnings
from pathlib import Path

import numpy as np
from hilrig.telemetry.mcap_writer import MAGIC, MESSAGE_HEADER
from hilrig.telemetry.recorder import EVENT_TOPIC, TICK_TOPIC, to_json
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Footer, Metadata, Schema
from mcap.stream_reader import StreamReader, get_chunk_data_stream

_RECORD = struct.Struct("<BQ")
_CHANNEL = struct.Struct("<H")
_FIELD = re.compile(r"^float64(\[(\d+)\])?\s+(\w+)$")
_IN_CHUNK = {Opcode.SCHEMA: Schema, Opcode.CHANNEL: Channel}
_SEQUENCE = slice(11, 15)   # a message record's sequence: after opcode, length and channel


class LogError(ValueError):
    """The file is missing, not MCAP, or not a hilrig telemetry log."""


class IncompleteLogWarning(UserWarning):
    """The log ends early (its writer did not finish); what is intact was read."""


class RowGapWarning(UserWarning):
    """Rows are missing from the log (its writer lost them); what is there was read."""


def read_log(path) -> tuple[dict, list, dict, dict]:
    """The log at ``path`` as (arrays, events, meta, summary).

    arrays: one per tick group, rows in tick order (scalar groups 1-D, vector groups
    2-D); events: dicts with at least ``kind`` and ``t`` (s); meta: the resolved
    config; summary: the run's summary written at close (empty if the writer did
    not finish). Raises LogError; warns IncompleteLogWarning.
    """
    path = Path(path)
    if not path.is_file():
        raise LogError(f"{path}: not found")
    with open(path, "rb") as stream:
        if stream.read(len(MAGIC)) != MAGIC:
            raise LogError(f"{path}: not an MCAP file (it does not start with the MCAP magic)")
        stream.seek(0)
        log = _Log()
        cause = None
        try:
            for record in StreamReader(stream, emit_chunks=True, validate_crcs=True).records:
                log.add(record)
        except Exception as exc:  # noqa: BLE001 -- a cut or damaged tail: keep what was read
            cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if log.groups is None:
        raise LogError(f"{path}: no {TICK_TOPIC} channel: not a hilrig telemetry log"
                       + (f" (reading stopped: {cause})" if cause else ""))
    arrays = log.arrays()
    gaps = describe_gaps(arrays, log.sequences(), log.events, log.summary)
    if gaps:
        warnings.warn(f"{path}: {gaps}", RowGapWarning, stacklevel=2)
    if cause or not log.finished:
        t = arrays["t"]
        until = f"t = {t[-1]:g} s" if len(t) else "no rows"
        warnings.warn(f"{path}: the log ends early (its writer did not finish"
                      + (f"; {cause}" if cause else "") + f"): read {len(t)} rows, {until}",
                      IncompleteLogWarning, stacklevel=2)
    return arrays, log.events, log.meta, log.summary


def run_arrays(path) -> tuple[dict, list]:
    """The log as the arrays of ``hil sim`` plus its timing arrays, and its events.

    Every tick group becomes an array of the same name; ``meta`` is the config as
    JSON (as ``hil sim`` writes it) and ``jam_events`` the rows [joint, t1, t2] of
    the log's ``jam`` events, ``fault_events`` its faults (``fault_events``) and
    ``fault_detected`` the row [tick, t (s), code] of the law's first detected fault (its
    ``fault_detected`` event; no row: none).
    """
    arrays, events, meta, _ = read_log(path)
    jams = [[e["joint"], e["t1"], e["t2"]] for e in events if e["kind"] == "jam"]
    detected = [[e["tick"], e["t"], e["code"]] for e in events
                if e["kind"] == "fault_detected"][:1]
    return {**arrays, "meta": np.array(to_json(meta)),
            "jam_events": np.array(jams, dtype=float).reshape(-1, 3),
            "fault_events": fault_events(events),
            "fault_detected": np.array(detected, dtype=float).reshape(-1, 3)}, events


def fault_events(events: list) -> np.ndarray:
    """The rows [kind code, joint (1-based), channel, start (s), end (s; NaN: never ended)]
    of every fault a log's events started (jam, clear, fault; a fault_end or, for a jam, a
    clear of its joint ends it), in the order they started: what ``hil sim`` gives
    (plant.faults.started_rows)."""
    from hilrig.plant.faults import CHANNELS, KINDS

    rows: list = []
    for e in events:
        kind = e["kind"]
        if kind in ("jam", "clear", "fault"):
            name = e.get("fault", kind)
            end = e["t"] if kind == "clear" else np.nan
            if kind == "clear":
                for row in rows:
                    if row[1] == e["joint"] and np.isnan(row[4]):
                        row[4] = e["t"]
            rows.append([KINDS[name].code, e["joint"], CHANNELS[e.get("channel", "position")],
                         e["t"], end])
        elif kind == "fault_end":
            code = KINDS[e["fault"]].code
            channel = CHANNELS[e.get("channel", "position")]
            for row in rows:
                if row[:3] == [code, e["joint"], channel] and np.isnan(row[4]):
                    row[4] = e["t"]
                    break
    return np.array(rows, dtype=float).reshape(-1, 5)


def export_npz(path, out) -> dict:
    """Write ``run_arrays(path)`` to the .npz ``out`` (its folder is created); return them."""
    arrays, _ = run_arrays(path)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    return arrays


def describe_gaps(arrays: dict, sequences: np.ndarray, events: list, summary: dict,
                  listed: int = 4) -> str | None:
    """What is missing from a log, in one sentence, or None if nothing is.

    Rows: gaps in the tick messages' sequence numbers (row indices, from 0) and the
    ``ring_overrun`` events and ``lost_rows`` of the summary that count them; ticks: gaps
    in the ``tick`` column that no ``overrun`` event explains (a link loop's skipped
    ticks have no row); events: ``event_overrun`` events. At most ``listed`` ranges each.
    """
    parts = []
    t = arrays.get("t", np.zeros(0))
    ranges = _missing(sequences.astype(np.int64), 0, 1 << 32)
    counted = sum(int(e.get("lost", 0)) for e in events if e.get("kind") == "ring_overrun")
    counted = max(counted, int(summary.get("telemetry", {}).get("lost_rows", 0)))
    lost = max(sum(b - a + 1 for a, b in ranges), counted)
    if lost:
        where = _ranges(ranges, listed, "rows")
        parts.append(f"{lost} rows lost (ring overrun: the log's writer fell behind the "
                     f"loop{'; ' + where if where else ''})")
    if "tick" in arrays and len(arrays["tick"]):
        ticks = arrays["tick"].astype(np.int64)
        skipped = {int(e["tick"]): int(e.get("missed", 0)) for e in events
                   if e.get("kind") == "overrun" and "tick" in e}
        unexplained = [(a, b) for a, b in _missing(ticks, int(ticks[0]))
                       if skipped.get(a - 1, 0) < b - a + 1]
        if unexplained and not lost:
            count = sum(b - a + 1 for a, b in unexplained)
            parts.append(f"{count} ticks have no row ({_ranges(unexplained, listed, 'ticks')})")
    events_lost = sum(int(e.get("lost", 0)) for e in events if e.get("kind") == "event_overrun")
    if events_lost:
        parts.append(f"{events_lost} loop events lost (event ring overflow)")
    if not parts:
        return None
    span = f"; read {len(t)} rows, t = {t[0]:g} .. {t[-1]:g} s" if len(t) else ""
    return "; ".join(parts) + span


def _missing(values: np.ndarray, first: int, modulo: int | None = None) -> list:
    """The ranges [a, b] of integers missing from the increasing run ``values`` that
    should count up by one from ``first`` (``modulo``: the values wrap around it)."""
    if not len(values):
        return []
    steps = np.diff(values)
    if modulo is not None:
        steps %= modulo
    out = [(first, int(values[0]) - 1)] if values[0] > first else []
    for i in np.flatnonzero(steps != 1):
        if steps[i] > 1:
            out.append((int(values[i]) + 1, int(values[i]) + int(steps[i]) - 1))
    return out


def _ranges(ranges: list, listed: int, what: str) -> str:
    """``rows 0..1905, 4000..4010`` (at most ``listed``, then how many more)."""
    text = ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in ranges[:listed])
    more = f" and {len(ranges) - listed} more gaps" if len(ranges) > listed else ""
    return f"{what} {text}{more}" if text else ""


def parse_schema(text: str) -> list[tuple[str, int | tuple]]:
    """Groups of a tick schema (telemetry.recorder.schema_text): ``float64 name`` -> (name, 1),
    ``float64[n] name`` -> (name, (n,))."""
    groups = []
    for line in text.splitlines():
        match = _FIELD.match(line.strip())
        if match is None:
            raise LogError(f"tick schema field {line!r}: only float64 and float64[n] are read")
        groups.append((match[3], (int(match[2]),) if match[1] else 1))
    return groups


class _Log:
    """What the records of one file say, gathered in file order."""

    def __init__(self):
        self.schemas: dict[int, Schema] = {}
        self.tick_channel = self.event_channel = None
        self.groups = None
        self.record_size = 0
        self.prefix = None  # the first bytes of every tick record
        self.parts: list[np.ndarray] = []
        self.sequence_parts: list[np.ndarray] = []   # the tick messages' sequence numbers
        self.events: list[dict] = []
        self.meta: dict = {}
        self.summary: dict = {}
        self.finished = False

    def add(self, record) -> None:
        if isinstance(record, Chunk):
            stream, size = get_chunk_data_stream(record, validate_crc=True)
            self._chunk(stream.read(size))
        elif isinstance(record, Schema):
            self.schemas[record.id] = record
        elif isinstance(record, Channel):
            self._channel(record)
        elif isinstance(record, Metadata) and record.name in ("meta", "summary"):
            setattr(self, record.name, json.loads(record.metadata["json"]))
        elif isinstance(record, Footer):
            self.finished = True

    def _channel(self, channel: Channel) -> None:
        if channel.topic == EVENT_TOPIC:
            self.event_channel = channel.id
        elif channel.topic == TICK_TOPIC and self.groups is None:
            self.tick_channel = channel.id
            self.groups = parse_schema(self.schemas[channel.schema_id].data.decode())
            width = sum(w[0] if isinstance(w, tuple) else w for _, w in self.groups)
            self.record_size = MESSAGE_HEADER + 8 * width
            prefix = _RECORD.pack(Opcode.MESSAGE, self.record_size - 9) + _CHANNEL.pack(channel.id)
            self.prefix = np.frombuffer(prefix, dtype=np.uint8)

    def _chunk(self, data: bytes) -> None:
        pos, end = 0, len(data)
        while pos < end:
            opcode, length = _RECORD.unpack_from(data, pos)
            body = pos + 9
            if opcode == Opcode.MESSAGE:
                (channel,) = _CHANNEL.unpack_from(data, body)
                if channel == self.tick_channel and length == self.record_size - 9:
                    pos += self._tick_run(data, pos)
                    continue
                if channel == self.event_channel:
                    self.events.append(json.loads(data[body + 22:body + length]))
            elif opcode in _IN_CHUNK:    # other writers (mcap's Writer) put these in chunks
                self.add(_IN_CHUNK[opcode].read(ReadDataStream(io.BytesIO(
                    data[body:body + length]))))
            pos = body + length

    def _tick_run(self, data: bytes, pos: int) -> int:
        """Cut out the consecutive tick records from ``pos``; return their total size."""
        size = self.record_size
        count = (len(data) - pos) // size
        grid = np.frombuffer(data, dtype=np.uint8, count=count * size, offset=pos)
        grid = grid.reshape(count, size)
        ok = (grid[:, :len(self.prefix)] == self.prefix).all(axis=1)
        run = count if ok.all() else int(np.argmin(ok))
        self.parts.append(grid[:run, MESSAGE_HEADER:])
        self.sequence_parts.append(np.ascontiguousarray(grid[:run, _SEQUENCE])
                                   .view("<u4").reshape(-1))
        return run * size

    def sequences(self) -> np.ndarray:
        """The tick messages' sequence numbers (uint32), in file order."""
        return np.concatenate(self.sequence_parts) if self.sequence_parts else \
            np.zeros(0, np.uint32)

    def arrays(self) -> dict:
        rows = np.concatenate(self.parts) if self.parts else \
            np.zeros((0, self.record_size - MESSAGE_HEADER), dtype=np.uint8)
        rows = rows.view("<f8")
        out, col = {}, 0
        for name, width in self.groups:
            if isinstance(width, tuple):
                out[name] = np.ascontiguousarray(rows[:, col:col + width[0]])
                col += width[0]
            else:
                out[name] = np.ascontiguousarray(rows[:, col])
                col += 1
        return out

