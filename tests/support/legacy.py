"""Legacy (magic 0 and 1) and v2 message sets written by kafka-python, an independent writer.

kafka-python's builders write what a producer sends: a compressed wrapper at offset 0 with
timestamp 0. ``legacy_set`` then does what the broker's ``LogValidator`` did to it before it
reached the log: the wrapper's offset becomes its last inner offset, a v1 wrapper's timestamp
the largest inner one (or the LogAppendTime, with the timestamp-type bit, CRC32 written again).
``v2_batch`` places a kafka-python v2 batch at its base offset. ``read_back`` decodes a segment
with kafka-python's reader, CRCs checked, for the tests to compare with Kafka's rules.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
Rec = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


def _restamp(msg: bytearray, pos: int, attributes_or: int, timestamp: int | None) -> None:
    """Set bits in a v1 message's attributes and its timestamp, then its CRC32 again."""
    size = struct.unpack_from(">i", msg, pos + 8)[0]
    msg[pos + 17] |= attributes_or
    if timestamp is not None:
        struct.pack_into(">q", msg, pos + 18, timestamp)
    crc = zlib.crc32(bytes(msg[pos + 16 : pos + 12 + size]))
    struct.pack_into(">I", msg, pos + 12, crc)


def legacy_set(
    magic: int, codec: str, records: Sequence[Rec], log_append_time: int | None = None
) -> bytes:
    """The bytes a broker stored for ``records``: one message each (no codec) or one wrapper."""
    c = CODECS[codec]
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=c, batch_size=1 << 30)
    first = records[0][0]
    for off, ts, key, value in records:
        inner = off - first if c and magic == 1 else off
        b.append(inner, timestamp=ts, key=key, value=value)
    out = bytearray(b.build())
    lat = log_append_time is not None and magic == 1
    if c:
        struct.pack_into(">q", out, 0, records[-1][0])  # the broker's offset (outside the CRC)
        if magic == 1:
            top = max(r[1] for r in records)
            _restamp(out, 0, 0x08 if lat else 0, log_append_time if lat else top)
    elif lat:
        pos = 0
        while pos < len(out):
            _restamp(out, pos, 0x08, log_append_time)
            pos += 12 + struct.unpack_from(">i", out, pos + 8)[0]
    return bytes(out)


def set_crc(msg: bytearray, pos: int = 0) -> None:
    """Write the CRC32 of the legacy message at ``pos`` again."""
    size = struct.unpack_from(">i", msg, pos + 8)[0]
    struct.pack_into(">I", msg, pos + 12, zlib.crc32(bytes(msg[pos + 16 : pos + 12 + size])))


def wrapper(magic: int, codec: int, value: bytes, offset: int, timestamp: int = 0) -> bytes:
    """A wrapper message around ``value`` (already compressed, or any bytes), by hand: for
    sets kafka-python would not write (hostile ones, inner messages of another magic)."""
    body = bytes((magic, codec)) + (struct.pack(">q", timestamp) if magic else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = bytearray(struct.pack(">qiI", offset, len(body) + 4, 0) + body)
    set_crc(msg)
    return bytes(msg)


def v2_batch(base_offset: int, codec: str, records: Sequence[Rec]) -> bytes:
    """A kafka-python v2 batch with its records at ``base_offset`` onwards (no producer)."""
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=CODECS[codec], is_transactional=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for off, ts, key, value in records:
        b.append(off - base_offset, timestamp=ts, key=key, value=value, headers=[])
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base_offset)  # baseOffset lies outside the CRC32C
    return bytes(out)


@dataclass(frozen=True)
class ReadRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    magic: int  # of the outer batch or message


def read_back(path: Path) -> tuple[list[ReadRecord], list[tuple[int, int, int]]]:
    """kafka-python's view of a segment: its records, and per outer batch (magic, codec, last
    offset); every CRC is validated."""
    recs: list[ReadRecord] = []
    batches: list[tuple[int, int, int]] = []
    mr = MemoryRecords(path.read_bytes())
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc(), f"{path}: bad CRC at offset {batch.base_offset}"
        last = -1
        for r in batch:
            if batch.magic < 2:
                assert r.validate_crc(), f"{path}: bad inner CRC at offset {r.offset}"
            recs.append(ReadRecord(r.offset, r.timestamp, r.key, r.value, batch.magic))
            last = r.offset
        batches.append((batch.magic, batch.compression_type, last))
    return recs, batches
