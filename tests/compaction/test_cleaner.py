"""``Cleaner.clean`` on real logs: Kafka's LogCleanerTest scenarios (docs/kafka-format.md §7), named
after Kafka's tests, plus the engine's own contract (copies, rebuilds, swaps, errors, checkpoint).

Kafka's unit tests use a fake map of ``capacity`` slots and load factor 0.75 (so
``floor(0.75 x capacity)`` keys) and Kafka's ``largeTimestamp`` as the clock; ``offset_map`` and
``LARGE_TS`` do the same. A "two-pass clean" cleans at t, then at t + delete.retention.ms + 1.
The helpers are ``tests/support/cleaning.py``'s, shared with the other modules that clean logs.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cleanerd.compaction import (
    CleanerStats,
    OffsetMap,
    cleaner_checkpoint,
)
from cleanerd.compaction._cleaner import Cleaner, CleaningAbortedError, segment_sizes
from cleanerd.compaction._grouping import SegmentSizes, group_segments
from cleanerd.compaction._offset_map._build import build_offset_map
from cleanerd.format import INT_MAX as INT32_MAX, Record, build_batch
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import AbortedTxn, PartitionLog
from tests.support.cleaning import (
    DAY,
    LARGE_TS,
    LONG_MAX,
    OFFSET,
    Producer,
    aborted_txns,
    batches_of,
    clean,
    compacted_config,
    data_records,
    files_snapshot,
    fill_segments,
    hashes_of,
    horizons,
    keys_in_log,
    last_offsets_per_batch,
    last_sequences,
    make_plan,
    new_log,
    no_temp_files,
    offset_map,
    offsets_in_log,
    rec,
    two_pass_clean,
    write_segment,
)


# --- LogCleanerTest: basic cleaning ------------------------------------------------------------
def test_clean_segments(tmp_path: Path) -> None:
    """Kafka test 1 (testCleanSegments): keys newer elsewhere vanish from the cleaned group."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 4, lambda o: rec(o, o))
    assert keys_in_log(log) == list(range(log.log_end_offset))
    omap = offset_map(LONG_MAX // 2**40)
    gone = [1, 3, 5, 7, 9]
    omap.put_batch(hashes_of([b"%d" % x for x in gone]), np.full(len(gone), LONG_MAX))
    group = log.segments[:3]
    expected_read = sum(s.size for s in group)
    hw = log.high_watermark
    stats = Cleaner(omap).clean_segments(log, group, compacted_config(), OFFSET, LARGE_TS, hw)
    assert [x for x in keys_in_log(log) if x in gone] == []
    assert set(keys_in_log(log)) == set(range(log.log_end_offset)) - set(gone)
    assert stats.bytes_read == expected_read
    assert no_temp_files(log.directory)


def test_cleaning_with_deletes(tmp_path: Path) -> None:
    """Kafka test 21 (testCleaningWithDeletes): tombstones for every even key remove them."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 2, lambda o: rec(o % 10, o))
    for key in range(0, 10, 2):
        log.append([rec(key, None)])
    log.roll()
    clean(log)
    assert not any(key % 2 == 0 for key in keys_in_log(log))
    assert set(keys_in_log(log)) == {1, 3, 5, 7, 9}


def test_log_cleaner_stats(tmp_path: Path) -> None:
    """Kafka test 22 (testLogCleanerStats)."""
    log = new_log(tmp_path, segment_bytes=1024)
    for key in (0, 1, 0, 1, 0):
        log.append([rec(key, key)])
    log.roll()
    initial = sum(s.size for s in log.segments)
    result = clean(log, 2, capacity=4)
    stats = result.stats
    assert result.end_offset == 5
    assert stats.messages_read == 5
    assert stats.bytes_read == initial
    assert stats.messages_written == 2
    assert stats.bytes_written == sum(s.size for s in log.segments)
    assert stats.invalid_messages_read == 0
    assert stats.end_time is not None
    assert stats.end_time >= stats.start_time
    assert stats.passes == 1


def test_partial_segment_clean(tmp_path: Path) -> None:
    """Kafka test 26 (testPartialSegmentClean): a one-key map still makes progress."""
    log = new_log(tmp_path, segment_bytes=1024)
    for key in (0, 1, 0, 1, 0):
        log.append([rec(key, key)])
    log.roll()
    assert clean(log, 2, capacity=2).end_offset == 3
    assert (keys_in_log(log), offsets_in_log(log)) == ([1, 0, 1, 0], [1, 2, 3, 4])
    assert clean(log, 3, capacity=2).end_offset == 4
    assert (keys_in_log(log), offsets_in_log(log)) == ([0, 1, 0], [2, 3, 4])
    clean(log, 4, capacity=2)
    assert (keys_in_log(log), offsets_in_log(log)) == ([1, 0], [3, 4])


def test_cleaning_with_uncleanable_section(tmp_path: Path) -> None:
    """Kafka test 27: segments from the first uncleanable offset on keep every record."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 6, lambda o: rec(o % 5, o))
    upper = log.segments[3].base_offset
    uncleanable_before = [(r.offset, r.key) for r in log.records(upper)]
    cleanable_before = len([r for r in log.records() if r.offset < upper])
    clean(log, 0, upper)
    assert [(r.offset, r.key) for r in log.records(upper)] == uncleanable_before
    assert len([r for r in log.records() if r.offset < upper]) < cleanable_before


def test_cleaning_with_unkeyed_messages(tmp_path: Path) -> None:
    """Kafka test 30 (testCleaningWithUnkeyedMessages)."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 2, lambda o: rec(None, o))
    unkeyed = sum(1 for r in log.records() if r.key is None)
    size_unkeyed = sum(s.size for s in log.segments)
    fill_segments(log, 3, lambda o: rec(o, o))
    expected_size = sum(s.size for s in log.segments) - size_unkeyed
    result = clean(log)
    assert sum(1 for r in log.records() if r.key is None) == 0
    assert sum(s.size for s in log.segments) == expected_size
    assert result.stats.invalid_messages_read == unkeyed


def test_clean_segments_with_abort(tmp_path: Path) -> None:
    """Kafka test 31 (testCleanSegmentsWithAbort): the abort check stops the clean; nothing
    changes and no ``.cleaned`` file is left."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 4, lambda o: rec(o % 3, o))
    before = files_snapshot(log.directory)
    with pytest.raises(CleaningAbortedError):
        Cleaner(offset_map()).clean(
            log,
            make_plan(log, 0, log.active_segment.base_offset),
            compacted_config(),
            OFFSET,
            LARGE_TS,
            abort_check=lambda: True,
        )
    assert files_snapshot(log.directory) == before
    calls = iter(range(10**6))
    with pytest.raises(CleaningAbortedError):  # during pass 2, after the map is built
        Cleaner(offset_map()).clean(
            log,
            make_plan(log, 0, log.active_segment.base_offset),
            compacted_config(),
            OFFSET,
            LARGE_TS,
            abort_check=lambda: next(calls) >= 4,  # pass 1: 3 chunks, then a group
        )
    assert no_temp_files(log.directory)
    assert cleaner_checkpoint(log) is None  # a pass that did not finish writes no checkpoint
    assert verify_partition(log.directory).problems == []


def test_clean_tombstone(tmp_path: Path) -> None:
    """Kafka test 43 (testCleanTombstone): the horizon counts from the first cleaning that
    keeps the tombstone, not from its (old) timestamp."""
    log = new_log(tmp_path, segment_bytes=1024)
    log.append([rec(1, None, ts=1)])  # a tombstone written long ago
    log.append([rec(2, 2, ts=1)])
    log.roll()
    now = 10 * DAY
    clean(log, 0, now=now)
    assert data_records(log)[0].value is None
    assert horizons(log)[0] == now + DAY
    log.append([rec(3, 3, ts=now)])
    log.roll()
    clean(log, 2, now=now + DAY - 1)  # a later pass before the horizon keeps it
    assert 0 in data_records(log)
    clean(log, 2, now=now + DAY)  # the same dirty range again, at the horizon
    assert 0 not in data_records(log)
    assert sorted(data_records(log)) == [1, 2]


def test_cleaning_beyond_missing_offsets(tmp_path: Path) -> None:
    """Kafka test 44: offset gaps before the active segment; the next dirty offset is the
    active segment's base, not the last record's offset + 1."""
    d = tmp_path / "t-0"
    write_segment(d, 0, [build_batch([rec(0, 0, 1)], base_offset=0)])
    write_segment(d, 10, [build_batch([Record(10, 1, b"1", b"1")])])
    write_segment(d, 20, [])
    log = PartitionLog(d)
    assert clean(log).end_offset == 20
    assert cleaner_checkpoint(log) == 20


# --- offset map (pass 1) -----------------------------------------------------------------------
def _map_of(log: PartitionLog, start: int, end: int, capacity: int) -> tuple[OffsetMap, Any]:
    omap = offset_map(capacity)
    stats = CleanerStats()
    dirty = [s for s in log.segments[:-1] if s.base_offset < end]
    dirty = [
        s for i, s in enumerate(dirty) if i + 1 == len(dirty) or dirty[i + 1].base_offset > start
    ]
    build = build_offset_map(dirty, log.segments, start, end, omap, OFFSET, stats, lambda n: None)
    return omap, (build, stats)


def test_build_offset_map(tmp_path: Path) -> None:
    """Kafka test 37 (testBuildOffsetMap): the map holds exactly the range's keys."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 2, lambda o: rec(o, o))
    while log.log_end_offset < 500:
        log.append([rec(log.log_end_offset, 0)])
    log.roll()
    bases = [s.base_offset for s in log.segments]
    for start, end in ((bases[0], bases[3]), (bases[3], bases[6]), (bases[2], bases[-1])):
        omap, (build, _) = _map_of(log, start, end, 1 << 12)
        assert build.end_offset == end
        assert omap.size == end - start
        present = hashes_of([b"%d" % x for x in range(start, end)])
        assert (omap.get(present)[0] == np.arange(start, end)).all()
        absent = hashes_of([b"%d" % x for x in (*range(start), *range(end, 500))])
        assert (omap.get(absent)[0] == -1).all()


def test_build_partial_offset_map(tmp_path: Path) -> None:
    """Kafka test 41 (testBuildPartialOffsetMap): capacity 3 holds 2 keys; from offset 2."""
    log = new_log(tmp_path, segment_bytes=1024)
    for x in range(5):
        log.append([rec(x, x)])
    log.roll()
    omap, (build, stats) = _map_of(log, 2, 5, 3)
    assert omap.size == 2
    assert build.full
    assert build.end_offset == 4
    assert (omap.get(hashes_of([b"2", b"3"]))[0] == [2, 3]).all()
    assert (omap.get(hashes_of([b"0", b"1", b"4"]))[0] == -1).all()
    assert stats.map_messages_read == 4  # offsets 0..3: Kafka stops at the record that does not fit


def test_build_offset_map_fake_large(tmp_path: Path) -> None:
    """Kafka test 40: two records far apart."""
    d = tmp_path / "t-0"
    write_segment(
        d,
        0,
        [build_batch([Record(0, 1, b"a", b"1")]), build_batch([Record(7206178, 1, b"b", b"2")])],
    )
    write_segment(d, 7206179, [])
    log = PartitionLog(d)
    omap, (build, _) = _map_of(log, 0, 7206179, 1 << 10)
    assert omap.size == 2
    assert omap.latest_offset == 7206178
    assert build.end_offset == 7206179


# --- grouping (Kafka tests 33 to 36) ------------------------------------------------------------
def test_segment_grouping(tmp_path: Path) -> None:
    """Kafka test 33 (testSegmentGrouping)."""
    log = new_log(tmp_path, segment_bytes=300, index_interval_bytes=1)
    fill_segments(log, 10, lambda o: Record(0, 0, b"hello", b"hello"))
    sizes = [segment_sizes(s) for s in log.segments]
    leo = log.log_end_offset

    def check_order(groups: list[list[int]]) -> None:
        assert [i for g in groups for i in g] == list(range(len(sizes)))

    groups = group_segments(sizes, INT32_MAX, INT32_MAX, leo)
    assert groups == [list(range(10))]
    for max_log, max_index in ((1, INT32_MAX), (INT32_MAX, 1)):
        groups = group_segments(sizes, max_log, max_index, leo)
        assert len(groups) == 10
        check_order(groups)
    by_log = sum(s.log_bytes for s in sizes[:3]) + 1
    groups = group_segments(sizes, by_log, INT32_MAX, leo)
    check_order(groups)
    assert all(len(g) == 3 for g in groups[:-1])
    by_index = sum(s.offset_index_bytes for s in sizes[:3]) + 1
    groups = group_segments(sizes, INT32_MAX, by_index, leo)
    check_order(groups)
    assert all(len(g) == 3 for g in groups[:-1])


def test_segment_grouping_with_sparse_offsets() -> None:
    """Kafka test 35: a group never spans more than 2^31 - 1 offsets."""
    big = INT32_MAX + 1
    sizes = [
        SegmentSizes(0, 100, 8, 12),
        SegmentSizes(big // 2, 100, 8, 12),
        SegmentSizes(big, 100, 8, 12),
        SegmentSizes(big + 10, 100, 8, 12),
    ]
    # 0's group may reach up to big - 1 (the next base - 1): segment big//2 joins, big does not
    assert group_segments(sizes, INT32_MAX, INT32_MAX, big + 20) == [[0, 1], [2, 3]]
    # the last segment is estimated up to the first uncleanable offset
    assert group_segments(sizes[2:], INT32_MAX, INT32_MAX, 2 * big + 1) == [[0], [1]]


def test_segment_grouping_with_sparse_offsets_and_empty_segments() -> None:
    """Kafka test 34: non-empty segments 2^31 apart do not group; empty ones always join."""
    big = INT32_MAX + 1
    sizes = [SegmentSizes(i * big, 100, 8, 12) for i in range(3)]
    assert group_segments(sizes, INT32_MAX, INT32_MAX, 3 * big) == [[0], [1], [2]]
    emptied = [SegmentSizes(s.base_offset, 0, 0, 0) for s in sizes]
    assert group_segments(emptied, INT32_MAX, INT32_MAX, 3 * big) == [[0, 1, 2]]


def test_segment_grouping_following_load_of_zero_index() -> None:
    """Kafka test 36: the range estimate uses base offsets, never index entries, so an empty
    index cannot make two far-apart segments look close."""
    sizes = [SegmentSizes(0, 100, 0, 0), SegmentSizes(INT32_MAX + 1, 100, 0, 0)]
    assert group_segments(sizes, INT32_MAX, INT32_MAX, INT32_MAX + 2) == [[0], [1]]


def test_empty_segments_merge_on_a_later_pass(tmp_path: Path) -> None:
    """A group whose tail loses every batch: the tail segments are replaced by empty ones (the
    swap protocol needs the cleaned offsets to cover what they replace); a later pass merges."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 3, lambda o: rec(o, o))  # keys 0.. in two full segments
    n = log.log_end_offset
    log.roll()
    for key in range(1, n):  # every key but 0 is superseded
        log.append([rec(key, -key)])
    log.roll()
    bases = [s.base_offset for s in log.segments]
    clean(log, 0, config=compacted_config(), cleaner=Cleaner(offset_map()))
    assert [s.base_offset for s in log.segments][:2] == bases[:2]
    assert log.segments[1].size == 0
    assert verify_partition(log.directory).problems == []
    # the next pass merges the empty segment into its neighbours (segment.bytes permitting)
    clean(log, 0)
    assert log.segments[0].base_offset == 0
    assert all(s.size > 0 for s in log.segments[:-1])
    assert set(keys_in_log(log)) == set(range(n))
    assert verify_partition(log.directory).problems == []


# --- producers and transactions (Kafka tests 4 to 16, 23 to 25) --------------------------------
def test_duplicate_check_after_cleaning(tmp_path: Path) -> None:
    """Kafka test 4: batches keep their last offsets and sequences, after a reopen too."""
    log = new_log(tmp_path, segment_bytes=2048)
    for pid, keys in ((1, (1, 2, 3)), (2, (3, 1, 4)), (3, (1, 4))):
        Producer(log, pid, txn=False)(*keys)
    log.roll()
    clean(log)
    assert last_offsets_per_batch(log) == [2, 5, 7]
    assert keys_in_log(log) == [2, 3, 1, 4]
    assert offsets_in_log(log) == [1, 3, 6, 7]
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1}
    log.close()
    state = PartitionLog(log.directory).producer_state()
    assert {p: e.last_sequence for p, e in state.producers.items()} == {1: 2, 2: 2, 3: 1}


