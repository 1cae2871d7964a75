"""Finish a telemetry log whose writer did not: ``hil log repair LOG``.

A process killed mid-run (SIGKILL, power loss) leaves its MCAP file without the
summary section, the index and the closing magic, often with a chunk cut in the
middle: the mcap package's indexed reader (``make_reader``) then reads nothing.
``repair`` reads the file record by record up to the first one that is cut or
damaged, and writes every message it got, in log-time order, with the schemas,
channels and metadata, to a new file through the mcap package's own ``Writer``:
a finished MCAP with summary, chunk index and statistics that any reader opens.
A ``summary`` metadata record says that the file was repaired and from what.

Whatever the source holds, the repair is bounded: it streams (messages go to the new
file as they are read, through a reorder window of REORDER messages that puts them in
log-time order: hilrig's writer already writes them so), a chunk that declares more
than MAX_CHUNK_BYTES uncompressed, or more than MAX_RATIO times its compressed size, or
that holds anything but schemas, channels and messages is where reading stops (a
compression bomb is all three), at most
MAX_METADATA metadata records are kept, and the new file is written beside ``out`` and
renamed over it only when finished, so that no ``out`` (a hard link to the source
included) is ever half-written.
"""
from __future__ import annotations

import heapq
import json
import os
from dataclasses import dataclass
from pathlib import Path

from hilrig.telemetry.logfile import LogError
from hilrig.telemetry.mcap_writer import MAGIC
from hilrig.telemetry.recorder import TICK_TOPIC
from mcap.records import Channel, Chunk, Footer, Message, Metadata, Schema
from mcap.opcode import Opcode
from mcap.stream_reader import StreamReader, get_chunk_data_stream
from mcap.writer import CompressionType, IndexType, Writer

REORDER = 100_000             # messages held at most to put them in log-time order
MAX_CHUNK_BYTES = 64 << 20    # a chunk declaring more uncompressed ends the reading,
MAX_RATIO = 1000              # and so does one declaring more than this times its size
MAX_METADATA = 1000           # metadata records kept (by name)
CHUNK_BYTES = 64 << 10        # the repaired file's chunks: a viewer seeks by 64 kB
# its indexes (no attachment index: the file has none, and the mcap writer would point a
# summary offset at the empty group, which the MCAP doctor flags)
INDEXES = IndexType.CHUNK | IndexType.MESSAGE | IndexType.METADATA


@dataclass
class RepairReport:
    """What ``repair`` read and wrote."""

    source: Path
    out: Path
    messages: int         # messages written (ticks, events, the robot's frames and scene)
    ticks: int            # of them, tick rows
    finished: bool        # the source was already complete (its Footer was read)
    cause: str            # why reading the source stopped ("" if it ended cleanly)
    last_time: float      # log time of the last message, s

    def describe(self) -> str:
        state = "was complete" if self.finished else \
            f"ended early ({self.cause or 'no footer'})"
        return (f"wrote {self.out}: {self.ticks} ticks, {self.messages - self.ticks} other "
                f"messages (events, 3D frames), up to t = {self.last_time:g} s ({self.source} "
                f"{state})")


def repair(source: str | Path, out: str | Path) -> RepairReport:
    """Write a finished copy of the MCAP log ``source`` to ``out``; LogError if there is
    nothing to repair from (missing, not MCAP) or ``out`` is the source."""
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise LogError(f"{source}: not found")
    if source.resolve() == out.resolve() or (out.exists() and os.path.samefile(source, out)):
        raise LogError(f"{out}: the repaired log must go to another file than its source")
    partial = out.with_name(out.name + ".partial")
    try:
        with open(source, "rb") as stream, open(partial, "wb") as sink:
            if stream.read(len(MAGIC)) != MAGIC:
                raise LogError(f"{source}: not an MCAP file (it does not start with the MCAP "
                               "magic)")
            stream.seek(0)
            copy = _Copy(sink, source)
            copy.read(stream)
            copy.finish()
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise LogError(f"{out}: cannot write the repaired log: {exc.strerror or exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return RepairReport(source, out, copy.messages, copy.ticks, copy.finished, copy.cause,
                        copy.last_time * 1e-9)


