"""The record index: every record of a run of batches as one int64 matrix (``R_*`` columns).

One numba kernel parses and validates each record where it lies (no copies), optionally hashing
its key on the way (``murmur.murmur3_128_at``), so Python never touches a record on a hot path.
Public names are reached through ``kernels``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.format._murmur import murmur3_128_at
from cleanerd.format._pointer import Ptr, data_ptr, prefetch_read

Arr = npt.NDArray[Any]

# --- record matrix columns (index_records) -------------------------------------------------------
R_POS = 0  # position of the record (its length varint) in the payload buffer
R_SIZE = 1  # bytes of the record including its length varint
R_OFFSET = 2
R_TIMESTAMP = 3
R_KEY_POS = 4
R_KEY_LEN = 5  # -1 for a null key
R_VALUE_POS = 6
R_VALUE_LEN = 7  # -1 for a null value (tombstone)
R_HEADERS_POS = 8  # position of the first header (after the header-count varint)
R_HEADER_COUNT = 9
R_BATCH = 10  # row of the batch this record belongs to
RECORD_COLUMNS = 11


# index_records error codes
REC_OK = 0
REC_VARINT_TOO_LONG = 1
REC_OUT_OF_BOUNDS = 2
REC_LENGTH_MISMATCH = 3  # fields do not end where the record's length says
REC_COUNT_MISMATCH = 4  # fewer records than the header's count, or bytes left over
REC_BAD_LENGTH = 5  # a negative length other than -1, or a null header key
REC_BAD_OFFSET = 6  # record offset outside its batch's range or not increasing

# ``hashes`` argument of index_records_into that turns key hashing off
NO_HASHES = np.empty((0, 2), dtype=np.uint64)

# smallest record: length, attributes, timestamp delta, offset delta, key length, value length
# and header count, one byte each
MIN_RECORD_SIZE = 7

# how far ahead of the record being parsed its payload is fetched into cache: a page. The CPU's
# own prefetcher follows a stream only within a 4 KiB page, so each new page of a segment read
# from memory stalls the parse (a segment outgrows the caches); one page ahead, every record
# costs about what it does in cache (docs/speed.md has the figures)
_PREFETCH_BYTES = 4096


@kernel()
def _varint(buf: Ptr, p: int, end: int, max_bytes: int) -> tuple[Any, int, int]:
    """Zig-zag varint at ``buf + p``: (value, next position, error code)."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for i in range(max_bytes):
        if p + i >= end:
            return 0, p, REC_OUT_OF_BOUNDS
        b = np.uint64(buf[p + i])
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            if max_bytes == 5 and raw > np.uint64(0xFFFFFFFF):
                return 0, p, REC_VARINT_TOO_LONG  # more than 32 bits: overflow
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return value, p + i + 1, REC_OK
        shift += np.uint64(7)
    return 0, p, REC_VARINT_TOO_LONG


