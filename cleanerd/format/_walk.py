"""The batch walk: a buffer's batch headers as one int64 matrix (``B_*`` columns).

Split from the record index because the walk is all a scan of headers needs (recovery, dump,
planning); it reads each header field at its ``layout`` offset, and releases the GIL. A legacy
message (magic 0 or 1, docs/kafka-format.md §2.8) has its offset, length and magic where a v2
batch has them; the walk gives it a row of what its outer message says (one record, no producer),
which ``_legacy.complete_rows`` finishes for a compressed wrapper.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.format import layout as at
from cleanerd.format.layout import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2

Arr = npt.NDArray[Any]

# --- batch matrix columns (walk_batches) ---------------------------------------------------------
B_POS = 0  # byte position of the batch in the buffer
B_SIZE = 1  # total size in bytes (12 + batchLength)
B_BASE_OFFSET = 2
B_LAST_OFFSET = 3
B_LEADER_EPOCH = 4
B_MAGIC = 5
B_CRC = 6  # stored CRC32C, unsigned
B_ATTRIBUTES = 7
B_BASE_TIMESTAMP = 8
B_MAX_TIMESTAMP = 9
B_PRODUCER_ID = 10
B_PRODUCER_EPOCH = 11
B_BASE_SEQUENCE = 12
B_COUNT = 13
BATCH_COLUMNS = 14

# walk_batches stop codes
WALK_OK = 0
WALK_PARTIAL_HEADER = 1  # fewer than 61 bytes left for a batch header
WALK_PAST_END = 2  # batch length field points beyond the buffer
WALK_TOO_SMALL = 3  # batch length smaller than a v2 header or a legacy message of its magic
WALK_BAD_MAGIC = 4

# a legacy message: offset, length, crc and magic are read before the rest (Kafka's
# ``Records.HEADER_SIZE_UP_TO_MAGIC``); its smallest length per magic (``LegacyRecord``)
HEADER_SIZE_UP_TO_MAGIC = LOG_OVERHEAD + 5
LEGACY_V0_MIN_LENGTH = 14  # crc, magic, attributes, key length, value length
LEGACY_V1_MIN_LENGTH = 22  # ... and a timestamp
LEGACY_TIMESTAMP_AT = 18
LEGACY_ATTRIBUTES_AT = 17
LEGACY_CRC_AT = 12  # CRC32 of [magic, end)


@kernel()
def _i16(buf: Arr, p: int) -> Any:
    v = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
    return v - 65536 if v >= 32768 else v


@kernel()
def _i32(buf: Arr, p: int) -> Any:
    v = (
        (np.int64(buf[p]) << 24)
        | (np.int64(buf[p + 1]) << 16)
        | (np.int64(buf[p + 2]) << 8)
        | np.int64(buf[p + 3])
    )
    return v - 4294967296 if v >= 2147483648 else v


@kernel()
def _u32(buf: Arr, p: int) -> Any:
    return (
        (np.int64(buf[p]) << 24)
        | (np.int64(buf[p + 1]) << 16)
        | (np.int64(buf[p + 2]) << 8)
        | np.int64(buf[p + 3])
    )


@kernel()
def _i64(buf: Arr, p: int) -> Any:
    hi = np.uint64(_u32(buf, p))
    lo = np.uint64(_u32(buf, p + 4))
    return np.int64((hi << np.uint64(32)) | lo)


@kernel(nogil=True)
def _legacy_row(buf: Arr, q: int, length: int, offset: int, magic: int, out: Arr, i: int) -> None:
    """A legacy message's row ``out[i]``: one record at its offset; a wrapper's count and first
    offset are only known once its value is decompressed (``_legacy.complete_rows``)."""
    ts = _i64(buf, q + LEGACY_TIMESTAMP_AT) if magic == 1 else -1
    attrs = np.int64(buf[q + LEGACY_ATTRIBUTES_AT])
    out[i, B_POS] = q
    out[i, B_SIZE] = LOG_OVERHEAD + length
    out[i, B_BASE_OFFSET] = offset
    out[i, B_LAST_OFFSET] = offset
    out[i, B_LEADER_EPOCH] = -1
    out[i, B_MAGIC] = magic
    out[i, B_CRC] = _u32(buf, q + LEGACY_CRC_AT)
    # codec (bits 0-2) and, for v1, the timestamp type (bit 3, where v2 has it too)
    out[i, B_ATTRIBUTES] = attrs & (0x0F if magic == 1 else 0x07)
    out[i, B_BASE_TIMESTAMP] = ts
    out[i, B_MAX_TIMESTAMP] = ts
    out[i, B_PRODUCER_ID] = -1
    out[i, B_PRODUCER_EPOCH] = -1
    out[i, B_BASE_SEQUENCE] = -1
    out[i, B_COUNT] = 1


@kernel(nogil=True)
def walk_batches(buf: Arr, start: int, end: int, out: Arr) -> tuple[int, int, int]:
    """Walk batches (v2) and legacy messages (v0, v1) in ``buf[start:end]`` by their lengths.

    Returns ``(batches, stop_position, stop_code)``: how many complete batches there are, and
    where and why the walk stopped (``WALK_OK`` when it reached ``end`` exactly); the first of
    them, as many as ``out`` has rows, are written to ``out`` (columns ``B_*``). CRCs are not
    checked here (see ``reader.check_crcs``).

    The caller allocates (``walk_batch_matrix``): a kernel that allocates an array loads numba's
    array implementation with it when it is loaded from the cache (``cleanerd._kernel``).
    """
    # pass 1: count, so the matrix can be allocated once at its exact size
    n = 0
    p = start
    code = WALK_OK
    while p < end:
        if end - p < HEADER_SIZE_UP_TO_MAGIC:
            code = WALK_PARTIAL_HEADER
            break
        length = _i32(buf, p + at.LENGTH_AT)
        magic = buf[p + at.MAGIC_AT]
        if magic == MAGIC_V2:
            if end - p < HEADER_SIZE:
                code = WALK_PARTIAL_HEADER
                break
            if length < HEADER_SIZE - LOG_OVERHEAD:
                code = WALK_TOO_SMALL
                break
        elif magic <= 1:
            if length < (LEGACY_V1_MIN_LENGTH if magic == 1 else LEGACY_V0_MIN_LENGTH):
                code = WALK_TOO_SMALL
                break
        else:
            code = WALK_BAD_MAGIC
            break
        if p + LOG_OVERHEAD + length > end:
            code = WALK_PAST_END
            break
        n += 1
        p += LOG_OVERHEAD + length
    q = start
    for i in range(min(n, out.shape[0])):
        length = _i32(buf, q + at.LENGTH_AT)
        base = _i64(buf, q + at.BASE_OFFSET_AT)
        magic = buf[q + at.MAGIC_AT]
        if magic < MAGIC_V2:
            _legacy_row(buf, q, length, base, magic, out, i)
            q += LOG_OVERHEAD + length
            continue
        out[i, B_POS] = q
        out[i, B_SIZE] = LOG_OVERHEAD + length
        out[i, B_BASE_OFFSET] = base
        out[i, B_LAST_OFFSET] = base + _i32(buf, q + at.LAST_OFFSET_DELTA_AT)
        out[i, B_LEADER_EPOCH] = _i32(buf, q + at.LEADER_EPOCH_AT)
        out[i, B_MAGIC] = buf[q + at.MAGIC_AT]
        out[i, B_CRC] = _u32(buf, q + at.CRC_AT)
        out[i, B_ATTRIBUTES] = _i16(buf, q + at.ATTRIBUTES_AT)
        out[i, B_BASE_TIMESTAMP] = _i64(buf, q + at.BASE_TIMESTAMP_AT)
        out[i, B_MAX_TIMESTAMP] = _i64(buf, q + at.MAX_TIMESTAMP_AT)
        out[i, B_PRODUCER_ID] = _i64(buf, q + at.PRODUCER_ID_AT)
        out[i, B_PRODUCER_EPOCH] = _i16(buf, q + at.PRODUCER_EPOCH_AT)
        out[i, B_BASE_SEQUENCE] = _i32(buf, q + at.BASE_SEQUENCE_AT)
        out[i, B_COUNT] = _i32(buf, q + at.RECORDS_COUNT_AT)
        q += LOG_OVERHEAD + length
    return n, p, code


_NO_ROWS = np.zeros((0, BATCH_COLUMNS), dtype=np.int64)


def walk_batch_matrix(buf: Arr, start: int, end: int) -> tuple[Arr, int, int]:
    """``walk_batches`` into a matrix of its own: ``(batches, stop_position, stop_code)``."""
    n, stop, code = walk_batches(buf, start, end, _NO_ROWS)
    out = np.empty((n, BATCH_COLUMNS), dtype=np.int64)
    walk_batches(buf, start, end, out)
    return out, stop, code