def test_log_cleaner_retains_producer_last_sequence(tmp_path: Path) -> None:
    """Kafka test 23."""
    log = new_log(tmp_path)
    log.append([rec(0, 0)])
    for pid, key, seq in ((1, 0, 0), (2, 0, 0), (3, 0, 0), (2, 1, 1)):
        log.append([rec(key, pid)], producer_id=pid, producer_epoch=0, base_sequence=seq)
    log.roll()
    clean(log)
    assert last_offsets_per_batch(log) == [1, 3, 4]
    assert last_sequences(log) == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(log) == [0, 1]
    assert offsets_in_log(log) == [3, 4]


def test_basic_transaction_aware_cleaning(tmp_path: Path) -> None:
    """Kafka test 6 (testBasicTransactionAwareCleaning)."""
    log = new_log(tmp_path)
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1(1, 2)
    p2(2, 3)
    p1(3, 4)
    p1.abort()
    p2.commit()
    p1(2)
    p1.commit()
    log.roll()
    before = aborted_txns(log)
    clean(log, 0, 10**9)
    assert keys_in_log(log) == [3, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    assert aborted_txns(log) == before


def test_clean_with_transactions_spanning_segments(tmp_path: Path) -> None:
    """Kafka test 7 (testCleanWithTransactionsSpanningSegments)."""
    log = new_log(tmp_path)
    p1, p2, p3 = Producer(log, 1), Producer(log, 2), Producer(log, 3)
    p1(1, 2)
    p3(2, 3)
    p2(3, 4)
    log.roll()
    p1(5, 6)
    p3(6, 7)
    p2(7, 8)
    p2.abort()
    p3(8, 9)
    p3.commit()
    p1(9, 10)
    p1.abort()
    dirty = clean(log).end_offset  # only the first segment
    assert dirty == 6
    assert keys_in_log(log) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    log.roll()
    p2(11)
    p1(12)
    clean(log, dirty)
    assert keys_in_log(log) == [2, 3, 6, 7, 8, 9, 11, 12]
    assert verify_partition(log.directory).problems == []


def test_commit_marker_removal(tmp_path: Path) -> None:
    """Kafka tests 8 and 10: a COMMIT stays while a batch of its txn is read (an emptied last
    batch of its producer counts); then it gets a horizon, and goes once that passes."""
    log = new_log(tmp_path)
    p1, p2 = Producer(log, 1), Producer(log, 2, txn=False)
    p1(1)
    p1(2, 3)
    p1.commit()
    p2(2, 1, 3)
    log.roll()
    clean(log, 0, 10**9)
    assert (offsets_in_log(log), last_offsets_per_batch(log)) == ([3, 4, 5, 6], [2, 3, 6])
    clean(log, 0, 10**9)
    assert (offsets_in_log(log), last_offsets_per_batch(log)) == ([3, 4, 5, 6], [2, 3, 6])
    assert horizons(log)[1] is None  # the emptied batch is still read: the COMMIT is needed
    Producer(log, 1, txn=False)(4)  # producer 1 writes again: its empty batch may go
    log.roll()
    clean(log, 0, 10**9)
    assert (offsets_in_log(log), last_offsets_per_batch(log)) == ([3, 4, 5, 6, 7], [3, 6, 7])
    assert horizons(log)[0] is None
    clean(log, 0, 10**9)
    assert horizons(log)[0] == LARGE_TS + DAY
    clean(log, 0, 10**9, now=LARGE_TS + DAY - 1)
    assert offsets_in_log(log) == [3, 4, 5, 6, 7]
    clean(log, 0, 10**9, now=LARGE_TS + DAY)
    assert (offsets_in_log(log), last_offsets_per_batch(log)) == ([4, 5, 6, 7], [6, 7])


def test_deleted_batches_with_no_messages_read(tmp_path: Path) -> None:
    """Kafka test 9 (testDeletedBatchesWithNoMessagesRead)."""
    log = new_log(tmp_path, max_message_bytes=100, segment_bytes=1000)
    p = Producer(log, 1)
    p(1)
    p.abort()
    p(2)
    p(2)
    p.commit()
    log.roll()
    clean(log, 0, 100)
    assert keys_in_log(log) == [2]
    assert offsets_in_log(log) == [1, 3, 4]
    two_pass_clean(log, 0, 100)
    assert keys_in_log(log) == [2]
    assert offsets_in_log(log) == [3, 4]


def test_clean_empty_control_batch(tmp_path: Path) -> None:
    """Kafka test 11: a lone COMMIT becomes an empty control batch kept for the epoch."""
    log = new_log(tmp_path)
    Producer(log, 1).commit()
    log.roll()
    two_pass_clean(log, 0, 10**9)
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([0], [])
    clean(log, 0, 10**9, now=LONG_MAX)
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([0], [])


def test_committed_transaction_spanning_segments(tmp_path: Path) -> None:
    """Kafka test 12."""
    log = new_log(tmp_path)
    p = Producer(log, 1)
    p(1)
    log.roll()
    p.commit()
    log.roll()
    two_pass_clean(log, 0, 10**9)
    assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([0, 1], [0, 1])


def test_aborted_transaction_spanning_segments(tmp_path: Path) -> None:
    """Kafka test 13: the producer's last (aborted) batch stays empty; its ABORT is kept and
    stays indexed, however late the clean."""
    log = new_log(tmp_path)
    p = Producer(log, 1)
    p(1)
    log.roll()
    p.abort()
    log.roll()
    for now in (LARGE_TS, LARGE_TS + DAY + 1, LONG_MAX):
        clean(log, 0, 10**9, now=now)
        assert (last_offsets_per_batch(log), offsets_in_log(log)) == ([0, 1], [1])
        assert aborted_txns(log) == [AbortedTxn(1, 0, 1, 2)]


def test_abort_marker_removal(tmp_path: Path) -> None:
    """Kafka test 14 (testAbortMarkerRemoval)."""
    log = new_log(tmp_path)
    p = Producer(log, 1)
    p(1)
    p(2, 3)
    p.abort()
    p(3)
    p.commit()
    log.roll()
    clean(log, 0, 6)
    assert (keys_in_log(log), offsets_in_log(log)) == ([3], [3, 4, 5])
    assert aborted_txns(log) == [AbortedTxn(1, 0, 3, 4)]
    two_pass_clean(log, 0, 10**9)
    assert (keys_in_log(log), offsets_in_log(log)) == ([3], [4, 5])
    assert aborted_txns(log) == []


def test_empty_batch_removal_with_sequence_reuse(tmp_path: Path) -> None:
    """Kafka test 15: two committed one-record txns (sequence 0 each), then plain records."""
    log = new_log(tmp_path)
    for _ in range(2):
        p = Producer(log, 1)
        p(1)
        p.commit()
    log.append([rec(1, 1)])
    log.append([rec(2, 2)])
    log.roll()
    clean(log, 0, 10**9)
    assert offsets_in_log(log) == [1, 3, 4, 5]
    two_pass_clean(log, 0, 10**9)
    assert last_offsets_per_batch(log) == [2, 3, 4, 5]


def test_abort_marker_retention_with_empty_batch(tmp_path: Path) -> None:
    """Kafka test 16 (testAbortMarkerRetentionWithEmptyBatch)."""
    log = new_log(tmp_path)
    p = Producer(log, 1)
    p(2, 3)
    p.abort()
    log.roll()
    for _ in range(2):
        clean(log, 0, 10**9)
        assert aborted_txns(log) == [AbortedTxn(1, 0, 2, 3)]
        assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == (
            [],
            [2],
            [1, 2],
        )
    p(1)
    log.roll()
    clean(log, 0, 10**9)
    assert aborted_txns(log) == [AbortedTxn(1, 0, 2, 3)]
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == (
        [1],
        [2, 3],
        [2, 3],
    )
    two_pass_clean(log, 0, 10**9)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == ([1], [3], [3])
    assert aborted_txns(log) == []


def test_last_sequence_retained_even_if_transaction_aborted(tmp_path: Path) -> None:
    """Kafka test 24 (testLogCleanerRetainsLastSequenceEvenIfTransactionAborted)."""
    log = new_log(tmp_path)
    p = Producer(log, 1)
    for key in (1, 2, 3):
        p(key)
    p.abort()
    log.roll()
    clean(log, 0, 4)
    assert (last_offsets_per_batch(log), keys_in_log(log), offsets_in_log(log)) == ([2, 3], [], [3])
    assert last_sequences(log) == {1: 2}
    p(1, 5)
    p.commit()
    log.roll()
    clean(log, 0, 6)
    assert (last_offsets_per_batch(log), keys_in_log(log), offsets_in_log(log)) == (
        [3, 5, 6],
        [1, 5],
        [3, 4, 5, 6],
    )


def test_cleaning_with_keys_conflicting_with_txn_marker_keys(tmp_path: Path) -> None:
    """Kafka test 25: a data record keyed like a COMMIT control record does not supersede it."""
    log = new_log(tmp_path, segment_bytes=1024)
    p1 = Producer(log, 1)
    p1(1)
    p1.commit()
    commit_key = struct.pack(">hh", 0, 1)
    log.append(
        [Record(0, 0, commit_key, b"foo")],
        producer_id=2,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    Producer(log, 2).commit()
    log.roll()
    assert offsets_in_log(log) == [0, 1, 2, 3]
    clean(log)
    assert last_offsets_per_batch(log) == [0, 1, 2, 3]
    assert offsets_in_log(log) == [0, 1, 2, 3]


def test_multi_pass_segment_cleaning_with_aborted_transactions(tmp_path: Path) -> None:
    """Kafka test 5: a map too small for one pass; aborted data goes in the first pass that
    reads it, markers and the txn index stay while needed, then the markers go after the
    horizon."""
    log = new_log(tmp_path)
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1(1)  # 0
    p2(2)  # 1
    p1(3)  # 2
    p1.commit()  # 3
    p2(4)  # 4
    p2.commit()  # 5
    p1(5)  # 6
    p1(6)  # 7
    p2(7)  # 8  (aborted txn of p2: 8..10)
    p2(8)  # 9
    p2.abort()  # 10
    p1(9)  # 11 (p1's txn from 6 is aborted: 6..16)
    p2(10)  # 12
    p2.commit()  # 13
    p1(11)  # 14
    p1(12)  # 15
    p1.abort()  # 16
    log.append([rec(20, 20)])  # 17
    log.roll()
    assert aborted_txns(log) == [AbortedTxn(2, 8, 10, 6), AbortedTxn(1, 6, 16, 17)]
    first = clean(log, 0, capacity=4)  # three keys: 1, 2, 3, then full at key 4
    assert first.end_offset == 4
    # pass 2 reads the whole log: aborted data goes now, whatever the map covers; p1's last
    # data batch (15) stays as an empty header, so its ABORT (16) stays indexed
    kept = [0, 1, 2, 3, 4, 5, 10, 12, 13, 16, 17]
    assert offsets_in_log(log) == kept
    assert 15 in last_offsets_per_batch(log)
    assert aborted_txns(log) == [AbortedTxn(2, 8, 10, 6), AbortedTxn(1, 6, 16, 17)]
    second = clean(log, first.end_offset, capacity=4)
    assert second.end_offset == 18  # aborted data never fills the map
    assert keys_in_log(log) == [1, 2, 3, 4, 10, 20]
    assert offsets_in_log(log) == kept
    # no batch of p2's aborted txn was read: its ABORT is no longer indexed and gets a horizon
    assert aborted_txns(log) == [AbortedTxn(1, 6, 16, 17)]
    marker_horizons = {b.header.base_offset: b.header.delete_horizon_ms for b in batches_of(log)}
    assert marker_horizons[10] == LARGE_TS + DAY
    assert marker_horizons[16] is None
    Producer(log, 1, txn=False)(30)  # 18: p1 writes again, so its empty batch may go
    log.roll()
    clean(log, 0, capacity=64)
    assert offsets_in_log(log) == [*kept, 18]
    assert 15 not in last_offsets_per_batch(log)
    assert aborted_txns(log) == [AbortedTxn(1, 6, 16, 17)]  # batch 15 was read in this pass
    clean(log, 0, capacity=64)
    assert aborted_txns(log) == []
    clean(log, 0, capacity=64, now=LARGE_TS + DAY - 1)
    assert offsets_in_log(log) == [*kept, 18]
    clean(log, 0, capacity=64, now=LARGE_TS + DAY)
    assert offsets_in_log(log) == [0, 1, 2, 3, 4, 5, 12, 13, 17, 18]
    assert verify_partition(log.directory).problems == []
