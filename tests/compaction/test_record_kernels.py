"""The fused pass-1 and pass-2 kernels (``_offset_map._fill.cache_records`` and ``put_cached``,
``_filter.decide_records``) probe the offset map with its own functions (``_offset_map._table``):
a map they fill is the map ``OffsetMap.put_batch`` fills, slot for slot, and their retain rule is
its rule. ``mark_winners``, between them, flags exactly the records whose offset won."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cleanerd.compaction import OffsetMap
from cleanerd.compaction._batches import payloads
from cleanerd.compaction._filter import decide_records
from cleanerd.compaction._offset_map._fill import cache_records, mark_winners, put_cached
from cleanerd.compaction._offset_map._record_cache import FLAG_KEYED, FLAG_WINNER
from cleanerd.compaction._offset_map._touched import touched_bitmap
from cleanerd.format import Record, build_batch, kernels as k

Arr = np.ndarray[Any, Any]


def _log(keys: list[int | None], per_batch: int) -> Arr:
    recs = [
        Record(i, 1000 + i, None if key is None else b"k%d" % key, b"v")
        for i, key in enumerate(keys)
    ]
    data = b"".join(build_batch(recs[i : i + per_batch]) for i in range(0, len(recs), per_batch))
    return np.frombuffer(data, dtype=np.uint8)


def _map_records(
    omap: OffsetMap, arr: Arr, start: int, split: int = 0
) -> tuple[int, int, Arr, Arr, Arr]:
    """Cache every record (the batches before ``split`` in one call, the rest in another, as two
    threads do), then put the rows in one call."""
    batches, _, _ = k.walk_batch_matrix(arr, 0, arr.shape[0])
    got = payloads(arr, batches)
    assert got is not None
    buf, starts, ends = got
    counts = np.ascontiguousarray(batches[:, k.B_COUNT])
    total, top = int(counts.sum()), int(counts.max())
    hashes = np.empty((total, 2), np.uint64)
    offsets = np.empty(total, np.int64)
    flags = np.empty(total, np.uint8)
    split = min(split, batches.shape[0])
    for lo, hi in ((0, split), (split, batches.shape[0])):
        err, records = cache_records(
            buf,
            starts[lo:hi],
            ends[lo:hi],
            np.ascontiguousarray(batches[lo:hi, k.B_BASE_OFFSET]),
            np.ascontiguousarray(batches[lo:hi, k.B_LAST_OFFSET]),
            np.ascontiguousarray(batches[lo:hi, k.B_BASE_TIMESTAMP]),
            counts[lo:hi],
            np.full(hi - lo, -1, np.int64),
            np.empty((top, k.RECORD_COLUMNS), np.int64),
            np.empty((top, 2), np.uint64),
            hashes,
            offsets,
            flags,
            int(counts[:lo].sum()),
        )
        assert err == k.REC_OK
        assert records == int(counts[lo:hi].sum())
    full_row, size, _latest = put_cached(
        omap.table,
        start,
        omap.size,
        omap.max_entries,
        hashes,
        offsets,
        flags,
        0,
        total,
        touched_bitmap(omap),
    )
    omap.set_size(size)
    return full_row, total, hashes, offsets, flags


@settings(max_examples=60)
@given(
    keys=st.lists(st.one_of(st.none(), st.integers(0, 40)), min_size=1, max_size=120),
    per_batch=st.integers(1, 9),
    slots=st.integers(2, 64),
    data=st.data(),
)
def test_fused_map_is_put_batch_map(
    keys: list[int | None], per_batch: int, slots: int, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(keys)))
    split = data.draw(st.integers(0, len(keys)))
    fused_map = OffsetMap(slots * 24)
    arr = _log(keys, per_batch)
    full_record, n, hashes, offsets, flags = _map_records(fused_map, arr, start, split)
    _, _, one_hashes, one_offsets, one_flags = _map_records(OffsetMap(slots * 24), arr, start)
    # the rows do not depend on how the batches were split between calls
    assert np.array_equal(hashes, one_hashes)
    assert np.array_equal(offsets, one_offsets)
    assert np.array_equal(flags, one_flags)

    plain = OffsetMap(slots * 24)
    keyed = ((flags & FLAG_KEYED) != 0) & (offsets >= start)
    nxt, full = plain.put_batch(hashes, offsets, keyed=keyed)
    assert full == (full_record >= 0)
    assert nxt == (full_record if full else n)
    assert fused_map.size == plain.size
    assert np.array_equal(fused_map.table, plain.table)

    # pass 2's rule over the same map is should_retain's for keyed records in the map's range
    latest = int(offsets[-1])
    counts = np.array([len(keys)], np.int64)
    keep = np.empty(n, np.bool_)
    decide_records(
        fused_map.table,
        False,
        latest,
        0,
        hashes,
        offsets,
        flags,
        np.zeros(0, np.int64),
        np.zeros(0, np.bool_),
        np.zeros(1, np.int64),
        counts,
        np.zeros(1, np.int64),
        np.zeros(1, np.bool_),
        np.zeros(1, np.bool_),
        np.zeros(1, np.int64),
        keep,
        np.zeros(1, np.int64),
        np.zeros(1, np.bool_),
        -1,
    )
    retain = fused_map.should_retain(hashes, offsets)
    is_keyed = (flags & FLAG_KEYED) != 0
    assert np.array_equal(keep[is_keyed], retain[is_keyed])


@pytest.mark.parametrize(("records", "winners"), [(5000, 3), (5000, 700), (5000, 5000), (1, 1)])
def test_mark_winners_flags_the_records_whose_offset_won(records: int, winners: int) -> None:
    """The galloping search flags the records whose offset is a winner's, and no other; winners
    the cache does not hold (past its last record, between its records) flag nothing."""
    rng = np.random.default_rng(records + winners)
    offsets = np.sort(rng.choice(1 << 32, records, replace=False)).astype(np.uint32)
    held = rng.choice(offsets.astype(np.int64), winners, replace=False)
    absent = np.array([int(offsets[-1]) + 1, int(offsets[0]) + 1, 1 << 33], dtype=np.int64)
    absent = absent[~np.isin(absent, offsets)]
    chosen = np.unique(np.concatenate([held, absent]))
    flags = (rng.integers(0, 2, records) * FLAG_KEYED).astype(np.uint8)
    before = flags.copy()
    marked = mark_winners(chosen, offsets, flags, records)
    expected = np.isin(offsets.astype(np.int64), held)
    assert marked == int(expected.sum()) == np.unique(held).size
    assert np.array_equal((flags & FLAG_WINNER) != 0, expected)
    assert np.array_equal(flags & ~np.uint8(FLAG_WINNER), before)


def test_pass_1_room_is_kept_between_chunks_only_up_to_its_bound() -> None:
    """An honest chunk's room stays with the cleaner; one of a chunk of tiny records past
    ``MAX_KEPT_SCRATCH_BYTES`` goes with that chunk."""
    from cleanerd.compaction._offset_map._record_cache import (  # noqa: PLC0415
        MAX_KEPT_SCRATCH_BYTES,
        SCRATCH_ROW_BYTES,
        RecordCache,
    )

    cache = RecordCache(1 << 20)
    small = cache.scratch(1000)
    assert [a.shape[0] for a in small] == [1000] * 3
    assert np.shares_memory(cache.scratch(500)[1], small[1])  # kept
    rows = MAX_KEPT_SCRATCH_BYTES // SCRATCH_ROW_BYTES + 1
    big = cache.scratch(rows)
    assert [a.shape[0] for a in big] == [rows] * 3
    assert not np.shares_memory(cache.scratch(500)[1], big[1])  # not kept
    assert np.shares_memory(cache.scratch(500)[1], small[1])
