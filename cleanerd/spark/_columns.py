"""Arrow record batches straight from the record index: no Python object per record.

The record index (``kernels.R_*``) says where each key, value and header lies in the payload
buffer; two small numba kernels gather those byte ranges into Arrow's offset + data buffers,
and every other column is a numpy take from the index or the batch matrix. The Arrow schema
here is the data source's schema too (``datasource.spark_schema`` derives Spark's from it; a
test holds the round trip).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from cleanerd._kernel import kernel
from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    I64,
    U8,
    ControlType,
    is_legacy,
    kernels as k,
)

Arr = npt.NDArray[Any]

HEADER_TYPE = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
)
_NULLABLE = frozenset({"timestamp", "key", "value", "control_type"})
ARROW_SCHEMA = pa.schema(
    [
        pa.field(name, typ, nullable=name in _NULLABLE)
        for name, typ in [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestamp_type", pa.string()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(pa.field("element", HEADER_TYPE, nullable=False))),
            ("producer_id", pa.int64()),
            ("producer_epoch", pa.int16()),
            ("sequence", pa.int32()),
            ("transactional", pa.bool_()),
            ("is_control", pa.bool_()),
            ("control_type", pa.string()),
            ("leader_epoch", pa.int32()),
            ("segment", pa.int64()),
            ("record_bytes", pa.int32()),
        ]
    ]
)
"""The columns of a ``kafka-log`` read, in order."""

_CONTROL_NAMES = [None, *(t.name for t in ControlType)]
CONTROL_CODE = {t: i + 1 for i, t in enumerate(ControlType)}
"""Index into the control type names per ControlType (0: not a control record)."""


@kernel(nogil=True)
def _gather(buf: Arr, pos: Arr, lens: Arr, starts: Arr, out: Arr) -> None:
    """Copy ``buf[pos[i]:pos[i]+lens[i]]`` to ``out[starts[i]:]`` (negative length: none)."""
    for i in range(pos.shape[0]):
        n = lens[i]
        if n <= 0:
            continue
        src = pos[i]
        dst = starts[i]
        if n <= 32:
            for j in range(n):
                out[dst + j] = buf[src + j]
        else:
            out[dst : dst + n] = buf[src : src + n]


@kernel(nogil=True)
def _varint(buf: Arr, p: int) -> tuple[int, int]:
    """Zig-zag varint at ``p`` (already validated by the record index kernel)."""
    raw = 0
    shift = 0
    while True:
        b = int(buf[p])
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7


@kernel(nogil=True)
def _header_fields(buf: Arr, hpos: Arr, hcount: Arr, out: Arr) -> None:
    """Key position, key length, value position, value length of every header, in order."""
    row = 0
    for i in range(hpos.shape[0]):
        p = hpos[i]
        for _ in range(hcount[i]):
            klen, p = _varint(buf, p)
            out[row, 0] = p
            out[row, 1] = klen
            p += klen
            vlen, p = _varint(buf, p)
            out[row, 2] = p
            out[row, 3] = vlen
            if vlen > 0:
                p += vlen
            row += 1


def _validity(lengths: I64) -> tuple[Any, int]:
    """Arrow validity bitmap for "length -1 is null", or None when nothing is null."""
    nulls = lengths < 0
    count = int(nulls.sum())
    if count == 0:
        return None, 0
    return pa.py_buffer(np.packbits(~nulls, bitorder="little")), count


def binary_column(buf: U8, pos: I64, lens: I64, typ: Any = None) -> Any:
    """A binary (or string) Arrow array of byte ranges of ``buf``; length -1 gives null."""
    size = np.maximum(lens, 0)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(size, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError(f"{total} bytes do not fit one Arrow binary column (2 GiB)")
    data = np.empty(total, dtype=np.uint8)
    _gather(buf, np.ascontiguousarray(pos), np.ascontiguousarray(lens), offsets, data)
    validity, nulls = _validity(lens)
    return pa.Array.from_buffers(
        typ or pa.binary(),
        len(lens),
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count=nulls,
    )


def _empty_values(lens: I64) -> Any:
    """A key-only scan's ``value``: empty bytes, null for a tombstone (no value bytes read)."""
    offsets = np.zeros(len(lens) + 1, dtype=np.int32)
    validity, nulls = _validity(lens)
    return pa.Array.from_buffers(
        pa.binary(),
        len(lens),
        [validity, pa.py_buffer(offsets), pa.py_buffer(b"")],
        null_count=nulls,
    )


def headers_column(buf: U8, records: I64) -> Any:
    """``array<struct<key string, value binary>>`` per record."""
    counts = np.ascontiguousarray(records[:, k.R_HEADER_COUNT])
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    fields = np.empty((int(offsets[-1]), 4), dtype=np.int64)
    if len(fields):
        _header_fields(buf, np.ascontiguousarray(records[:, k.R_HEADERS_POS]), counts, fields)
    keys = binary_column(buf, fields[:, 0], fields[:, 1], pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: decode as dump does, replacing bad bytes
        raw = binary_column(buf, fields[:, 0], fields[:, 1]).to_pylist()
        keys = pa.array([b.decode("utf-8", errors="replace") for b in raw], pa.string())
    values = binary_column(buf, fields[:, 2], fields[:, 3])
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), structs, type=ARROW_SCHEMA.field("headers").type
    )


