"""The batch walk: a buffer's v2 batch headers as one int64 matrix (``B_*`` columns).

Split from the record index because the walk is all a scan of headers needs (recovery, dump,
planning); it reads each header field at its ``layout`` offset, and releases the GIL.
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
WALK_TOO_SMALL = 3  # batch length smaller than a v2 header
WALK_BAD_MAGIC = 4


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
def walk_batches(buf: Arr, start: int, end: int, out: Arr) -> tuple[int, int, int]:
    """Walk v2 batches in ``buf[start:end]`` by their length fields.

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
        if end - p < HEADER_SIZE:
            code = WALK_PARTIAL_HEADER
            break
        length = _i32(buf, p + at.LENGTH_AT)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            code = WALK_TOO_SMALL
            break
        if buf[p + at.MAGIC_AT] != MAGIC_V2:
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
