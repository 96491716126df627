"""Rebuilding the batches that lost records (reference 3.12: ``buildRetainedRecordsInto``).

A kept record's bytes do not change except for its timestamp delta (the base timestamp becomes
the first kept record's timestamp, or the delete horizon) and so its length: the offset delta is
relative to the unchanged base offset, and key, value and headers are copied as they are. One
numba kernel splices every kept record of a chunk's rebuilt batches into a new buffer, re-encoding
only those two varints; Python then adds each batch's header (same base offset, last offset,
producer fields, leader epoch, codec at its default level, timestamp type; CRC32C recomputed) and
compresses where the batch was compressed. The result is what ``builder.build_batch`` writes for
the decoded records, without decoding them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from cleanerd.format import kernels as k
from cleanerd.format.builder import finish_crc
from cleanerd.format.codecs import Compression, compress
from cleanerd.format.header import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
)
from cleanerd.format.reader import I64, U8

Arr = npt.NDArray[Any]
NO_HORIZON = -(2**63)
_MAX_GROWTH = 16  # a record can grow by up to 9 bytes of timestamp delta and 1 of length
_KEPT_ATTRIBUTES = ATTR_CODEC_MASK | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL
_CODECS = tuple(Compression)


@njit(cache=True, nogil=True)
def _put_zigzag(out: Arr, p: int, value: int) -> int:
    raw = np.uint64((np.int64(value) << 1) ^ (np.int64(value) >> 63))
    while raw >= np.uint64(0x80):
        out[p] = np.uint8((raw & np.uint64(0x7F)) | np.uint64(0x80))
        p += 1
        raw >>= np.uint64(7)
    out[p] = np.uint8(raw)
    return p + 1


@njit(cache=True, nogil=True)
def _skip_varint(buf: Arr, p: int) -> int:
    while buf[p] & 0x80:
        p += 1
    return p + 1


@njit(cache=True, nogil=True)
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


def rebuild_batches(
    payload: U8,
    records: I64,
    kept: npt.NDArray[np.intp],
    kept_batch: npt.NDArray[np.intp],
    batches: I64,
    rows: npt.NDArray[np.intp],
    stamp_horizon: I64,
) -> list[bytes]:
    """The rebuilt batch for each batch row in ``rows`` (ascending).

    ``kept`` are the indexes of the kept records (ascending), ``kept_batch`` their batch rows;
    every row in ``rows`` has at least one; ``stamp_horizon[row]`` is its new or carried delete
    horizon, or NO_HORIZON.
    """
    lo = np.searchsorted(kept_batch, rows, side="left")
    hi = np.searchsorted(kept_batch, rows, side="right")
    counts = hi - lo
    sel = kept[np.isin(kept_batch, rows)]  # both ascending: the kept records of ``rows``
    ts = records[sel, k.R_TIMESTAMP]
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    horizon = stamp_horizon[rows]
    base = np.where(horizon != NO_HORIZON, horizon, ts[first])
    out = np.empty(int(records[sel, k.R_SIZE].sum()) + _MAX_GROWTH * sel.size, dtype=np.uint8)
    ends = np.empty(sel.size, dtype=np.int64)
    splice_records(payload, records, sel, np.repeat(base, counts), out, ends)
    max_kept_ts = np.maximum.reduceat(ts, first).tolist()
    starts = np.concatenate(([0], ends[:-1]))
    sub = batches[rows]
    # Python ints for the per-batch loop (numpy scalars and enum lookups cost a microsecond each)
    attrs_l = sub[:, k.B_ATTRIBUTES].tolist()
    base_l = sub[:, k.B_BASE_OFFSET].tolist()
    last_l = sub[:, k.B_LAST_OFFSET].tolist()
    epoch_l = sub[:, k.B_LEADER_EPOCH].tolist()
    max_ts_l = sub[:, k.B_MAX_TIMESTAMP].tolist()
    pid_l = sub[:, k.B_PRODUCER_ID].tolist()
    pepoch_l = sub[:, k.B_PRODUCER_EPOCH].tolist()
    seq_l = sub[:, k.B_BASE_SEQUENCE].tolist()
    horizon_l = horizon.tolist()
    base_ts_l = base.tolist()
    counts_l = counts.tolist()
    lo_l = starts[first].tolist()
    hi_l = ends[first + counts - 1].tolist()
    mv = out.data
    result = []
    for j in range(len(attrs_l)):
        attrs = attrs_l[j]
        codec = attrs & ATTR_CODEC_MASK
        h = horizon_l[j]
        raw = mv[lo_l[j] : hi_l[j]].tobytes()
        data = raw if codec == 0 else compress(_CODECS[codec], raw)
        header = BatchHeader(
            base_offset=base_l[j],
            batch_length=HEADER_SIZE - LOG_OVERHEAD + len(data),
            partition_leader_epoch=epoch_l[j],
            magic=MAGIC_V2,
            crc=0,
            # what attributes_for gives: codec, timestamp type, transactional, control, horizon
            attributes=(attrs & _KEPT_ATTRIBUTES) | (ATTR_DELETE_HORIZON if h != NO_HORIZON else 0),
            last_offset_delta=last_l[j] - base_l[j],
            base_timestamp=base_ts_l[j],
            max_timestamp=max_ts_l[j] if attrs & ATTR_TIMESTAMP_TYPE else max_kept_ts[j],
            producer_id=pid_l[j],
            producer_epoch=pepoch_l[j],
            base_sequence=seq_l[j],
            records_count=counts_l[j],
        )
        result.append(bytes(finish_crc(bytearray(header.pack() + data))))
    return result
