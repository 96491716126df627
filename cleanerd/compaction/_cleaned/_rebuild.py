"""Rebuilding the batches that lost records (kafka-format.md §4.11: ``buildRetainedRecordsInto``).

A kept record's bytes do not change except for its timestamp delta (the base timestamp becomes
the first kept record's timestamp, or the delete horizon) and so its length: the offset delta is
relative to the unchanged base offset, and key, value and headers are copied as they are. One
numba kernel splices every kept record of a chunk's rebuilt batches into a new buffer, re-encoding
only those two varints. Compressed batches have their records compressed (codec at its default
level), one call each; then a second kernel lays every batch out end to end in one buffer with its
header (same base offset, last offset, producer fields, leader epoch, timestamp type) and the CRC32C
kernel fills the CRCs. The result is what ``builder.build_batch`` writes for the decoded records,
without decoding them, and without a per-batch Python loop holding the GIL for uncompressed logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.format import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    I64,
    LOG_OVERHEAD,
    LONG_MIN,
    MAGIC_V2,
    U8,
    Compression,
    LegacyRecord,
    build_legacy,
    compress,
    fill_crcs,
    kernels as k,
    layout as at,
)

Arr = npt.NDArray[Any]
NO_HORIZON = LONG_MIN
_MAX_GROWTH = 16  # a record can grow by up to 9 bytes of timestamp delta and 1 of length
_KEPT_ATTRIBUTES = ATTR_CODEC_MASK | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL
_CODECS = tuple(Compression)
_NO_BYTES = np.zeros(0, dtype=np.uint8)


@kernel(nogil=True)
def _put_zigzag(out: Arr, p: int, value: int) -> int:
    raw = np.uint64((np.int64(value) << 1) ^ (np.int64(value) >> 63))
    while raw >= np.uint64(0x80):
        out[p] = np.uint8((raw & np.uint64(0x7F)) | np.uint64(0x80))
        p += 1
        raw >>= np.uint64(7)
    out[p] = np.uint8(raw)
    return p + 1


@kernel(nogil=True)
def _skip_varint(buf: Arr, p: int) -> int:
    while buf[p] & 0x80:
        p += 1
    return p + 1


@kernel(nogil=True)
def splice_records(payload: Arr, records: Arr, rows: Arr, base_ts: Arr, out: Arr, ends: Arr) -> int:
    """Re-encode records ``rows`` (already validated by the index kernel) against ``base_ts``.

    Writes them one after the other into ``out``; ``ends[i]`` is the position after record i.
    """
    scratch = np.empty(16, dtype=np.uint8)
    q = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        p = records[r, k.R_POS]
        end = p + records[r, k.R_SIZE]
        p = _skip_varint(payload, p)  # length
        scratch[0] = payload[p]  # attributes
        p = _skip_varint(payload, p + 1)  # timestamp delta
        n = _put_zigzag(scratch, 1, records[r, k.R_TIMESTAMP] - base_ts[i])
        rest = end - p  # offset delta, key, value, headers: unchanged
        q = _put_zigzag(out, q, n + rest)
        out[q : q + n] = scratch[:n]
        q += n
        out[q : q + rest] = payload[p:end]
        q += rest
        ends[i] = q
    return q


# columns of the header matrix ``write_batches`` takes, one row per batch
(
    HEAD_BASE_OFFSET,
    HEAD_LENGTH,
    HEAD_LEADER_EPOCH,
    HEAD_ATTRIBUTES,
    HEAD_LAST_DELTA,
    HEAD_BASE_TIMESTAMP,
    HEAD_MAX_TIMESTAMP,
    HEAD_PRODUCER_ID,
    HEAD_PRODUCER_EPOCH,
    HEAD_BASE_SEQUENCE,
    HEAD_COUNT,
) = range(11)


@kernel(nogil=True)
def _put_be(dest: Arr, p: int, value: int | np.int64, nbytes: int) -> None:
    """``value``'s low ``nbytes`` bytes, big-endian (two's complement for negatives)."""
    v = np.int64(value)
    for i in range(nbytes - 1, -1, -1):
        dest[p + i] = np.uint8(v & 0xFF)
        v >>= 8


@kernel(nogil=True)
def write_batches(
    src0: Arr, src1: Arr, which: Arr, data_lo: Arr, data_hi: Arr, starts: Arr, head: Arr, dest: Arr
) -> None:
    """Header (CRC left 0) then data, for each batch i at ``dest[starts[i]:]``.

    Batch i's data is ``src0[data_lo[i]:data_hi[i]]`` (``which[i] == 0``) or the same of
    ``src1``; ``head`` columns are the ``HEAD_*`` fields.
    """
    for i in range(starts.shape[0]):
        p = starts[i]
        _put_be(dest, p + at.BASE_OFFSET_AT, head[i, HEAD_BASE_OFFSET], 8)
        _put_be(dest, p + at.LENGTH_AT, head[i, HEAD_LENGTH], 4)
        _put_be(dest, p + at.LEADER_EPOCH_AT, head[i, HEAD_LEADER_EPOCH], 4)
        dest[p + at.MAGIC_AT] = MAGIC_V2
        _put_be(dest, p + at.CRC_AT, 0, 4)
        _put_be(dest, p + at.ATTRIBUTES_AT, head[i, HEAD_ATTRIBUTES], 2)
        _put_be(dest, p + at.LAST_OFFSET_DELTA_AT, head[i, HEAD_LAST_DELTA], 4)
        _put_be(dest, p + at.BASE_TIMESTAMP_AT, head[i, HEAD_BASE_TIMESTAMP], 8)
        _put_be(dest, p + at.MAX_TIMESTAMP_AT, head[i, HEAD_MAX_TIMESTAMP], 8)
        _put_be(dest, p + at.PRODUCER_ID_AT, head[i, HEAD_PRODUCER_ID], 8)
        _put_be(dest, p + at.PRODUCER_EPOCH_AT, head[i, HEAD_PRODUCER_EPOCH], 2)
        _put_be(dest, p + at.BASE_SEQUENCE_AT, head[i, HEAD_BASE_SEQUENCE], 4)
        _put_be(dest, p + at.RECORDS_COUNT_AT, head[i, HEAD_COUNT], 4)
        lo, hi = data_lo[i], data_hi[i]
        q = p + HEADER_SIZE
        if which[i] == 0:
            dest[q : q + hi - lo] = src0[lo:hi]
        else:
            dest[q : q + hi - lo] = src1[lo:hi]


@dataclass(frozen=True)
class Rebuilt:
    """Rebuilt batches end to end in ``buf``: batch i is ``buf[starts[i]:ends[i]]``, and
    ``max_ts[i]`` is the max timestamp its header holds."""

    buf: U8
    starts: I64
    ends: I64
    max_ts: I64

    def batch(self, i: int) -> bytes:
        return self.buf[int(self.starts[i]) : int(self.ends[i])].tobytes()


def rebuild_batches(
    payload: U8,
    records: I64,
    kept: npt.NDArray[np.intp],
    kept_batch: npt.NDArray[np.intp],
    batches: I64,
    rows: npt.NDArray[np.intp],
    stamp_horizon: I64,
) -> Rebuilt:
    """The rebuilt batch for each batch row in ``rows`` (ascending), in that order.

    ``kept`` are the indexes of the kept records (ascending), ``kept_batch`` their batch rows;
    every row in ``rows`` has at least one; ``stamp_horizon[row]`` is its new or carried delete
    horizon, or NO_HORIZON. Only compression runs per batch in Python; headers, copies and
    CRCs are numba kernels that let go of the GIL.
    """
    lo = np.searchsorted(kept_batch, rows, side="left")
    hi = np.searchsorted(kept_batch, rows, side="right")
    counts = hi - lo
    # both ascending: the kept records of ``rows`` (np.isin would import numpy.ma on first use)
    at = np.minimum(np.searchsorted(rows, kept_batch), max(rows.size - 1, 0))
    sel = kept[rows[at] == kept_batch] if rows.size else kept[:0]
    ts = records[sel, k.R_TIMESTAMP]
    first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
    horizon = stamp_horizon[rows]
    base = np.where(horizon != NO_HORIZON, horizon, ts[first])
    spliced = np.empty(int(records[sel, k.R_SIZE].sum()) + _MAX_GROWTH * sel.size, dtype=np.uint8)
    rec_ends = np.empty(sel.size, dtype=np.int64)
    splice_records(payload, records, sel, np.repeat(base, counts), spliced, rec_ends)
    rec_starts = np.concatenate(([0], rec_ends[:-1]))
    sub = batches[rows]
    attrs = sub[:, k.B_ATTRIBUTES]
    data_lo = rec_starts[first]
    data_hi = rec_ends[first + counts - 1]
    which = np.zeros(rows.size, dtype=np.int8)
    zipped_buf = _compress_rows(spliced, attrs & ATTR_CODEC_MASK, which, data_lo, data_hi)
    sizes = HEADER_SIZE + (data_hi - data_lo)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    max_ts = np.where(
        attrs & ATTR_TIMESTAMP_TYPE, sub[:, k.B_MAX_TIMESTAMP], np.maximum.reduceat(ts, first)
    )
    head = np.empty((rows.size, 11), dtype=np.int64)
    head[:, HEAD_BASE_OFFSET] = sub[:, k.B_BASE_OFFSET]
    head[:, HEAD_LENGTH] = sizes - LOG_OVERHEAD
    head[:, HEAD_LEADER_EPOCH] = sub[:, k.B_LEADER_EPOCH]
    # what attributes_for gives: codec, timestamp type, transactional, control, horizon
    head[:, HEAD_ATTRIBUTES] = (attrs & _KEPT_ATTRIBUTES) | np.where(
        horizon != NO_HORIZON, ATTR_DELETE_HORIZON, 0
    )
    head[:, HEAD_LAST_DELTA] = sub[:, k.B_LAST_OFFSET] - sub[:, k.B_BASE_OFFSET]
    head[:, HEAD_BASE_TIMESTAMP] = base
    head[:, HEAD_MAX_TIMESTAMP] = max_ts
    head[:, HEAD_PRODUCER_ID] = sub[:, k.B_PRODUCER_ID]
    head[:, HEAD_PRODUCER_EPOCH] = sub[:, k.B_PRODUCER_EPOCH]
    head[:, HEAD_BASE_SEQUENCE] = sub[:, k.B_BASE_SEQUENCE]
    head[:, HEAD_COUNT] = counts
    dest = np.empty(int(ends[-1]) if rows.size else 0, dtype=np.uint8)
    write_batches(spliced, zipped_buf, which, data_lo, data_hi, starts, head, dest)
    fill_crcs(dest, starts, ends)
    return Rebuilt(dest, starts, ends, max_ts)


def _compress_rows(spliced: U8, codecs: I64, which: Arr, data_lo: I64, data_hi: I64) -> U8:
    """Compress the records of the compressed batches, end to end in the buffer it returns;
    points those batches' ``which``/``data_lo``/``data_hi`` at it (in place)."""
    zipped = np.flatnonzero(codecs != 0)
    if zipped.size == 0:
        return _NO_BYTES
    mv = spliced.data
    parts = [
        compress(_CODECS[c], mv[a:b].tobytes())
        for c, a, b in zip(
            codecs[zipped].tolist(),
            data_lo[zipped].tolist(),
            data_hi[zipped].tolist(),
            strict=True,
        )
    ]
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    z_ends = np.cumsum(lengths)
    which[zipped] = 1
    data_lo[zipped] = z_ends - lengths
    data_hi[zipped] = z_ends
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def rebuild_legacy(
    payload: U8,
    records: I64,
    kept: npt.NDArray[np.intp],
    kept_batch: npt.NDArray[np.intp],
    batches: I64,
    rows: npt.NDArray[np.intp],
) -> tuple[Rebuilt, I64]:
    """The legacy messages ``rows`` (magic 0 or 1) with their kept records, as Kafka's cleaner
    writes them (``buildRetainedRecordsInto``: same magic, codec and timestamp type; the new
    wrapper's offset is its last kept record's, its timestamp the LogAppendTime or the largest
    kept timestamp; docs/kafka-format.md §2.8). Plain Python: legacy data is rare.

    Returns the rebuilt messages and each one's last offset."""
    mv = payload.data
    parts: list[bytes] = []
    max_ts = np.empty(rows.size, dtype=np.int64)
    lasts = np.empty(rows.size, dtype=np.int64)
    for i, row in enumerate(rows.tolist()):
        b = batches[row]
        recs = []
        for r in records[kept[kept_batch == row]]:
            kl, vl = int(r[k.R_KEY_LEN]), int(r[k.R_VALUE_LEN])
            kp, vp = int(r[k.R_KEY_POS]), int(r[k.R_VALUE_POS])
            recs.append(
                LegacyRecord(
                    offset=int(r[k.R_OFFSET]),
                    magic=int(b[k.B_MAGIC]),
                    timestamp=int(r[k.R_TIMESTAMP]),
                    key=None if kl < 0 else bytes(mv[kp : kp + kl]),
                    value=None if vl < 0 else bytes(mv[vp : vp + vl]),
                )
            )
        attrs = int(b[k.B_ATTRIBUTES])
        lat = int(b[k.B_MAX_TIMESTAMP]) if attrs & ATTR_TIMESTAMP_TYPE else -1
        data, max_ts[i] = build_legacy(int(b[k.B_MAGIC]), attrs, lat, recs)
        lasts[i] = recs[-1].offset
        parts.append(data)
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    ends = np.cumsum(sizes)
    buf = np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8)
    return Rebuilt(buf, ends - sizes, ends, max_ts), lasts
