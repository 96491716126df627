"""The record index over many batches: one nogil kernel call over the laid-out payloads.

``index_batches`` is the hot-path record index, and ``index_and_hash`` the same with each
record's 128-bit key hash computed as the record is parsed. Public names are reached through
``reader``.

One thread, one kernel call: a threaded index (chunks on a thread pool, the CRC loop beside
them) was removed in issue 10. No command used it; the daemon's workers already keep every
core busy, and pass 1 has its own fused kernel. Tried on ``cleanerd verify`` of a 1M-record
segment it saved a median 6% on the loaded 2-core dev VM, for the most intricate code in
format/.
"""

from __future__ import annotations

import numpy as np

from cleanerd.format import _legacy as legacy, kernels as k
from cleanerd.format._codecs import decompression_limit
from cleanerd.format._crc import crc_reason
from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._header import ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE
from cleanerd.format._payloads import (
    batch_records_bound,
    chunk_payloads_bound,
    lay_out,
    past_batch_records,
    past_chunk_bound,
    payload_ranges,
)
from cleanerd.format._scan import I64, U8, U64, Buffer, as_uint8, first_crc_mismatch

_RECORD_REASONS = {
    k.REC_VARINT_TOO_LONG: "record varint overflows (longer than Kafka allows)",
    k.REC_OUT_OF_BOUNDS: "record runs past the end of its batch",
    k.REC_LENGTH_MISMATCH: "record fields do not end where its length says",
    k.REC_COUNT_MISMATCH: "record count in the header does not match the records in the batch",
    k.REC_BAD_LENGTH: "record has an invalid negative length",
    k.REC_BAD_OFFSET: "record offset outside its batch's offset range or not increasing",
}


def index_batches(
    buf: Buffer,
    batches: I64,
    *,
    path: str | None = None,
    prev_last_offset: int = -1,
    check_crc: bool = False,
) -> tuple[U8, I64]:
    """Index every record of ``batches`` (rows of a scan of ``buf``).

    Returns ``(payload_buffer, records)``: when no batch is compressed the payload buffer is
    ``buf`` itself; otherwise payloads (decompressed where needed) are laid end to end in a new
    buffer. Record positions (``R_*_POS``) are positions in the returned buffer and ``R_BATCH``
    is the batch's row in ``batches``. Raises CorruptRecordError for the first bad batch in
    batch order, naming its position; its last good offset is ``prev_last_offset`` when the
    first batch is the bad one. ``check_crc`` also checks every batch's CRC32C (for a scan made
    with ``check_crc=False``; a mismatch is reported as ``scan_batches`` words it).
    """
    payload, records, _ = _index(buf, batches, path, prev_last_offset, False, check_crc=check_crc)
    return payload, records


def index_and_hash(
    buf: Buffer,
    batches: I64,
    *,
    path: str | None = None,
    prev_last_offset: int = -1,
    check_crc: bool = False,
) -> tuple[U8, I64, U64]:
    """``index_batches`` plus each record's 128-bit key hash: ``(payload, records, hashes)``.

    ``hashes`` is ``uint64[len(records), 2]``, equal to ``kernels.hash_keys(payload, records)``
    (zeros for null keys) but computed by the index kernel as it parses each record, which saves
    a second pass over the record matrix and the keys.
    """
    return _index(buf, batches, path, prev_last_offset, True, check_crc=check_crc)