class _Copy:
    """The repaired copy being written: channels and schemas registered as the source
    names them, messages through the reorder window, metadata at the end."""

    def __init__(self, sink, source: Path):
        self.source = source
        self.writer = Writer(sink, compression=CompressionType.ZSTD, chunk_size=CHUNK_BYTES,
                             index_types=INDEXES)
        self.writer.start(profile="", library="hilrig log repair")
        self.schemas: dict[int, int] = {}       # source id -> new id
        self.channels: dict[int, int] = {}
        self.tick_channels: set[int] = set()
        self.metadata: dict[str, Metadata] = {}
        self.window: list = []                  # heap of (log_time, order, message)
        self.order = 0
        self.messages = self.ticks = 0
        self.last_time = 0
        self.finished, self.cause = False, ""

    def read(self, stream) -> None:
        """Every record up to the source's end or its first cut or damaged one."""
        try:
            for record in StreamReader(stream, validate_crcs=True, emit_chunks=True).records:
                if isinstance(record, Chunk):
                    for inner in _chunk_records(record):
                        self.add(inner)
                else:
                    self.add(record)
        except Exception as exc:  # noqa: BLE001 -- the cut: keep what was read before it
            self.cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def add(self, record) -> None:
        if isinstance(record, Schema) and record.id not in self.schemas:
            self.schemas[record.id] = self.writer.register_schema(record.name,
                                                                  record.encoding, record.data)
        elif isinstance(record, Channel) and record.id not in self.channels:
            self.channels[record.id] = self.writer.register_channel(
                record.topic, record.message_encoding, self.schemas.get(record.schema_id, 0),
                record.metadata)
            if record.topic == TICK_TOPIC:
                self.tick_channels.add(record.id)
        elif isinstance(record, Message) and record.channel_id in self.channels:
            heapq.heappush(self.window, (record.log_time, self.order, record))
            self.order += 1
            if len(self.window) > REORDER:
                self._write(heapq.heappop(self.window)[2])
        elif isinstance(record, Metadata) and record.name not in self.metadata \
                and len(self.metadata) < MAX_METADATA:
            self.metadata[record.name] = record
        elif isinstance(record, Footer):
            self.finished = True

    def _write(self, m: Message) -> None:
        self.writer.add_message(self.channels[m.channel_id], m.log_time, m.data,
                                m.publish_time, m.sequence)
        self.messages += 1
        self.ticks += m.channel_id in self.tick_channels
        self.last_time = max(self.last_time, m.log_time)

    def finish(self) -> None:
        while self.window:
            self._write(heapq.heappop(self.window)[2])
        for name, record in self.metadata.items():
            if name != "summary":
                self.writer.add_metadata(name, record.metadata)
        try:
            summary = json.loads(self.metadata["summary"].metadata["json"]) \
                if "summary" in self.metadata else {}
        except (KeyError, ValueError):
            summary = {}
        summary = summary if isinstance(summary, dict) else {}
        summary["repaired"] = {"source": str(self.source), "finished": self.finished,
                               "cause": self.cause, "messages": self.messages}
        self.writer.add_metadata("summary", {"json": json.dumps(summary)})
        self.writer.finish()


def _chunk_records(chunk: Chunk) -> list:
    """The schemas, channels and messages of ``chunk``, decompressed once its declared
    size passed the bounds; LogError at anything else (what the MCAP writer of hilrig, or
    any other, never puts in a chunk)."""
    size = chunk.uncompressed_size
    if size > MAX_CHUNK_BYTES or size > MAX_RATIO * len(chunk.data) + (1 << 20):
        raise LogError(f"a chunk of {len(chunk.data)} bytes declares {size} uncompressed "
                       "(a compression bomb, not a log's chunk)")
    stream, length = get_chunk_data_stream(chunk, validate_crc=True)
    records = []
    readers = {Opcode.SCHEMA: Schema.read, Opcode.CHANNEL: Channel.read}
    while stream.count < length:
        opcode, record_length = stream.read1(), stream.read8()
        if opcode == Opcode.MESSAGE:
            records.append(Message.read(stream, record_length))
        elif opcode in readers:
            records.append(readers[opcode](stream))
        else:
            raise LogError(f"a chunk holds a record of opcode {opcode:#04x} (a chunk holds "
                           "schemas, channels and messages only)")
    return records