def _names(names: list[str | None]) -> tuple[U8, I64, I64]:
    """A small table of names as (bytes, position, length per code); None has length -1."""
    raw = [b"" if n is None else n.encode() for n in names]
    lens = np.array([-1 if n is None else len(r) for n, r in zip(names, raw, strict=True)])
    pos = np.zeros(len(raw), dtype=np.int64)
    np.cumsum([len(r) for r in raw[:-1]], out=pos[1:])
    return np.frombuffer(b"".join(raw), dtype=np.uint8), pos, lens.astype(np.int64)


_TIMESTAMP_TYPE_TABLE = _names(["CreateTime", "LogAppendTime", "NoTimestampType"])
_CONTROL_TYPE_TABLE = _names(_CONTROL_NAMES)


def names_column(table: tuple[U8, I64, I64], codes: Arr) -> Any:
    """A string column of one name per row, ``codes`` indexing ``table`` (see ``_names``):
    the bytes gathered by the kernel, no Arrow take and no validity bitmap without nulls."""
    buf, pos, lens = table
    if len(codes) and lens[0] < 0 and not codes.any():  # every row null (data records)
        return pa.nulls(len(codes), pa.string())
    return binary_column(buf, pos[codes], lens[codes], pa.string())


def _sequences(base_seq: I64, base_offsets: I64, offsets: I64) -> I64:
    """Each record's sequence: baseSequence + offset delta, wrapping past 2^31 - 1 to 0."""
    if not (base_seq >= 0).any():
        return np.full(len(base_seq), -1, dtype=np.int64)
    seq = (base_seq + (offsets - base_offsets)) % 2**31
    return np.where(base_seq < 0, -1, seq)


def _timestamps(ms: I64) -> Any:
    """Kafka milliseconds as Arrow microseconds; -1 (no timestamp) is null."""
    mask = ms == -1
    return pa.array(ms * 1000, pa.timestamp("us", tz="UTC"), mask=mask if mask.any() else None)


def _timestamp_types(attrs: I64, batches: I64, counts: I64) -> Any:
    """Each record's ``_TIMESTAMP_TYPE_TABLE`` code: magic 0 messages have none
    (docs/kafka-format.md §2.8)."""
    codes = ((attrs & ATTR_TIMESTAMP_TYPE) != 0).view(np.int8)
    if is_legacy(batches):
        codes = np.where(np.repeat(batches[:, k.B_MAGIC], counts) == 0, 2, codes).astype(np.int8)
    return codes


def record_batch(
    *,
    topic: str,
    partition: int,
    segment: int,
    payload: U8,
    records: I64,
    batches: I64,
    control_codes: Arr,
    values: bool,
) -> Any:
    """One Arrow batch for ``records`` (rows of an index of ``batches`` over ``payload``).

    ``control_codes`` holds each record's :data:`CONTROL_CODE` (0 for data records).
    """
    n = records.shape[0]
    # a batch's records are contiguous and in batch order: repeat, rather than gather, its fields
    counts = np.bincount(records[:, k.R_BATCH], minlength=len(batches))

    def per_batch(column: int) -> I64:
        out: I64 = np.repeat(batches[:, column], counts)
        return out

    attrs = per_batch(k.B_ATTRIBUTES)
    offsets = np.ascontiguousarray(records[:, k.R_OFFSET])
    value_lens = np.ascontiguousarray(records[:, k.R_VALUE_LEN])
    seq = _sequences(per_batch(k.B_BASE_SEQUENCE), per_batch(k.B_BASE_OFFSET), offsets)
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        _timestamps(np.ascontiguousarray(records[:, k.R_TIMESTAMP])),
        names_column(_TIMESTAMP_TYPE_TABLE, _timestamp_types(attrs, batches, counts)),
        binary_column(payload, records[:, k.R_KEY_POS], records[:, k.R_KEY_LEN]),
        binary_column(payload, records[:, k.R_VALUE_POS], value_lens)
        if values
        else _empty_values(value_lens),
        headers_column(payload, records),
        pa.array(per_batch(k.B_PRODUCER_ID), pa.int64()),
        pa.array(per_batch(k.B_PRODUCER_EPOCH).astype(np.int16), pa.int16()),
        pa.array(seq.astype(np.int32), pa.int32()),
        pa.array((attrs & ATTR_TRANSACTIONAL) != 0, pa.bool_()),
        pa.array((attrs & ATTR_CONTROL) != 0, pa.bool_()),
        names_column(_CONTROL_TYPE_TABLE, control_codes),
        pa.array(per_batch(k.B_LEADER_EPOCH).astype(np.int32), pa.int32()),
        pa.repeat(pa.scalar(segment, pa.int64()), n),
        pa.array(records[:, k.R_SIZE].astype(np.int32), pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
