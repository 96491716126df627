"""Pass 1's kernels for the offset strategy: fill the record cache from runs of a chunk's batches
(on either thread), the map from the cache rows (in order, on one), then flag the cached records
that won their key. No per-record numpy.

* ``cache_records`` indexes every record of a run of a chunk's data batches with the format's
  own record parser (``kernels.index_one``, so validation is exactly the reader's), hashes each
  key as it is parsed and writes what the puts and pass 2 need of each record (hash, offset,
  ``FLAG_*`` flags) into rows of the chunk's working arrays (``RecordCache.scratch``; the record
  cache then keeps offsets and flags). The record matrix is never materialised: each batch is
  parsed into a small scratch matrix that stays in L1. Runs of batches are independent: two
  threads fill disjoint rows at once.
* ``cache_decoded_records`` does the same for batches still in the segment: it decodes each lz4
  or zstd payload (``format.decode_native``) into a one-payload room and indexes it while it is
  in cache, where ``cache_records`` reads back payloads ``format.lay_out`` wrote out whole. It
  stops at the first batch it does not take, and the caller gives the run to those two.
* ``put_cached`` puts the keyed records of the dirty range from those rows into the offset map
  (Kafka's full rule, as ``OffsetMap.put_batch``), in offset order, on one thread.
* ``mark_winners`` sets ``FLAG_WINNER`` on the cached records whose offset is their key's entry
  in the map (the offsets ``_touched.map_offsets`` lists), so pass 2 decides them without a map
  lookup (and without their key hash, which the record cache does not keep).

``put_cached`` reaches ``OffsetMap.table`` through a raw pointer (``kernels.data_ptr``): a
numba helper that takes an array pays an atomic incref/decref per call, which at one probe per
record costs more than the probe. It probes with ``_table``'s functions, the ones ``OffsetMap``
uses, so a map filled here answers ``OffsetMap.get`` and ``should_retain`` exactly as if
``put_batch`` had filled it, and the other way round.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.compaction._offset_map._record_cache import FLAG_KEYED, FLAG_TOMBSTONE, FLAG_WINNER
from cleanerd.compaction._offset_map._table import (
    home_slot,
    insert_key,
    is_full,
    normalize,
)
from cleanerd.format import (
    data_ptr as _data_ptr,
    decode_native as _decode_native,
    index_one as _index_one,
    kernels as k,
)

Arr = npt.NDArray[Any]
_PREFETCH_ROWS = 8  # how far ahead ``put_cached`` fetches slots: a miss's latency in puts


@kernel(nogil=True)
def cache_records(
    buf: Arr,
    starts: Arr,
    ends: Arr,
    base_offsets: Arr,
    last_offsets: Arr,
    base_timestamps: Arr,
    counts: Arr,
    log_append_times: Arr,
    scratch: Arr,
    scratch_hashes: Arr,
    cache_hashes: Arr,
    cache_offsets: Arr,
    cache_flags: Arr,
    cursor: int,
) -> tuple[int, int]:
    """Index and hash the records of payloads ``buf[starts[i]:ends[i]]`` into the cache rows
    from ``cursor`` on (offset strategy).

    The per-batch columns describe consecutive data batches of one chunk, in order (``counts``
    already checked by ``kernels.bad_counts``); ``scratch``/``scratch_hashes`` hold at least
    ``max(counts)`` rows. Every record's hash, offset and flags (``FLAG_*``) are written to the
    cache arrays from ``cursor`` on, which must have room for ``sum(counts)`` rows: two threads
    may fill disjoint row ranges of the same arrays at once (each with its own scratch).

    Returns ``(error, records)``: ``error`` is ``REC_OK`` or the first record error (the caller
    re-indexes with the reader to raise it), ``records`` the records indexed before it.
    """
    n = starts.shape[0]
    _check_run(
        buf.shape[0], starts, ends, base_offsets, last_offsets, base_timestamps, counts,
        log_append_times, scratch, scratch_hashes, cache_hashes, cache_offsets, cache_flags, cursor,
    )  # fmt: skip
    buf_p = _data_ptr(buf)
    prev = base_offsets[0] - 1 if n else 0
    rec = 0
    for i in range(n):
        err, prev = _cache_batch(
            buf_p, starts[i], ends[i], i, base_offsets, last_offsets, base_timestamps, counts,
            log_append_times, scratch, scratch_hashes, cache_hashes, cache_offsets, cache_flags,
            cursor + rec, prev,
        )  # fmt: skip
        if err != k.REC_OK:
            return err, rec
        rec += counts[i]
    return k.REC_OK, rec


@kernel()
def _check_run(
    size: int,
    starts: Arr,
    ends: Arr,
    base_offsets: Arr,
    last_offsets: Arr,
    base_timestamps: Arr,
    counts: Arr,
    log_append_times: Arr,
    scratch: Arr,
    scratch_hashes: Arr,
    cache_hashes: Arr,
    cache_offsets: Arr,
    cache_flags: Arr,
    cursor: int,
) -> None:
    """The arguments of ``cache_records`` and ``cache_decoded_records`` hold together: every
    payload range within ``size`` bytes, room in the scratch for the largest batch and in the
    cache for every record; a ValueError otherwise (a caller's bug, never the data's)."""
    n = starts.shape[0]
    if scratch.shape[1] != k.RECORD_COLUMNS or scratch_hashes.shape[1] != 2:
        raise ValueError("a run of batches to cache: wrong scratch shape")
    if (
        min(
            ends.shape[0],
            base_offsets.shape[0],
            last_offsets.shape[0],
            base_timestamps.shape[0],
            counts.shape[0],
            log_append_times.shape[0],
        )
        < n
    ):
        raise ValueError("a run of batches to cache: the batch columns differ in length")
    rows = 0
    top = 0
    for i in range(n):
        if not 0 <= starts[i] <= ends[i] <= size or counts[i] < 0:
            raise ValueError("a run of batches to cache: a payload range lies outside its buffer")
        rows += counts[i]
        top = max(top, counts[i])
    if scratch.shape[0] < top or scratch_hashes.shape[0] < top:
        raise ValueError("a run of batches to cache: scratch has fewer rows than a batch")
    if (
        cursor < 0
        or cache_hashes.shape[0] < cursor + rows
        or cache_offsets.shape[0] < cursor + rows
        or cache_flags.shape[0] < cursor + rows
        or cache_hashes.shape[1] != 2
    ):
        raise ValueError("a run of batches to cache: the cache arrays are too small")


@kernel(inline="always")
def _cache_batch(
    buf: Any,  # a pointer to the payload bytes (format.data_ptr)
    start: int,
    end: int,
    i: int,
    base_offsets: Arr,
    last_offsets: Arr,
    base_timestamps: Arr,
    counts: Arr,
    log_append_times: Arr,
    scratch: Arr,
    scratch_hashes: Arr,
    cache_hashes: Arr,
    cache_offsets: Arr,
    cache_flags: Arr,
    row: int,
    prev: int,
) -> tuple[int, int]:
    """Batch ``i`` of a run, its records at ``buf[start:end]``: indexed and hashed into the
    scratch (``format.index_one``), then written to the cache rows from ``row``. Returns the
    record error (``REC_OK``) and the offset its last record took. Inlined: a helper taking
    arrays would pay their reference counts once a batch."""
    err, _pos, prev = _index_one(
        buf, start, end, base_offsets[i], last_offsets[i], base_timestamps[i], counts[i],
        log_append_times[i], i, _data_ptr(scratch), _data_ptr(scratch_hashes), True, 0, prev,
    )  # fmt: skip
    if err != k.REC_OK:
        return err, prev
    for r in range(counts[i]):
        c = row + r
        cache_hashes[c, 0] = scratch_hashes[r, 0]
        cache_hashes[c, 1] = scratch_hashes[r, 1]
        cache_offsets[c] = scratch[r, k.R_OFFSET]
        flags = FLAG_KEYED if scratch[r, k.R_KEY_LEN] >= 0 else 0
        if scratch[r, k.R_VALUE_LEN] < 0:
            flags |= FLAG_TOMBSTONE
        cache_flags[c] = flags
    return k.REC_OK, prev


@kernel(nogil=True)
def cache_decoded_records(
    src: Arr,
    starts: Arr,
    ends: Arr,
    codecs: Arr,
    base_offsets: Arr,
    last_offsets: Arr,
    base_timestamps: Arr,
    counts: Arr,
    log_append_times: Arr,
    fns: Arr,
    zstd_ctx: int,
    buffers: Arr,
    out: Arr,
    limit: int,
    cap: int,
    scratch: Arr,
    scratch_hashes: Arr,
    cache_hashes: Arr,
    cache_offsets: Arr,
    cache_flags: Arr,
    cursor: int,
) -> tuple[int, int]:
    """``cache_records`` of batches whose payloads are still in the segment ``src``
    (``src[starts[i]:ends[i]]``, ``codecs[i]`` their codec): each lz4 or zstd payload is decoded
    into ``out`` (``format.decode_native``) and indexed from there while it is in cache, instead
    of the whole run being laid out first and read back. A payload decodes to at most ``limit``
    bytes, all of them to at most ``cap`` (``format.lay_out``'s bounds); uncompressed ones are
    indexed where they are.

    Returns ``(batches, laid)``: every batch done (``len(starts)``) and the bytes their payloads
    took, or the first batch it did not do (a codec or frame the kernel does not take, no room,
    a bound, a bad count or record), which the caller then decides with ``lay_out`` and
    ``cache_records`` from the start of the run, so its rows and errors are theirs.
    """
    n = starts.shape[0]
    _check_run(
        src.shape[0], starts, ends, base_offsets, last_offsets, base_timestamps, counts,
        log_append_times, scratch, scratch_hashes, cache_hashes, cache_offsets, cache_flags, cursor,
    )  # fmt: skip
    if codecs.shape[0] < n or fns.shape[0] < 4 or buffers.shape[0] < 6:
        raise ValueError("cache_decoded_records: codecs, fns or buffers too short")
    src_p = _data_ptr(src)
    out_p = _data_ptr(out)
    prev = base_offsets[0] - 1 if n else 0
    rec = 0
    laid = 0
    for i in range(n):
        lo = starts[i]
        hi = ends[i]
        c = codecs[i]
        p = src_p
        if c != 0:
            lo, p = 0, out_p
            hi = 0
            if counts[i] != 0:
                room = min(out.shape[0], limit, cap - laid)
                hi = _decode_native(
                    fns, zstd_ctx, buffers, c, src, starts[i], ends[i], out, 0, room
                )
                if hi < 0:
                    return i, laid
        laid += hi - lo
        if laid > cap or counts[i] * k.MIN_RECORD_SIZE > hi - lo:
            return i, laid
        err, prev = _cache_batch(
            p, lo, hi, i, base_offsets, last_offsets, base_timestamps, counts, log_append_times,
            scratch, scratch_hashes, cache_hashes, cache_offsets, cache_flags, cursor + rec, prev,
        )  # fmt: skip
        if err != k.REC_OK:
            return i, laid
        rec += counts[i]
    return n, laid


@kernel(nogil=True)
def put_cached(
    tab: Arr,
    start_offset: int,
    size: int,
    max_entries: int,
    cache_hashes: Arr,
    cache_offsets: Arr,
    cache_flags: Arr,
    lo: int,
    hi: int,
    touched: Arr,
) -> tuple[int, int, int]:
    """Put the keyed records of cache rows ``[lo, hi)`` at or after ``start_offset`` into
    ``tab`` (a width-3 ``OffsetMap`` table with ``size`` entries), in row order, until
    ``max_entries`` is reached: the map is then full (Kafka's rule, as ``put_batch``). Every
    slot written is marked in ``touched`` (``touched_bitmap``).

    Returns ``(full_row, size, latest)``: the row of the record that did not fit (-1 when the
    map did not fill), the new entry count and the offset of the last record put (-1 if none).
    """
    if tab.shape[1] != 3:
        raise ValueError("put_cached: wrong table shape")
    if (
        not 0 <= lo <= hi
        or cache_hashes.shape[0] < hi
        or cache_offsets.shape[0] < hi
        or cache_flags.shape[0] < hi
        or cache_hashes.shape[1] != 2
    ):
        raise ValueError("put_cached: rows outside the cache arrays")
    if touched.shape[0] * 64 < tab.shape[0]:
        raise ValueError("put_cached: the bitmap is smaller than the table")
    t = _data_ptr(tab)
    touched_p = _data_ptr(touched)
    slots = tab.shape[0]
    latest = -1
    # a tight put loop over rows indexed before overlaps its cache misses far better than one
    # interleaved with the parsing; and as the rows' hashes are known ahead, the home slot of
    # the row _PREFETCH_ROWS on is fetched while this one is put (with 100k keys the map's
    # slots in use are far more than the CPU's caches hold)
    for c in range(lo, hi):
        if c + _PREFETCH_ROWS < hi:
            k.prefetch_write(t, home_slot(cache_hashes[c + _PREFETCH_ROWS, 0], slots) * 3)
        offset = cache_offsets[c]
        if (cache_flags[c] & FLAG_KEYED) and offset >= start_offset:
            if is_full(size, max_entries):
                return c, size, latest  # Kafka: full before the key is even looked up
            n1, n2 = normalize(cache_hashes[c, 0], cache_hashes[c, 1])
            size += insert_key(t, 3, slots, n1, n2, offset, 0, False, False, touched_p, True)
            latest = offset
    return -1, size, latest


@kernel(nogil=True)
def mark_winners(winners: Arr, offsets: Arr, flags: Arr, n: int) -> int:
    """Set ``FLAG_WINNER`` on the first ``n`` records whose offset is in ``winners``; returns how
    many were marked.

    Both are ascending (``offsets[:n]`` strictly: the caller knows, ``RecordCache.ascending``),
    and only the winners' flags are touched (pass 1 wrote every flag without ``FLAG_WINNER``).
    Each winner is found by galloping from the previous one's place, then a binary search over
    the records between: about ``w log(n / w)`` steps for ``w`` winners, near each other in
    memory, whether the winners are few (a search each) or a good share of the records.
    """
    if n > offsets.shape[0] or n > flags.shape[0]:
        raise ValueError("mark_winners: fewer records than n")
    marked = 0
    lo = 0  # every record before it has a smaller offset than the winner looked for
    for w in range(winners.shape[0]):
        o = winners[w]
        hi = lo
        step = 1
        while hi < n and offsets[hi] < o:
            lo = hi + 1
            hi += step
            step <<= 1
        hi = min(hi, n)
        while lo < hi:
            mid = (lo + hi) >> 1
            if offsets[mid] < o:
                lo = mid + 1
            else:
                hi = mid
        if lo >= n:
            break
        if offsets[lo] == o:
            flags[lo] |= FLAG_WINNER
            marked += 1
    return marked