def _index(
    buf: Buffer,
    batches: I64,
    path: str | None,
    prev_last_offset: int,
    with_hashes: bool,
    *,
    check_crc: bool,
) -> tuple[U8, I64, U64]:
    arr = as_uint8(buf)
    if legacy.is_legacy(batches):
        return _index_mixed(arr, batches, path, prev_last_offset, with_hashes, check_crc)
    n = batches.shape[0]

    def column(c: int) -> I64:
        return np.ascontiguousarray(batches[:, c])

    def error(reason: str, bad: int) -> CorruptRecordError:
        return CorruptRecordError(
            reason,
            path=path,
            position=int(batches[bad, k.B_POS]),
            last_good_offset=int(batches[bad - 1, k.B_LAST_OFFSET]) if bad else prev_last_offset,
        )

    counts = column(k.B_COUNT)
    # Batches [0, usable) can be indexed; the one at ``usable`` (if any) failed before indexing
    # (it claims more records than a batch may index, its payload does not decompress, or its
    # record count cannot be right for its payload) with ``early``. A claim past the bound is
    # found before anything is decompressed or sized.
    limit = decompression_limit()
    over = np.flatnonzero(counts > batch_records_bound(limit))
    laid = lay_out(arr, batches[: over[0]] if over.size else batches)
    payload, starts, ends, usable = laid.buffer, laid.starts, laid.ends, laid.usable
    early = None if laid.error is None else error(laid.error.reason, usable)
    if early is None and over.size:
        # a count no payload within the bound could hold is a corrupt count, not a large batch
        lo, hi = payload_ranges(batches[usable : usable + 1])
        compressed = batches[usable, k.B_ATTRIBUTES] & ATTR_CODEC_MASK
        held = limit if compressed else int(hi[0] - lo[0])
        count = int(counts[usable])
        corrupt = count * k.MIN_RECORD_SIZE > held
        why = _RECORD_REASONS[k.REC_COUNT_MISMATCH] if corrupt else past_batch_records(count, limit)
        early = error(why, usable)
    bad_count = k.bad_counts(starts[:usable], ends[:usable], counts[:usable])
    if bad_count >= 0:
        usable = bad_count
        early = error(_RECORD_REASONS[k.REC_COUNT_MISMATCH], bad_count)
    records = np.empty((int(counts[:usable].sum()), k.RECORD_COLUMNS), dtype=np.int64)
    hashes = np.empty((records.shape[0], 2), dtype=np.uint64) if with_hashes else k.NO_HASHES
    log_append = np.where(
        batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE, batches[:, k.B_MAX_TIMESTAMP], -1
    )
    _rows, err, bad, _pos = k.index_records_into(
        payload,
        np.ascontiguousarray(starts),
        np.ascontiguousarray(ends),
        column(k.B_BASE_OFFSET),
        column(k.B_LAST_OFFSET),
        column(k.B_BASE_TIMESTAMP),
        counts,
        np.ascontiguousarray(log_append),
        records,
        hashes,
        0,
        usable,
        0,
        int(batches[0, k.B_BASE_OFFSET]) - 1 if n else 0,
    )
    # the first error in batch order; a CRC mismatch goes first in its batch, as in scan_batches
    crc_bad = first_crc_mismatch(arr, batches, n) if check_crc else -1
    if 0 <= crc_bad <= usable:
        usable = crc_bad
        early = error(crc_reason(arr, batches, usable), usable)
    if err != k.REC_OK and bad < usable:
        reason = _RECORD_REASONS.get(int(err), f"record error {int(err)}")
        raise error(f"{reason} (batch base offset {int(batches[bad, k.B_BASE_OFFSET])})", int(bad))
    if early is not None:
        raise early
    if records.shape[0]:
        # The kernel reads -1 as "not LogAppendTime"; a LogAppendTime batch whose maxTimestamp
        # is -1 must still give every record -1, as Kafka's reader does.
        lat_unset = ((batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE) != 0) & (
            batches[:, k.B_MAX_TIMESTAMP] == -1
        )
        if lat_unset.any():
            records[lat_unset[records[:, k.R_BATCH]], k.R_TIMESTAMP] = -1
    return payload, records, hashes


_POSITION_COLUMNS = (k.R_POS, k.R_KEY_POS, k.R_VALUE_POS, k.R_HEADERS_POS)


def _index_mixed(
    arr: U8,
    batches: I64,
    path: str | None,
    prev_last_offset: int,
    with_hashes: bool,
    check_crc: bool,
) -> tuple[U8, I64, U64]:
    """The index of a run holding legacy messages (docs/kafka-format.md §2.8): v2 batches by
    the kernel, legacy ones by ``_legacy``, in one payload buffer and in batch order. The first
    error by position is raised."""
    is_old = legacy.legacy_rows(batches)
    v2, old = np.flatnonzero(~is_old), np.flatnonzero(is_old)
    errors: list[CorruptRecordError] = []
    p2, r2 = arr[:0], np.zeros((0, k.RECORD_COLUMNS), dtype=np.int64)
    if v2.size:
        try:
            p2, r2, _ = _index(arr, batches[v2], path, prev_last_offset, False, check_crc=check_crc)
        except CorruptRecordError as e:
            errors.append(e)
    limit = decompression_limit()
    cap = chunk_payloads_bound(limit)
    bound = (cap, past_chunk_bound(cap, limit))
    try:
        p1, r1 = legacy.index_rows(arr, batches[old], path, check_crc, bound)
    except CorruptRecordError as e:
        errors.append(e)
    if errors:
        raise min(errors, key=lambda e: -1 if e.position is None else e.position)
    if p2 is arr and r2.shape[0]:  # uncompressed v2 records lie in ``arr``: copy their range only
        lo = int(batches[v2[0], k.B_POS])
        hi = int(batches[v2[-1], k.B_POS] + batches[v2[-1], k.B_SIZE])
        p2 = arr[lo:hi]
        r2[:, _POSITION_COLUMNS] -= lo
    r2[:, k.R_BATCH] = v2[r2[:, k.R_BATCH]]
    r1[:, _POSITION_COLUMNS] += p2.shape[0]
    r1[:, k.R_BATCH] = old[r1[:, k.R_BATCH]]
    both = np.concatenate([r2, r1])
    records = both[np.argsort(both[:, k.R_BATCH], kind="stable")]
    payload = np.concatenate([p2, p1]) if p2.shape[0] else p1
    hashes = k.hash_keys(payload, records) if with_hashes else k.NO_HASHES
    return payload, records, hashes
