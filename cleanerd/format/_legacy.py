"""Legacy message sets, magic 0 and 1 (docs/kafka-format.md §2.8): read, check and write them.

The one home of the legacy layout. A log written before Kafka 0.11 holds messages (Kafka's
``LegacyRecord``): offset int64, size int32, CRC32 (not CRC32C) of the bytes from the magic on,
magic int8, attributes int8, a timestamp int64 (v1 only), key and value with int32 lengths. A
compressed set is one wrapper message whose value holds the compressed inner messages (inner
offsets relative to the wrapper for v1, absolute for v0; the wrapper's offset is the last inner
offset). Kafka 4.x still reads and cleans them, so cleanerd does: the batch walk gives each outer
message a row of the batch matrix (``_walk``), ``complete_rows`` finishes a wrapper's row (first
offset, record count) and checks CRC32s, ``index_rows`` gives its records the record index's
columns, and ``build_legacy`` writes what the cleaner keeps in the same magic and codec, as
Kafka's ``MemoryRecordsBuilder`` does.

Legacy data is rare and archived: this is plain Python, per message, bounded like the v2 path
(every size checked against what is there before anything is allocated, decompression within
``max.decompressed.message.bytes``, a compressed inner message refused as Kafka refuses it). The
v2 hot path pays one ``magic < 2`` test per chunk.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cleanerd.format import kernels as k
from cleanerd.format._codecs import (
    LIMIT_SETTING,
    Compression,
    compress,
    decompress,
    decompression_limit,
)
from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._payloads import batch_records_bound

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

__all__ = [
    "LEGACY_MESSAGE_BYTES",
    "MIXED_MAGIC",
    "LegacyRecord",
    "build_legacy",
    "complete_rows",
    "index_rows",
    "is_legacy",
    "legacy_rows",
    "records_of",
]

CRC_AT = 12  # uint32: CRC32 of [magic, end of message)
MAGIC_AT = 16
ATTRIBUTES_AT = 17
TIMESTAMP_AT = 18  # int64, v1 only
CODEC_MASK = 0x07
TIMESTAMP_TYPE = 0x08  # v1: LogAppendTime
MIXED_MAGIC = 0x80
"""Set in a wrapper's row attributes (never written; unused by v2) when an inner message has
another magic than the wrapper (KAFKA-4298): the cleaner writes it again even when whole."""
LEGACY_MESSAGE_BYTES = 512
"""About what reading one legacy message takes (measured: 416 bytes of Python objects while a
wrapper's messages are parsed and their rows gathered, then an 88-byte record index row): what
bounds the messages of one wrapper (``batch_records_bound``): 786k at the default setting, where
the bound on a wrapper's value alone let 5M messages of 26 bytes take about 2.6 GB."""
_OVERHEAD = (14, 22)  # bytes after the size field without key and value: v0, v1
_KEY_AT = (18, 26)  # where the key length sits, from the message's first byte
_HEAD = struct.Struct(">qi")
_NULL = -1


def is_legacy(batches: I64) -> bool:
    """Whether any row of a batch matrix is a legacy message (one vectorised test)."""
    return bool(batches.shape[0]) and bool((batches[:, k.B_MAGIC] < 2).any())


def legacy_rows(batches: I64) -> np.ndarray:
    """Mask of the rows that are legacy messages."""
    mask: np.ndarray = batches[:, k.B_MAGIC] < 2
    return mask


@dataclass(frozen=True, slots=True)
class LegacyRecord:
    """One message of a legacy set: an uncompressed outer message or a wrapper's inner one."""

    offset: int
    magic: int
    timestamp: int  # -1 for v0; a LogAppendTime wrapper's time for its v1 inner messages
    key: bytes | None
    value: bytes | None


class _LegacyError(Exception):
    """A legacy message that does not decode; the caller adds file and position."""


@dataclass(frozen=True, slots=True)
class _Msg:
    """A message parsed in ``data``: ``data[pos:pos+size]`` is all of it, offset field on."""

    pos: int
    size: int
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key_pos: int
    key_len: int
    value_pos: int
    value_len: int


def _parse(data: memoryview, p: int, end: int, what: str) -> _Msg:
    """The message at ``data[p:]``, checked against ``end`` before anything is read."""
    if end - p < k.LOG_OVERHEAD + 5:
        raise _LegacyError(
            f"{what} is cut short: {end - p} bytes left, a message needs at least 17"
        )
    offset, size = _HEAD.unpack_from(data, p)
    magic = data[p + MAGIC_AT]
    if magic > 1:
        raise _LegacyError(
            f"{what} has magic {magic}; a legacy message set holds magic 0 or 1 only"
        )
    if size < _OVERHEAD[magic] or size > end - p - k.LOG_OVERHEAD:
        raise _LegacyError(
            f"{what} has size {size}: outside [{_OVERHEAD[magic]}, {end - p - k.LOG_OVERHEAD}]"
            f" for magic {magic} here"
        )
    stop = p + k.LOG_OVERHEAD + size
    attributes = data[p + ATTRIBUTES_AT]
    timestamp = struct.unpack_from(">q", data, p + TIMESTAMP_AT)[0] if magic == 1 else -1
    q = p + _KEY_AT[magic]
    key_len = struct.unpack_from(">i", data, q)[0]
    if key_len < _NULL or q + 4 + max(key_len, 0) + 4 > stop:
        raise _LegacyError(f"{what} has a key length {key_len} that does not fit its size {size}")
    key_pos = q + 4
    q = key_pos + max(key_len, 0)
    value_len = struct.unpack_from(">i", data, q)[0]
    value_pos = q + 4
    if value_len < _NULL or value_pos + max(value_len, 0) != stop:
        raise _LegacyError(
            f"{what} has a value length {value_len} that does not end at its size {size}"
        )
    return _Msg(p, stop - p, offset, magic, attributes, timestamp, key_pos, key_len,
                value_pos, value_len)  # fmt: skip


def _crc_ok(data: memoryview, m: _Msg, stored: int | None = None) -> int | None:
    """None when the message's CRC32 matches, else the computed CRC32."""
    if stored is None:
        stored = struct.unpack_from(">I", data, m.pos + CRC_AT)[0]
    computed = zlib.crc32(data[m.pos + MAGIC_AT : m.pos + m.size])
    return None if computed == stored else computed


# --- lz4 with Kafka's magic-0 header checksum (docs/kafka-format.md §2.5.3) ----------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_short(data: bytes) -> int:
    """xxHash32 (seed 0) of fewer than 16 bytes: the LZ4 frame's header checksum."""
    if len(data) >= 16:
        raise ValueError("xxh32_short hashes fewer than 16 bytes")
    h = (_P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        i += 4
    for b in data[i:]:
        h = (h + b * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _lz4_checksum_at(frame: bytes | bytearray) -> int:
    """Where the frame's header checksum byte is (after magic, FLG, BD and any content size)."""
    if len(frame) < 7:
        raise _LegacyError("lz4 frame is shorter than its header")
    return 6 + (8 if frame[4] & 0x08 else 0)


def _lz4_header_fixed(frame: bytes, magic: int) -> bytes:
    """A magic-0 frame with the checksum byte the LZ4 library checks: Kafka hashed the frame
    magic too there (KAFKA-3160) and does not check the byte on read."""
    if magic != 0:
        return frame
    hc = _lz4_checksum_at(frame)
    if len(frame) <= hc:
        raise _LegacyError("lz4 frame is shorter than its header")
    fixed = bytearray(frame)
    fixed[hc] = (xxh32_short(frame[4:hc]) >> 8) & 0xFF
    return bytes(fixed)


def _lz4_header_broken(frame: bytes) -> bytes:
    """The checksum byte Kafka writes for magic 0: over the frame magic, FLG and BD."""
    hc = _lz4_checksum_at(frame)
    broken = bytearray(frame)
    broken[hc] = (xxh32_short(frame[:hc]) >> 8) & 0xFF
    return bytes(broken)


# --- reading -------------------------------------------------------------------------------------


def _inner(data: memoryview, outer: _Msg, check_crc: bool) -> tuple[bytes, list[_Msg], int]:
    """A wrapper's decompressed value, its inner messages and the offset to add to theirs."""
    codec = outer.attributes & CODEC_MASK
    if codec == Compression.ZSTD or codec > Compression.ZSTD:
        raise _LegacyError(f"compression codec id {codec} in a magic {outer.magic} message"
                   " (Kafka refuses zstd and unknown codecs before magic 2)")  # fmt: skip
    if outer.value_len < 0:
        raise _LegacyError("compressed message has a null value (Kafka refuses it)")
    raw = bytes(data[outer.value_pos : outer.value_pos + outer.value_len])
    try:
        if codec == Compression.LZ4:
            raw = _lz4_header_fixed(raw, outer.magic)
        value = decompress(Compression(codec), raw)
    except CorruptRecordError as e:
        raise _LegacyError(e.reason) from None
    mv = memoryview(value)
    msgs: list[_Msg] = []
    limit = decompression_limit()
    most = batch_records_bound(limit, LEGACY_MESSAGE_BYTES)
    p = 0
    while p < len(value):
        if len(msgs) == most:
            raise _LegacyError(
                f"compressed message holds more than the {most} inner messages that "
                f"{LIMIT_SETTING} = {limit} allows one (they take about {LEGACY_MESSAGE_BYTES} "
                f"bytes each to read); raise {LIMIT_SETTING} for this topic if it is genuine"
            )
        what = f"inner message at byte {p} of the decompressed value"
        m = _parse(mv, p, len(value), what)
        if m.attributes & CODEC_MASK:
            raise _LegacyError(f"{what} is compressed (Kafka refuses nested compressed messages)")
        if check_crc and (computed := _crc_ok(mv, m)) is not None:
            stored = struct.unpack_from(">I", mv, m.pos + CRC_AT)[0]
            raise _LegacyError(
                f"{what}: CRC32 mismatch: stored {stored:#010x}, computed {computed:#010x}"
            )
        msgs.append(m)
        p += m.size
    if not msgs:
        raise _LegacyError("compressed message holds no inner messages (Kafka refuses it)")
    if outer.magic == 0 or outer.offset == 0:
        # v0: absolute inner offsets; v1 wrapper at offset 0: librdkafka's produce data,
        # which Kafka reads with relative offsets as they are (AbstractLegacyRecordBatch)
        add = 0
    else:
        last = msgs[-1].offset
        if outer.offset < last:
            raise _LegacyError(
                f"wrapper offset {outer.offset} is below its last inner offset {last}"
            )
        add = outer.offset - last
    prev = None
    for m in msgs:
        off = m.offset + add
        if (prev is not None and off <= prev) or off > outer.offset:
            raise _LegacyError(f"inner offset {off} is not increasing or lies past the wrapper's"
                       f" offset {outer.offset}")  # fmt: skip
        prev = off
    return value, msgs, add


def complete_rows(arr: U8, batches: I64, check_crc: bool) -> tuple[I64, int, str]:
    """Finish the walk's legacy rows: CRC32 (with ``check_crc``), and for each wrapper its first
    inner offset and inner count, which only its decompressed value says.

    Returns ``(batches, bad, reason)``: a copy with the wrappers' rows finished (the same array
    when there is none) and the first row that does not decode (``len(batches)`` when all do).
    """
    mv = arr.data
    out = batches
    for i in np.flatnonzero(legacy_rows(batches)).tolist():
        pos, size = int(batches[i, k.B_POS]), int(batches[i, k.B_SIZE])
        try:
            m = _parse(mv, pos, pos + size, "message")
            if check_crc and (computed := _crc_ok(mv, m, int(batches[i, k.B_CRC]))) is not None:
                stored = int(batches[i, k.B_CRC])
                raise _LegacyError(
                    f"CRC32 mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            if m.attributes & CODEC_MASK:
                _, msgs, add = _inner(mv, m, check_crc)
                if out is batches:
                    out = batches.copy()
                out[i, k.B_BASE_OFFSET] = msgs[0].offset + add
                out[i, k.B_COUNT] = len(msgs)
                if any(x.magic != m.magic for x in msgs):
                    out[i, k.B_ATTRIBUTES] |= MIXED_MAGIC
        except _LegacyError as e:
            return out, i, f"magic {int(batches[i, k.B_MAGIC])} message: {e}"
    return out, batches.shape[0], ""


def _records_of(
    mv: memoryview, row: I64, check_crc: bool = False
) -> tuple[memoryview, list[_Msg], int, int]:
    """``(data, messages, offset to add, LogAppendTime or -1)`` of one legacy row."""
    pos, size = int(row[k.B_POS]), int(row[k.B_SIZE])
    m = _parse(mv, pos, pos + size, "message")
    if check_crc and (computed := _crc_ok(mv, m)) is not None:
        raise _LegacyError(
            f"CRC32 mismatch: stored {int(row[k.B_CRC]):#010x}, computed {computed:#010x}"
        )
    lat = m.timestamp if m.magic == 1 and m.attributes & TIMESTAMP_TYPE else -1
    if not m.attributes & CODEC_MASK:
        return mv, [m], 0, lat
    value, msgs, add = _inner(mv, m, check_crc)
    return memoryview(value), msgs, add, lat


def index_rows(
    arr: U8,
    batches: I64,
    path: str | None,
    check_crc: bool = False,
    bound: tuple[int, str] | None = None,
) -> tuple[U8, I64]:
    """The record index of legacy rows ``batches`` (all magic 0 or 1, checked by a scan).

    Returns ``(payload, records)`` like ``index_batches``: each message's bytes (a wrapper's
    decompressed inner messages) laid end to end in a new buffer, one ``R_*`` row per record,
    ``R_BATCH`` the row in ``batches``, no headers. Raises CorruptRecordError naming the row's
    position; ``bound``: ``(bytes, reason)``, the most all rows may take decompressed (each
    wrapper is within ``max.decompressed.message.bytes`` already), as the v2 chunk bound.
    """
    mv = arr.data
    parts: list[bytes | memoryview] = []
    rows: list[tuple[int, ...]] = []
    base = 0
    for b in range(batches.shape[0]):
        row = batches[b]
        try:
            data, msgs, add, lat = _records_of(mv, row, check_crc)
        except _LegacyError as e:
            raise CorruptRecordError(
                f"magic {int(row[k.B_MAGIC])} message: {e}",
                path=path,
                position=int(row[k.B_POS]),
                last_good_offset=int(batches[b - 1, k.B_LAST_OFFSET]) if b else -1,
            ) from None
        lo, hi = msgs[0].pos, msgs[-1].pos + msgs[-1].size
        if bound is not None and base + hi - lo > bound[0]:
            raise CorruptRecordError(bound[1], path=path, position=int(row[k.B_POS]))
        parts.append(data[lo:hi])
        shift = base - lo
        for m in msgs:
            ts = -1 if m.magic == 0 else (lat if lat >= 0 else m.timestamp)
            rows.append((
                m.pos + shift, m.size, m.offset + add, ts,
                m.key_pos + shift if m.key_len >= 0 else 0, m.key_len,
                m.value_pos + shift if m.value_len >= 0 else 0, m.value_len,
                m.pos + m.size + shift, 0, b,
            ))  # fmt: skip
        base += hi - lo
    records = np.array(rows, dtype=np.int64).reshape(len(rows), k.RECORD_COLUMNS)
    payload = np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8)
    return payload, records


# --- writing -------------------------------------------------------------------------------------


def _message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
    value: bytes | None,
) -> bytes:  # fmt: skip
    """One message as ``LegacyRecord.write`` lays it out, CRC32 filled."""
    body = bytearray()
    body += bytes((magic, attributes))
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", _NULL if field is None else len(field))
        if field is not None:
            body += field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def build_legacy(
    magic: int,
    attributes: int,
    log_append_time: int,
    records: list[LegacyRecord],
) -> tuple[bytes, int]:
    """The retained records of a legacy batch, as Kafka's cleaner writes them again
    (``MemoryRecords.buildRetainedRecordsInto`` with ``MemoryRecordsBuilder``'s legacy paths).

    ``attributes``: the original outer message's (codec, and timestamp type for v1);
    ``log_append_time``: its timestamp when LogAppendTime, else -1. Each record is written in
    ``magic`` (KAFKA-4298: an inner message of another magic is written again in the wrapper's),
    with the batch's timestamp type (every record gets the LogAppendTime), then for a codec
    one wrapper: offset = last record's, v1 inner offsets relative to the first record's,
    timestamp = LogAppendTime or the largest record timestamp. Returns ``(bytes, the outer
    message's timestamp)``.
    """
    codec = attributes & CODEC_MASK
    ts_type = attributes & TIMESTAMP_TYPE if magic == 1 else 0
    lat = magic == 1 and ts_type != 0
    base = records[0].offset
    inner = bytearray()
    max_ts = -1
    for r in records:
        ts = -1 if magic == 0 else (log_append_time if lat else r.timestamp)
        max_ts = max(max_ts, ts)
        rel = r.offset - base if codec and magic == 1 else r.offset
        inner += _message(rel, magic, ts_type, ts, r.key, r.value)
    if not codec:
        return bytes(inner), max_ts
    value = compress(Compression(codec), bytes(inner))
    if codec == Compression.LZ4 and magic == 0:
        value = _lz4_header_broken(value)
    ts = -1 if magic == 0 else (log_append_time if lat else max_ts)
    return _message(records[-1].offset, magic, codec | ts_type, ts, None, value), ts


def records_of(arr: U8, row: I64) -> list[LegacyRecord]:
    """The records of one legacy row, decoded (for rebuilding and tests)."""
    try:
        data, msgs, add, lat = _records_of(arr.data, row)
    except _LegacyError as e:
        raise CorruptRecordError(str(e), position=int(row[k.B_POS])) from None
    out = []
    for m in msgs:
        ts = -1 if m.magic == 0 else (lat if lat >= 0 else m.timestamp)
        key = None if m.key_len < 0 else bytes(data[m.key_pos : m.key_pos + m.key_len])
        val = None if m.value_len < 0 else bytes(data[m.value_pos : m.value_pos + m.value_len])
        out.append(LegacyRecord(m.offset + add, m.magic, ts, key, val))
    return out
