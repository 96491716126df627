"""The record index over many batches, on one thread or several (see ``reader``'s docstring).

``index_batches`` is the hot-path record index, and ``index_and_hash`` the same with each
record's 128-bit key hash computed as the record is parsed. Public names are reached through
``reader``.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from cleanerd.format import kernels as k
from cleanerd.format.crc import crc_reason, first_bad_crc_each
from cleanerd.format.errors import CorruptRecordError
from cleanerd.format.header import ATTR_TIMESTAMP_TYPE
from cleanerd.format.payloads import lay_out
from cleanerd.format.scan import I64, U8, U64, Buffer, as_uint8
from cleanerd.format.threads import run_tasks, split_weights

# With several threads, the index (and decompression) is cut into this many chunks per thread,
# so that threads which finish early (or the one that did the CRC check) take the rest; a chunk
# has at least _MIN_RECORDS_PER_CHUNK records, as a smaller one is not worth a thread handoff.
_CHUNKS_PER_THREAD = 8
_MIN_RECORDS_PER_CHUNK = 10_000

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
    threads: int = 1,
) -> tuple[U8, I64]:
    """Index every record of ``batches`` (rows of a scan of ``buf``).

    Returns ``(payload_buffer, records)``: when no batch is compressed the payload buffer is
    ``buf`` itself; otherwise payloads (decompressed where needed) are laid end to end in a new
    buffer. Record positions (``R_*_POS``) are positions in the returned buffer and ``R_BATCH``
    is the batch's row in ``batches``. Raises CorruptRecordError for the first bad batch in
    batch order, naming its position; its last good offset is ``prev_last_offset`` when the
    first batch is the bad one. ``check_crc`` also checks every batch's CRC32C (for a scan made
    with ``check_crc=False``; a mismatch is reported as ``scan_batches`` words it).
    ``threads`` > 1 spreads the work over several threads, with the same results (see the
    module docstring).
    """
    payload, records, _ = _index(
        buf, batches, path, prev_last_offset, False, check_crc=check_crc, threads=threads
    )
    return payload, records


def index_and_hash(
    buf: Buffer,
    batches: I64,
    *,
    path: str | None = None,
    prev_last_offset: int = -1,
    check_crc: bool = False,
    threads: int = 1,
) -> tuple[U8, I64, U64]:
    """``index_batches`` plus each record's 128-bit key hash: ``(payload, records, hashes)``.

    ``hashes`` is ``uint64[len(records), 2]``, equal to ``kernels.hash_keys(payload, records)``
    (zeros for null keys) but computed by the index kernel as it parses each record, which saves
    a second pass over the record matrix and the keys.
    """
    return _index(buf, batches, path, prev_last_offset, True, check_crc=check_crc, threads=threads)


def _index(
    buf: Buffer,
    batches: I64,
    path: str | None,
    prev_last_offset: int,
    with_hashes: bool,
    *,
    check_crc: bool,
    threads: int,
) -> tuple[U8, I64, U64]:
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    arr = as_uint8(buf)
    n = batches.shape[0]
    chunks_per_step = 1 if threads == 1 else threads * _CHUNKS_PER_THREAD

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
    # (its payload does not decompress, or its record count cannot be right) with ``early``.
    laid = lay_out(arr, batches)
    payload, starts, ends, usable = laid.buffer, laid.starts, laid.ends, laid.usable
    early = None if laid.error is None else error(laid.error.reason, usable)
    bad_count = k.bad_counts(starts[:usable], ends[:usable], counts[:usable])
    if bad_count >= 0:
        usable = bad_count
        early = error(_RECORD_REASONS[k.REC_COUNT_MISMATCH], bad_count)
    row0 = np.zeros(usable + 1, dtype=np.int64)
    np.cumsum(counts[:usable], out=row0[1:])
    records = np.empty((int(row0[-1]), k.RECORD_COLUMNS), dtype=np.int64)
    hashes = np.empty((records.shape[0], 2), dtype=np.uint64) if with_hashes else k.NO_HASHES
    log_append = np.where(
        batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE, batches[:, k.B_MAX_TIMESTAMP], -1
    )
    # Every chunk starts from the offset the single-threaded walk starts from; whether offsets
    # keep increasing across chunk boundaries is checked below on the finished matrix.
    first_prev = int(batches[0, k.B_BASE_OFFSET]) - 1 if n else 0
    args = (
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
    )
    chunks = split_weights(counts[:usable], chunks_per_step, _MIN_RECORDS_PER_CHUNK)
    results = [(0, k.REC_OK, -1, -1)] * len(chunks)
    # The CRC check and the index run as a list of tasks, taken in order by the threads: the
    # CRC check (one task: two CRC loops fight over the GIL), then chunks of the index (the
    # kernel does not hold the GIL). Tasks record what went wrong; the first error in batch
    # order is picked at the end. Too little work for two chunks stays on this thread.
    parallel = len(chunks) > 1
    crc_bad = [-1]

    def crc_task() -> None:
        crc_bad[0] = first_bad_crc_each(arr, batches, 0, n, release_gil=parallel)

    def index_task(c: int) -> None:
        first, stop = chunks[c]
        rows, err, bad, pos = k.index_records_into(*args, first, stop, int(row0[first]), first_prev)
        results[c] = int(rows), int(err), int(bad), int(pos)

    tasks = [crc_task] if check_crc and n else []
    tasks.extend(partial(index_task, c) for c in range(len(chunks)))
    run_tasks(tasks, threads if parallel else 1)

    # the first error in batch order; a CRC mismatch goes first in its batch, as in scan_batches
    if 0 <= crc_bad[0] <= usable:
        usable = crc_bad[0]
        early = error(crc_reason(arr, batches, usable), usable)
    for c, (first, stop) in enumerate(chunks):
        if first >= usable:
            break
        _rows, err, bad, _pos = results[c]
        r0 = int(row0[first])
        crossed = 0 < r0 < row0[stop] and records[r0, k.R_OFFSET] <= records[r0 - 1, k.R_OFFSET]
        if err == k.REC_OK and not crossed:
            continue
        if first:
            # Only the first record of a chunk depends on the batches before it: index the chunk
            # again from the exact previous offset to get the error the single thread reports.
            prev = int(records[r0 - 1, k.R_OFFSET]) if r0 else first_prev
            _rows, err, bad, _pos = (
                int(v) for v in k.index_records_into(*args, first, stop, r0, prev)
            )
            if err == k.REC_OK:
                raise AssertionError(f"batches {first}:{stop} index cleanly on their own")
        if bad < usable:
            reason = _RECORD_REASONS.get(err, f"record error {err}")
            base = int(batches[bad, k.B_BASE_OFFSET])
            raise error(f"{reason} (batch base offset {base})", bad)
        break
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
