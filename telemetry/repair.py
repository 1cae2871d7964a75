"""Finish a telemetry log whose writer did not: ``hil log repair LOG``.

A process killed mid-run (SIGKILL, power loss) leaves its MCAP file without the
summary section, the index and the closing magic, often with a chunk cut in the
middle: the mcap package's indexed reader (``make_reader``) then reads nothing.
``repair`` reads the file record by record up to the first one that is cut or
damaged, and writes every message it got, in log-time order, with the schemas,
channels and metadata, to a new file through the mcap package's own ``Writer``:
a finished MCAP with summary, chunk index and statistics that any reader opens.
A ``summary`` metadata record says that the file was repaired and from what.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hilrig.telemetry.logfile import LogError
from hilrig.telemetry.mcap_writer import MAGIC
from hilrig.telemetry.recorder import TICK_TOPIC
from mcap.records import Channel, Footer, Message, Metadata, Schema
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType, Writer


@dataclass
class RepairReport:
    """What ``repair`` read and wrote."""

    source: Path
    out: Path
    messages: int         # messages written (ticks and events)
    ticks: int            # of them, tick rows
    finished: bool        # the source was already complete (its Footer was read)
    cause: str            # why reading the source stopped ("" if it ended cleanly)
    last_time: float      # log time of the last message, s

    def describe(self) -> str:
        state = "was complete" if self.finished else \
            f"ended early ({self.cause or 'no footer'})"
        return (f"wrote {self.out}: {self.ticks} ticks, {self.messages - self.ticks} events, "
                f"up to t = {self.last_time:g} s ({self.source} {state})")


def repair(source: str | Path, out: str | Path) -> RepairReport:
    """Write a finished copy of the MCAP log ``source`` to ``out``; LogError if there is
    nothing to repair from (missing, not MCAP)."""
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise LogError(f"{source}: not found")
    if source.resolve() == out.resolve():
        raise LogError(f"{out}: the repaired log must go to another file than its source")
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    messages: list[Message] = []
    metadata: list[Metadata] = []
    finished, cause = False, ""
    with open(source, "rb") as stream:
        if stream.read(len(MAGIC)) != MAGIC:
            raise LogError(f"{source}: not an MCAP file (it does not start with the MCAP magic)")
        stream.seek(0)
        try:
            for record in StreamReader(stream, validate_crcs=True).records:
                if isinstance(record, Schema):
                    schemas.setdefault(record.id, record)
                elif isinstance(record, Channel):
                    channels.setdefault(record.id, record)
                elif isinstance(record, Message):
                    messages.append(record)
                elif isinstance(record, Metadata) and record.name not in \
                        {m.name for m in metadata}:
                    metadata.append(record)
                elif isinstance(record, Footer):
                    finished = True
        except Exception as exc:  # noqa: BLE001 -- the cut: keep what was read before it
            cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    messages.sort(key=lambda m: m.log_time)       # stable: file order among equal times
    out.parent.mkdir(parents=True, exist_ok=True)
    tick_channels = {cid for cid, ch in channels.items() if ch.topic == TICK_TOPIC}
    try:
        with open(out, "wb") as stream:
            writer = Writer(stream, compression=CompressionType.ZSTD)
            writer.start(profile="", library="hilrig log repair")
            schema_ids = {old: writer.register_schema(s.name, s.encoding, s.data)
                          for old, s in schemas.items()}
            channel_ids = {old: writer.register_channel(c.topic, c.message_encoding,
                                                        schema_ids.get(c.schema_id, 0),
                                                        c.metadata)
                           for old, c in channels.items()}
            for m in messages:
                if m.channel_id in channel_ids:
                    writer.add_message(channel_ids[m.channel_id], m.log_time, m.data,
                                       m.publish_time, m.sequence)
            for record in metadata:
                if record.name != "summary":
                    writer.add_metadata(record.name, record.metadata)
            written = {r.name: r for r in metadata}
            summary = json.loads(written["summary"].metadata["json"]) if "summary" in written \
                else {}
            summary["repaired"] = {"source": str(source), "finished": finished, "cause": cause,
                                   "messages": len(messages)}
            writer.add_metadata("summary", {"json": json.dumps(summary)})
            writer.finish()
    except OSError as exc:
        raise LogError(f"{out}: cannot write the repaired log: {exc.strerror or exc}") from None
    ticks = sum(1 for m in messages if m.channel_id in tick_channels)
    last = messages[-1].log_time * 1e-9 if messages else 0.0
    return RepairReport(source, out, len(messages), ticks, finished, cause, last)