@kernel()
def index_one(
    buf: Ptr,
    start: int,
    end: int,
    base_offset: int,
    last_offset: int,
    base_timestamp: int,
    count: int,
    log_append_time: int,
    batch_row: int,
    out: Ptr,
    hashes: Ptr,
    with_hashes: bool,
    row0: int,
    prev_offset: int,
) -> tuple[int, int, int]:
    # out and hashes point to C-contiguous int64[:, RECORD_COLUMNS] and uint64[:, 2] matrices
    p = start
    for r in range(count):
        if p >= end:
            return REC_COUNT_MISMATCH, p, prev_offset
        rec_start = p
        prefetch_read(buf, p + _PREFETCH_BYTES)  # a hint: past the end is harmless
        length, p, err = _varint(buf, p, end, 5)
        if err != REC_OK:
            return err, rec_start, prev_offset
        if length < 0:
            return REC_BAD_LENGTH, rec_start, prev_offset
        body_end = p + length
        if body_end > end:
            return REC_OUT_OF_BOUNDS, rec_start, prev_offset
        if p >= body_end:
            return REC_LENGTH_MISMATCH, rec_start, prev_offset
        p += 1  # attributes: no bits defined, Kafka ignores them
        ts_delta, p, err = _varint(buf, p, body_end, 10)
        if err != REC_OK:
            return err, rec_start, prev_offset
        off_delta, p, err = _varint(buf, p, body_end, 5)
        if err != REC_OK:
            return err, rec_start, prev_offset
        key_len, p, err = _varint(buf, p, body_end, 5)
        if err != REC_OK:
            return err, rec_start, prev_offset
        if key_len < -1:
            return REC_BAD_LENGTH, rec_start, prev_offset
        key_pos = p
        if key_len > 0:
            p += key_len
        if p > body_end:
            return REC_OUT_OF_BOUNDS, rec_start, prev_offset
        value_len, p, err = _varint(buf, p, body_end, 5)
        if err != REC_OK:
            return err, rec_start, prev_offset
        if value_len < -1:
            return REC_BAD_LENGTH, rec_start, prev_offset
        value_pos = p
        if value_len > 0:
            p += value_len
        if p > body_end:
            return REC_OUT_OF_BOUNDS, rec_start, prev_offset
        n_headers, p, err = _varint(buf, p, body_end, 5)
        if err != REC_OK:
            return err, rec_start, prev_offset
        if n_headers < 0:
            return REC_BAD_LENGTH, rec_start, prev_offset
        headers_pos = p
        for _h in range(n_headers):
            hk, p, err = _varint(buf, p, body_end, 5)
            if err != REC_OK:
                return err, rec_start, prev_offset
            if hk < 0:
                return REC_BAD_LENGTH, rec_start, prev_offset
            p += hk
            if p > body_end:
                return REC_OUT_OF_BOUNDS, rec_start, prev_offset
            hv, p, err = _varint(buf, p, body_end, 5)
            if err != REC_OK:
                return err, rec_start, prev_offset
            if hv < -1:
                return REC_BAD_LENGTH, rec_start, prev_offset
            if hv > 0:
                p += hv
            if p > body_end:
                return REC_OUT_OF_BOUNDS, rec_start, prev_offset
        if p != body_end:
            return REC_LENGTH_MISMATCH, rec_start, prev_offset
        offset = base_offset + off_delta
        if offset < base_offset or offset > last_offset or offset <= prev_offset:
            return REC_BAD_OFFSET, rec_start, prev_offset
        prev_offset = offset
        row = row0 + r
        o = row * RECORD_COLUMNS
        out[o + R_POS] = rec_start
        out[o + R_SIZE] = body_end - rec_start
        out[o + R_OFFSET] = offset
        out[o + R_TIMESTAMP] = (
            log_append_time if log_append_time != -1 else base_timestamp + ts_delta
        )
        out[o + R_KEY_POS] = key_pos
        out[o + R_KEY_LEN] = key_len
        out[o + R_VALUE_POS] = value_pos
        out[o + R_VALUE_LEN] = value_len
        out[o + R_HEADERS_POS] = headers_pos
        out[o + R_HEADER_COUNT] = n_headers
        out[o + R_BATCH] = batch_row
        if with_hashes:
            # hashed here, while the key's bytes are in cache: a separate pass (hash_keys) pays
            # for re-reading the record matrix and every key from memory
            if key_len >= 0:
                h1, h2 = murmur3_128_at(buf, key_pos, key_len)
            else:
                h1 = np.uint64(0)
                h2 = np.uint64(0)
            hashes[2 * row] = h1
            hashes[2 * row + 1] = h2
    if p != end:
        return REC_COUNT_MISMATCH, p, prev_offset
    return REC_OK, p, prev_offset


