"""An MCAP writer that builds each chunk with numpy: a few calls per chunk, none per message.

The mcap package's ``Writer`` appends messages one Python call at a time (about 4 us
each, plus about 2 us each again when the chunk's message index is written), all
of it holding the GIL: at 5 kHz a 0.5 s chunk kept a real-time loop thread off the
GIL for 8 ms. Here a chunk of n fixed-size messages is one structured numpy array
(its bytes are the message records), its message index another, and the chunk's
payload goes to the file without a copy; compression, the CRC and the file write
release the GIL. Records other than chunks, messages and message indexes are
serialised by the mcap package's own record classes.

Layout written (see https://mcap.dev/spec): magic, Header, then Schema, Channel
and Metadata records outside chunks as they are added, Chunk records each followed
by its Message Index records, DataEnd; summary section: Schemas, Channels,
Statistics, Chunk Indexes, Metadata Indexes, Summary Offsets; Footer; magic.
"""
from __future__ import annotations

import struct
import zlib
from collections import defaultdict

import lz4.frame
import numpy as np
import zstandard
from mcap.data_stream import RecordBuilder
from mcap.opcode import Opcode
from mcap.records import (
    Channel,
    ChunkIndex,
    DataEnd,
    Footer,
    Header,
    Metadata,
    MetadataIndex,
    Schema,
    Statistics,
    SummaryOffset,
)

MAGIC = b"\x89MCAP0\r\n"
MESSAGE_HEADER = 9 + 22  # opcode, record length; channel, sequence, log and publish time
# chunk compression name -> a factory of the compress function (one zstd context per writer)
COMPRESSORS = {"zstd": lambda: zstandard.ZstdCompressor().compress,
               "lz4": lambda: lz4.frame.compress, "": lambda: memoryview}


def message_dtype(payload_bytes: int) -> np.dtype:
    """The packed layout of one Message record with a payload of ``payload_bytes``."""
    return np.dtype([("opcode", "u1"), ("length", "<u8"), ("channel", "<u2"),
                     ("sequence", "<u4"), ("log_time", "<u8"), ("publish_time", "<u8"),
                     ("data", "u1", (payload_bytes,))])


