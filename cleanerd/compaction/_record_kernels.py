"""Fused numba kernels for the cleaner's hot paths: one call per chunk, no per-record numpy.

* ``map_records`` (pass 1, offset strategy): indexes every record of a chunk's data batches with
  the format's own record parser (``kernels.index_one``, so validation is exactly the reader's),
  hashes each key as it is parsed, puts the keyed records of the dirty range into the offset map
  (Kafka's full rule, as ``OffsetMap.put_batch``) and writes what pass 2 needs of each record
  (hash, offset, flags) into the record cache. The record matrix is never materialised: each
  batch is parsed into a small scratch matrix that stays in L1.
* ``decide_records`` (pass 2, every strategy): the retain decision of each record of the batches
  looked at (the map's verdict, the delete horizon of tombstones, records beyond the map's range
  and control records kept) and per batch the kept count and whether a tombstone was kept.

Both reach ``OffsetMap.table`` through a raw pointer (``kernels.data_ptr``): a numba helper
that takes an array pays an atomic incref/decref per call, which at one probe per record costs
more than the probe. They probe it with ``map_table``'s functions, the ones ``OffsetMap`` uses,
so a map filled here answers ``OffsetMap.get`` and ``should_retain`` exactly as if
``put_batch`` had filled it, and the other way round.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from cleanerd.compaction._map_table import (
    SLOT_H1,
    SLOT_H2,
    SLOT_OFFSET,
    insert_key,
    is_full,
    normalize,
    retains,
)
from cleanerd.compaction._offset_map import OffsetMap
from cleanerd.format import data_ptr as _data_ptr
from cleanerd.format import index_one as _index_one
from cleanerd.format import kernels as k

Arr = npt.NDArray[Any]

FLAG_KEYED = 1
FLAG_TOMBSTONE = 2
FLAG_WINNER = 4  # the record's offset is its key's entry in the map (``mark_winners``)


def touched_bitmap(omap: OffsetMap) -> Arr:
    """A bitmap with one bit per slot of ``omap``, for ``map_records`` and ``clear_touched``."""
    return np.zeros((omap.slots + 63) // 64, dtype=np.uint64)


@njit(cache=True, nogil=True)
def clear_touched(tab: Arr, touched: Arr) -> int:
    """Empty the slots marked in ``touched`` and unmark them; returns how many held a key.

    A table has exactly as many occupied slots as its map's size, so when the count equals the
    size, every key was in a marked slot and the table is empty again, at the cost of the keys
    rather than of the whole table (a 128 MiB memset). Otherwise the caller clears the table.
    """
    width = tab.shape[1]
    if touched.shape[0] * 64 < tab.shape[0]:
        raise ValueError("clear_touched: the bitmap is smaller than the table")
    t = _data_ptr(tab)
    n = 0
    for w in range(touched.shape[0]):
        word = touched[w]
        if word == 0:
            continue
        touched[w] = 0
        for b in range(64):
            if word & (np.uint64(1) << np.uint64(b)):
                pos = w * 64 + b
                if pos >= tab.shape[0]:
                    break
                o = pos * width
                if t[o + SLOT_H1] != 0 or t[o + SLOT_H2] != 0:
                    n += 1
                for c in range(width):
                    t[o + c] = 0
    return n


@njit(cache=True, nogil=True)
def map_records(
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
    tab: Arr,
    start_offset: int,
    size: int,
    max_entries: int,
    cache_hashes: Arr,
    cache_offsets: Arr,
    cache_flags: Arr,
    cursor: int,
    touched: Arr,
) -> tuple[int, int, int, int, int]:
    """Index, hash and map the records of payloads ``buf[starts[i]:ends[i]]`` (offset strategy).

    The per-batch columns describe the data batches of one chunk, in order (``counts`` already
    checked by ``kernels.bad_counts``); ``scratch``/``scratch_hashes`` hold at least
    ``max(counts)`` rows. Every record's hash, offset and flags (``FLAG_*``) are written to the
    cache arrays from ``cursor`` on (which must have room for the chunk). Then the keyed records
    at or after ``start_offset`` go into ``tab`` (a width-3 ``OffsetMap`` table with ``size``
    entries) until ``max_entries`` is reached: the map is then full. Every slot written is
    marked in ``touched`` (``touched_bitmap``).

    Returns ``(error, records, full_record, size, latest)``: ``error`` is ``REC_OK`` or the
    first record error (the caller re-indexes with the reader to raise it; nothing was put),
    ``records`` the records indexed, ``full_record`` the chunk-relative index of the record
    that did not fit (-1 when the map did not fill), ``size`` the new entry count and ``latest``
    the offset of the last record put (-1 if none).
    """
    n = starts.shape[0]
    if tab.shape[1] != 3 or scratch.shape[1] != k.RECORD_COLUMNS or scratch_hashes.shape[1] != 2:
        raise ValueError("map_records: wrong table or scratch shape")
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
        raise ValueError("map_records: the batch columns differ in length")
    rows = 0
    top = 0
    for i in range(n):
        if not 0 <= starts[i] <= ends[i] <= buf.shape[0] or counts[i] < 0:
            raise ValueError("map_records: a payload range lies outside the buffer")
        rows += counts[i]
        top = max(top, counts[i])
    if scratch.shape[0] < top or scratch_hashes.shape[0] < top:
        raise ValueError("map_records: scratch has fewer rows than a batch")
    if (
        cursor < 0
        or cache_hashes.shape[0] < cursor + rows
        or cache_offsets.shape[0] < cursor + rows
        or cache_flags.shape[0] < cursor + rows
        or cache_hashes.shape[1] != 2
    ):
        raise ValueError("map_records: the cache arrays are too small")
    if touched.shape[0] * 64 < tab.shape[0]:
        raise ValueError("map_records: the bitmap is smaller than the table")
    buf_p = _data_ptr(buf)
    scratch_p = _data_ptr(scratch)
    sh_p = _data_ptr(scratch_hashes)
    t = _data_ptr(tab)
    touched_p = _data_ptr(touched)
    slots = tab.shape[0]
    prev = base_offsets[0] - 1 if n else 0
    rec = 0
    # first every record of the chunk into the cache arrays, then the puts from there: a tight
    # put loop overlaps its cache misses far better than one interleaved with the parsing
    for i in range(n):
        err, _pos, prev = _index_one(
            buf_p,
            starts[i],
            ends[i],
            base_offsets[i],
            last_offsets[i],
            base_timestamps[i],
            counts[i],
            log_append_times[i],
            i,
            scratch_p,
            sh_p,
            True,
            0,
            prev,
        )
        if err != k.REC_OK:
            return err, rec, -1, size, -1
        for r in range(counts[i]):
            c = cursor + rec
            cache_hashes[c, 0] = scratch_hashes[r, 0]
            cache_hashes[c, 1] = scratch_hashes[r, 1]
            cache_offsets[c] = scratch[r, k.R_OFFSET]
            flags = FLAG_KEYED if scratch[r, k.R_KEY_LEN] >= 0 else 0
            if scratch[r, k.R_VALUE_LEN] < 0:
                flags |= FLAG_TOMBSTONE
            cache_flags[c] = flags
            rec += 1
    full_record = -1
    latest = -1
    for j in range(rec):
        c = cursor + j
        offset = cache_offsets[c]
        if (cache_flags[c] & FLAG_KEYED) and offset >= start_offset:
            if is_full(size, max_entries):
                full_record = j  # Kafka: full before the key is even looked up
                break
            n1, n2 = normalize(cache_hashes[c, 0], cache_hashes[c, 1])
            size += insert_key(t, 3, slots, n1, n2, offset, 0, False, False, touched_p, True)
            latest = offset
    return k.REC_OK, rec, full_record, size, latest


@njit(cache=True, nogil=True)
def map_offsets(tab: Arr, touched: Arr) -> Arr:
    """The offsets held by the slots marked in ``touched`` (offset strategy), unsorted."""
    t = _data_ptr(tab)
    width = tab.shape[1]
    n = 0
    for w in range(touched.shape[0]):
        word = touched[w]
        while word:
            n += 1
            word &= word - np.uint64(1)
    out = np.empty(n, dtype=np.int64)
    m = 0
    for w in range(touched.shape[0]):
        word = touched[w]
        b = 0
        while word:
            if word & np.uint64(1):
                pos = w * 64 + b
                o = pos * width
                if pos < tab.shape[0] and (t[o + SLOT_H1] != 0 or t[o + SLOT_H2] != 0):
                    out[m] = np.int64(t[o + SLOT_OFFSET])
                    m += 1
            word >>= np.uint64(1)
            b += 1
    return out[:m]


@njit(cache=True, nogil=True)
def mark_winners(winners: Arr, offsets: Arr, flags: Arr, n: int) -> int:
    """Set ``FLAG_WINNER`` on the first ``n`` records whose offset is in ``winners``.

    ``winners`` is ascending, and so is ``offsets[:n]`` in a sound log (pass 1 caches records in
    offset order): one merge walk. Returns how many records were marked, or -1 if the offsets
    were not strictly ascending (segments whose offsets overlap), when the flags must not be
    used.
    """
    if n > offsets.shape[0] or n > flags.shape[0]:
        raise ValueError("mark_winners: fewer records than n")
    i = 0
    marked = 0
    for j in range(n):
        o = offsets[j]
        if j and o <= offsets[j - 1]:
            return -1
        while i < winners.shape[0] and winners[i] < o:
            i += 1
        if i < winners.shape[0] and winners[i] == o:
            flags[j] |= FLAG_WINNER
            marked += 1
        else:
            flags[j] &= ~FLAG_WINNER
    return marked


@njit(cache=True, nogil=True)
def mark_winners_sparse(winners: Arr, offsets: Arr, flags: Arr, n: int) -> int:
    """``mark_winners`` by one binary search per winner: for few winners among many records.

    ``offsets[:n]`` must be strictly ascending (the caller knows, ``RecordCache.ascending``);
    only the winners' flags are touched (pass 1 wrote every flag without ``FLAG_WINNER``).
    """
    if n > offsets.shape[0] or n > flags.shape[0]:
        raise ValueError("mark_winners_sparse: fewer records than n")
    marked = 0
    for w in range(winners.shape[0]):
        o = winners[w]
        lo = 0
        hi = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if offsets[mid] < o:
                lo = mid + 1
            else:
                hi = mid
        if lo < n and offsets[lo] == o:
            flags[lo] |= FLAG_WINNER
            marked += 1
    return marked


@njit(cache=True, nogil=True)
def decide_records(
    tab: Arr,
    versioned: bool,
    latest_offset: int,
    now_ms: int,
    hashes: Arr,
    offsets: Arr,
    flags: Arr,
    versions: Arr,
    has_version: Arr,
    first: Arr,
    counts: Arr,
    rows: Arr,
    is_control: Arr,
    has_horizon: Arr,
    horizon: Arr,
    keep: Arr,
    kept: Arr,
    kept_tombstone: Arr,
    winners_from: int,
) -> tuple[int, int, int]:
    """Pass 2's record rule for the records of batch ``rows`` (docs/kafka-format.md §4.8, §4.9).

    Batch ``b``'s records are ``first[b] .. first[b] + counts[b] - 1`` of the record arrays
    (``versions``/``has_version`` are read only when ``versioned``). A record is kept when its
    batch is a control batch, when it lies beyond ``latest_offset``, or when it is keyed, wins
    its key in the map (``OffsetMap.should_retain``) and, if a tombstone, its batch's delete
    horizon has not passed ``now_ms``. Writes ``keep`` per record and, per batch, ``kept`` (the
    count) and ``kept_tombstone``; returns ``(unkeyed records in range, tombstones expired,
    tombstones superseded)``: a tombstone that wins its key but whose batch's delete horizon has
    passed (delete.retention.ms) is expired; one beaten by a newer record of its key superseded.

    Records at or after ``winners_from`` (-1: none) carry ``FLAG_WINNER`` from ``mark_winners``
    and are decided by it without a map lookup: every keyed record of the map's range at or
    after the first dirty offset was put into the map in offset order, so its key is present
    and ``offset >= found`` holds exactly for the last one, the one the map holds.
    """
    t = _data_ptr(tab)
    slots = tab.shape[0]
    width = tab.shape[1]
    n = offsets.shape[0]
    nb = min(
        first.shape[0],
        counts.shape[0],
        is_control.shape[0],
        has_horizon.shape[0],
        horizon.shape[0],
        kept.shape[0],
        kept_tombstone.shape[0],
    )
    if hashes.shape[1] != 2 or width < (4 if versioned else 3):
        raise ValueError("decide_records: wrong hash or table shape")
    for j in range(rows.shape[0]):
        if not 0 <= rows[j] < nb:
            raise ValueError("decide_records: a batch row lies outside the batch columns")
    invalid = 0
    expired = 0
    superseded = 0
    for j in range(rows.shape[0]):
        b = rows[j]
        lo = first[b]
        hi = lo + counts[b]
        if lo < 0 or hi > n or hi > keep.shape[0] or hi > flags.shape[0] or hi > hashes.shape[0]:
            raise ValueError("decide_records: a batch's records lie outside the arrays")
        if versioned and (hi > versions.shape[0] or hi > has_version.shape[0]):
            raise ValueError("decide_records: versions missing")
        control = is_control[b]
        deletes_kept = not has_horizon[b] or now_ms < horizon[b]
        n_kept = 0
        tomb_kept = False
        for i in range(lo, hi):
            f = flags[i]
            keyed = (f & FLAG_KEYED) != 0
            tomb = (f & FLAG_TOMBSTONE) != 0
            win = True
            if control or offsets[i] > latest_offset:
                keep_it = True
            elif not keyed:
                invalid += 1
                keep_it = False
            elif 0 <= winners_from <= offsets[i]:
                win = (f & FLAG_WINNER) != 0
                keep_it = win and (not tomb or deletes_kept)
            else:
                h1, h2 = normalize(hashes[i, 0], hashes[i, 1])
                if versioned:
                    v, has = versions[i], has_version[i]
                else:
                    v, has = 0, False
                win = retains(t, width, slots, h1, h2, offsets[i], v, has, versioned)
                keep_it = win and (not tomb or deletes_kept)
            keep[i] = keep_it
            if keep_it:
                n_kept += 1
                if tomb:
                    tomb_kept = True
            elif tomb and keyed and not control:
                if win:
                    expired += 1
                else:
                    superseded += 1
        kept[b] = n_kept
        kept_tombstone[b] = tomb_kept
    return invalid, expired, superseded