@kernel(nogil=True)
def index_records_into(
    buf: Arr,
    starts: Arr,
    ends: Arr,
    base_offsets: Arr,
    last_offsets: Arr,
    base_timestamps: Arr,
    counts: Arr,
    log_append_times: Arr,
    out: Arr,
    hashes: Arr,
    first: int,
    stop: int,
    row0: int,
    prev_offset: int,
) -> tuple[int, int, int, int]:
    """Index the records of payloads ``buf[starts[i]:ends[i]]``, ``first <= i < stop``.

    Rows are written from ``row0`` on: the C-contiguous ``int64[:, RECORD_COLUMNS]`` matrix
    ``out`` needs ``row0 + sum(counts[first:stop])`` rows (ValueError otherwise; counts already
    checked by the caller, see ``bad_counts``). ``hashes`` is a C-contiguous ``uint64[:, 2]`` with
    as many rows, which receives the key hash of each row (as ``hash_keys`` computes it), or
    ``NO_HASHES`` (zero rows) to skip hashing. ``log_append_times[i]`` is the batch max
    timestamp for LogAppendTime batches (every record takes it, as Kafka's reader does) and -1
    otherwise. Record offsets must lie in ``[base_offsets[i], last_offsets[i]]`` and be above the
    previous record's (``prev_offset`` before the first one). Disjoint ranges of batches can be
    indexed by several threads at once into one matrix. Returns ``(rows, error, batch, pos)``:
    the row after the last one filled, and on failure the ``REC_*`` code, the failing batch row
    and the byte position.
    """
    # the helpers below read and write through raw pointers: check every bound once up front
    shortest = min(
        starts.shape[0],
        ends.shape[0],
        base_offsets.shape[0],
        last_offsets.shape[0],
        base_timestamps.shape[0],
        counts.shape[0],
        log_append_times.shape[0],
    )
    if not 0 <= first <= stop <= shortest:
        raise ValueError("index_records_into: batch range outside the batch columns")
    rows = row0
    for i in range(first, stop):
        if not 0 <= starts[i] <= ends[i] <= buf.shape[0] or counts[i] < 0:
            raise ValueError("index_records_into: a payload range lies outside the buffer")
        rows += counts[i]
    with_hashes = hashes.shape[0] != 0
    if out.shape[0] < rows or (with_hashes and hashes.shape[0] < rows) or row0 < 0:
        raise ValueError("index_records_into: out or hashes has fewer rows than the records")
    if out.shape[1] != RECORD_COLUMNS or hashes.shape[1] != 2:
        raise ValueError("index_records_into: out or hashes has the wrong number of columns")
    # pointers, not arrays, go to the per-batch helper: see data_ptr
    buf_p = data_ptr(buf)
    out_p = data_ptr(out)
    hashes_p = data_ptr(hashes)
    row = row0
    prev = prev_offset
    for i in range(first, stop):
        err, pos, prev = index_one(
            buf_p,
            starts[i],
            ends[i],
            base_offsets[i],
            last_offsets[i],
            base_timestamps[i],
            counts[i],
            log_append_times[i],
            i,
            out_p,
            hashes_p,
            with_hashes,
            row,
            prev,
        )
        if err != REC_OK:
            return row, err, i, pos
        row += counts[i]
    return row, REC_OK, -1, -1


def bad_counts(starts: Arr, ends: Arr, counts: Arr) -> int:
    """The first batch whose record count cannot be right for its payload size, or -1.

    A record takes at least ``MIN_RECORD_SIZE`` bytes, so a larger count is corrupt, and must not
    size an allocation (a damaged count of 2^31 would ask for ~190 GB).
    """
    bad = (counts < 0) | (counts * MIN_RECORD_SIZE > ends - starts)
    return int(np.argmax(bad)) if bad.any() else -1


def index_records(
    buf: Arr,
    starts: Arr,
    ends: Arr,
    base_offsets: Arr,
    last_offsets: Arr,
    base_timestamps: Arr,
    counts: Arr,
    log_append_times: Arr,
) -> tuple[Arr, int, int, int]:
    """Index the records of many payloads: ``(records, error, batch, pos)``.

    One row per record (columns ``R_*``); on failure the ``REC_*`` code, the failing batch row and
    the byte position in ``buf``. Single-threaded and without key hashes; ``reader.index_batches``
    and ``reader.index_and_hash`` are the full versions. The matrix is allocated here, by numpy,
    not in the kernel: numpy asks for transparent huge pages (madvise) and numba's ``np.empty``
    does not, and on 4 KiB pages the page faults of an 88-byte-per-record matrix cost as much as
    the indexing.
    """
    bad = bad_counts(starts, ends, counts)
    if bad >= 0:
        return (
            np.empty((0, RECORD_COLUMNS), dtype=np.int64),
            REC_COUNT_MISMATCH,
            bad,
            int(starts[bad]),
        )
    out = np.empty((int(counts.sum()), RECORD_COLUMNS), dtype=np.int64)
    n = counts.shape[0]
    rows, err, batch, pos = index_records_into(
        buf,
        starts,
        ends,
        base_offsets,
        last_offsets,
        base_timestamps,
        counts,
        log_append_times,
        out,
        NO_HASHES,
        0,
        n,
        0,
        int(base_offsets[0]) - 1 if n else 0,
    )
    return out[:rows], int(err), int(batch), int(pos)


@kernel(nogil=True)
def hash_keys_into(buf: Arr, records: Arr, out: Arr) -> None:
    """128-bit hash of every record's key into ``out`` (``uint64[n, 2]``; zeros for null keys)."""
    ptr = data_ptr(buf)
    for i in range(records.shape[0]):
        klen = records[i, R_KEY_LEN]
        if klen >= 0:
            h1, h2 = murmur3_128_at(ptr, records[i, R_KEY_POS], klen)
        else:
            h1 = np.uint64(0)
            h2 = np.uint64(0)
        out[i, 0] = h1
        out[i, 1] = h2


def hash_keys(buf: Arr, records: Arr) -> Arr:
    """128-bit hash of every record's key as a ``uint64[n, 2]`` (zeros for null keys)."""
    out = np.empty((records.shape[0], 2), dtype=np.uint64)
    hash_keys_into(buf, records, out)
    return out