class McapWriter:
    """Write an MCAP file to a binary ``stream`` (the caller closes it).

    Args:
        stream: a file opened "wb".
        compression: chunk compression, "zstd", "lz4" or "" (none).
        library: the Header's library string.
    """

    def __init__(self, stream, compression: str = "zstd", library: str = ""):
        if compression not in COMPRESSORS:
            raise ValueError(f"MCAP chunk compression {compression!r}: expected one of "
                             f"{sorted(COMPRESSORS)}")
        self._stream = stream
        self._compress = COMPRESSORS[compression]()
        self._compression = compression
        self._position = 0
        self._schemas: list[Schema] = []
        self._channels: list[Channel] = []
        self._chunk_indexes: list[ChunkIndex] = []
        self._metadata_indexes: list[MetadataIndex] = []
        self._counts: dict[int, int] = defaultdict(int)
        self._start_time = self._end_time = None
        self._write(MAGIC)
        self._write_records(Header(profile="", library=library))

    def add_schema(self, name: str, encoding: str, data: bytes) -> int:
        """Register a schema; returns its id."""
        schema = Schema(id=len(self._schemas) + 1, name=name, encoding=encoding, data=data)
        self._schemas.append(schema)
        self._write_records(schema)
        return schema.id

    def add_channel(self, topic: str, message_encoding: str, schema_id: int) -> int:
        """Register a channel; returns its id."""
        channel = Channel(id=len(self._channels) + 1, topic=topic,
                          message_encoding=message_encoding, schema_id=schema_id, metadata={})
        self._channels.append(channel)
        self._write_records(channel)
        return channel.id

    def add_metadata(self, name: str, data: dict[str, str]) -> None:
        """Write a Metadata record (string keys and values)."""
        offset = self._position
        length = self._write_records(Metadata(name=name, metadata=data))
        self._metadata_indexes.append(MetadataIndex(offset=offset, length=length, name=name))

    def add_chunk(self, channel: int, log_times: np.ndarray, payloads: np.ndarray,
                  sequences: np.ndarray, extra=()) -> None:
        """Write one chunk: n fixed-size messages on ``channel``, then the ``extra`` ones.

        log_times, sequences: n integers (ns; uint32 counters); payloads: n rows whose
        bytes are the messages' data (any dtype, C order). extra: (channel,
        log_time ns, sequence, data bytes) of other messages, few.
        """
        n = len(log_times)
        payloads = np.ascontiguousarray(payloads)
        size = payloads.itemsize * (payloads.size // n) if n else 0
        records = np.empty(n, dtype=message_dtype(size))
        records["opcode"] = Opcode.MESSAGE
        records["length"] = MESSAGE_HEADER - 9 + size
        records["channel"] = channel
        records["sequence"] = sequences
        records["log_time"] = log_times
        records["publish_time"] = log_times
        records["data"] = payloads.view(np.uint8).reshape(n, size)
        # the other messages go in log-time order among the rows: each after the rows
        # whose log time is not later than its own
        extra = sorted(extra, key=lambda message: message[1])
        tail = [struct.pack("<BQHIQQ", Opcode.MESSAGE, MESSAGE_HEADER - 9 + len(data), ch,
                            sequence, stamp, stamp) + data for ch, stamp, sequence, data in extra]
        stamps = np.array([message[1] for message in extra], dtype=np.int64)
        sizes = np.array([len(record) for record in tail], dtype=np.int64)
        places = np.searchsorted(log_times, stamps, side="right") if n and \
            np.all(np.diff(log_times) >= 0) else np.full(len(extra), n)
        before_row = np.zeros(n + 1, np.int64)          # bytes of extra records before row i
        np.add.at(before_row, places, sizes)
        before_row = np.cumsum(before_row)
        index = {channel: np.column_stack(
            [log_times, np.arange(n) * records.itemsize + before_row[:n]]).astype("<u8")} \
            if n else {}
        offsets = places * records.itemsize + np.concatenate([[0], np.cumsum(sizes)[:-1]]) \
            if len(extra) else []
        for (ch, stamp, _, _), offset in zip(extra, offsets):
            index.setdefault(ch, np.zeros((0, 2), "<u8"))
            index[ch] = np.vstack([index[ch], np.array([[stamp, offset]], "<u8")])
        if not index:
            return
        if tail:
            pieces, row = [], 0
            for place, record in zip(places, tail):
                pieces += [records[row:place].tobytes(), record]
                row = place
            body = b"".join(pieces) + records[row:].tobytes()
        else:
            body = records.view(np.uint8)
        times = np.concatenate([pairs[:, 0] for pairs in index.values()])
        start, end = int(times.min()), int(times.max())
        compressed = self._compress(body)
        # the Chunk record, its payload handed to the file as it is (no copy)
        name = self._compression.encode()
        header = struct.pack(f"<QQQII{len(name)}sQ", start, end, len(body), zlib.crc32(body),
                             len(name), name, len(compressed))
        chunk_start = self._position
        self._write(struct.pack("<BQ", Opcode.CHUNK, len(header) + len(compressed)) + header)
        self._write(compressed)
        chunk_length = self._position - chunk_start
        offsets = {}
        index_start = self._position
        for ch, pairs in index.items():
            offsets[ch] = self._position
            self._write(struct.pack("<BQHI", Opcode.MESSAGE_INDEX, 6 + pairs.nbytes, ch,
                                    pairs.nbytes) + pairs.tobytes())
            self._counts[ch] += len(pairs)
        self._chunk_indexes.append(ChunkIndex(
            message_start_time=start, message_end_time=end, chunk_start_offset=chunk_start,
            chunk_length=chunk_length, message_index_offsets=offsets,
            message_index_length=self._position - index_start, compression=self._compression,
            compressed_size=len(compressed), uncompressed_size=len(body)))
        self._start_time = start if self._start_time is None else min(self._start_time, start)
        self._end_time = end if self._end_time is None else max(self._end_time, end)

    def finish(self) -> None:
        """Write DataEnd, the summary section and the Footer, and flush the stream."""
        self._write_records(DataEnd(data_section_crc=0))
        summary_start = self._position
        builder, groups = RecordBuilder(), []
        for opcode, records in (
                (Opcode.SCHEMA, self._schemas), (Opcode.CHANNEL, self._channels),
                (Opcode.STATISTICS, [Statistics(
                    message_count=sum(self._counts.values()), schema_count=len(self._schemas),
                    channel_count=len(self._channels), attachment_count=0,
                    metadata_count=len(self._metadata_indexes),
                    chunk_count=len(self._chunk_indexes),
                    message_start_time=self._start_time or 0,
                    message_end_time=self._end_time or 0,
                    channel_message_counts=dict(self._counts))]),
                (Opcode.CHUNK_INDEX, self._chunk_indexes),
                (Opcode.METADATA_INDEX, self._metadata_indexes)):
            group_start = builder.count
            for record in records:
                record.write(builder)
            groups.append(SummaryOffset(group_opcode=opcode, group_start=summary_start
                                        + group_start, group_length=builder.count - group_start))
        offsets_start = summary_start + builder.count
        for group in groups:
            group.write(builder)
        summary = builder.end()
        crc = zlib.crc32(struct.pack("<BQQQ", Opcode.FOOTER, 20, summary_start, offsets_start),
                         zlib.crc32(summary))
        self._write(summary)
        self._write_records(Footer(summary_start=summary_start,
                                   summary_offset_start=offsets_start, summary_crc=crc))
        self._write(MAGIC)
        self._stream.flush()

    def flush(self) -> None:
        """Hand everything written so far to the operating system."""
        self._stream.flush()

    def _write_records(self, *records) -> int:
        builder = RecordBuilder()
        for record in records:
            record.write(builder)
        data = builder.end()
        self._write(data)
        return len(data)

    def _write(self, data) -> None:
        self._stream.write(data)
        self._position += len(data)
