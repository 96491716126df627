"""Planning: Kafka's cleanable range, dirty ratio and KIP-354 delay, must-clean ratio, ranking.

Tests named after Kafka's (LogCleanerTest, LogCleanerManagerTest; docs/kafka-format.md §7) use real
partition logs where the storage layer's metadata matters, hand-made metadata elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from cleanerd.compaction._cleaning_plan import (
    CleaningPlan,
    LogMeta,
    SegmentMeta,
    cleanable_offsets,
    cleaner_checkpoint,
    compaction_deadline_ms,
    log_to_clean,
    max_compaction_delay,
    plan,
    rank,
    segments_between,
)
from cleanerd.format import LONG_MAX, Record
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    PartitionLog,
    TopicPartition,
    write_offset_checkpoint,
)
from cleanerd.topics import (
    InvalidTopicConfigError,
    LogConfig,
    TopicCleanerConfig,
    parse_cleanup_policy,
)

TP = TopicPartition("t", 0)
HOUR = 60 * 60 * 1000
T0 = 1_700_000_000_000
COMPACT = TopicCleanerConfig(compact=True, delete=False)


class Clock:
    """An injected clock the tests move by hand (Kafka's MockTime)."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _record(i: int, ts: int, value_size: int = 20) -> Record:
    return Record(0, ts, str(i).encode(), b"v" * value_size)


def _make_log(
    tmp_path: Path, segment_bytes: int = 1024, clock: Clock | None = None
) -> PartitionLog:
    config = LogConfig(segment_bytes=segment_bytes)
    return PartitionLog.create(tmp_path / "t-0", config, clock=clock or Clock())


def _fill(log: PartitionLog, segments: int, ts: int) -> None:
    """Kafka's ``while (log.numberOfSegments < n) appendAsLeader(...)``: one record per batch."""
    while len(log.segments) < segments:
        log.append([_record(log.log_end_offset, ts)])


def _meta(log: PartitionLog, checkpoint: int | None = None) -> LogMeta:
    return LogMeta.from_log(log, checkpoint)


def _hand_log(
    sizes: list[int],
    *,
    firsts: list[int | None] | None = None,
    largests: list[int] | None = None,
    offsets_per_segment: int = 10,
    lso: int | None = None,
    start: int = 0,
    checkpoint: int | None = None,
) -> LogMeta:
    """Segments of ``offsets_per_segment`` offsets each; the last is the active one."""
    n = len(sizes)
    firsts = firsts if firsts is not None else [None] * n
    largests = largests if largests is not None else [0] * n
    segs = tuple(
        SegmentMeta(
            base_offset=i * offsets_per_segment,
            size_bytes=sizes[i],
            largest_timestamp=largests[i],
            first_batch_timestamp=firsts[i],
            next_offset=(i + 1) * offsets_per_segment,
        )
        for i in range(n)
    )
    leo = segs[-1].next_offset
    return LogMeta(TP, segs, start, leo, leo if lso is None else lso, checkpoint)


# --- LogCleanerTest: LogToClean sizes -------------------------------------------------------------
def _six_single_record_segments(tmp_path: Path) -> PartitionLog:
    log = _make_log(tmp_path, segment_bytes=100)
    for _ in range(6):
        log.append([Record(0, T0, b"1", b"\0" * 25)])
    assert len(log.segments) == 6
    return log


def test_log_to_clean(tmp_path: Path) -> None:
    log = _six_single_record_segments(tmp_path)
    meta = _meta(log)
    active = log.active_segment.base_offset
    ltc = log_to_clean(meta, active, active)
    total = sum(s.size for s in log.segments)
    assert ltc.total_bytes == total - log.active_segment.size


def test_log_to_clean_with_uncleanable_section(tmp_path: Path) -> None:
    log = _six_single_record_segments(tmp_path)
    segs = log.segments
    ltc = log_to_clean(_meta(log), segs[2].base_offset, segs[4].base_offset)
    assert ltc.clean_bytes == sum(s.size for s in segs[:2])
    assert ltc.cleanable_bytes == sum(s.size for s in segs[2:4])
    assert ltc.total_bytes == ltc.clean_bytes + ltc.cleanable_bytes
    assert ltc.cleanable_ratio == ltc.cleanable_bytes / ltc.total_bytes


def test_segment_holding_first_dirty_counts_as_clean_and_cleanable() -> None:
    log = _hand_log([100, 200, 300, 50])
    ltc = log_to_clean(log, 15, 25)  # dirty mid segment 10, bound mid segment 20 -> rounded to 20
    assert ltc.first_uncleanable_offset == 20
    assert (ltc.clean_bytes, ltc.cleanable_bytes) == (300, 200)


def test_segments_between_follows_kafka_values() -> None:
    log = _hand_log([1, 2, 3, 4])

    def bases(a: int, b: int) -> list[int]:
        return [s.base_offset for s in segments_between(log, a, b)]

    assert bases(5, 5) == []
    assert bases(-1, 20) == [0, 10]
    assert bases(15, 30) == [10, 20]
    assert bases(15, 31) == [10, 20, 30]
    assert bases(35, 100) == [30]
    with pytest.raises(ValueError, match="segment range"):
        segments_between(log, 20, 10)


def test_cleaning_beyond_missing_offsets(tmp_path: Path) -> None:
    """Offset gaps between segments: the bound still reaches the active segment's base."""
    log = _make_log(tmp_path, segment_bytes=1024 * 1024)
    for i in range(10):
        log.append([_record(i, T0)])
    log.roll(15)  # offsets 10..14 missing
    for i in range(10):
        log.append([_record(i, T0)])
    log.roll(30)  # offsets 25..29 missing
    log.append([_record(1015, T0)])
    assert [s.base_offset for s in log.segments] == [0, 15, 30]
    p = plan(_meta(log), COMPACT, T0)
    assert (p.first_dirty_offset, p.first_uncleanable_offset) == (0, 30)
    assert p.cleanable_bytes == log.segments[0].size + log.segments[1].size
    # A checkpoint inside a gap is valid (<= LEO); its floor segment counts as both, as in Kafka.
    p = plan(_meta(log, checkpoint=27), COMPACT, T0)
    assert not p.checkpoint_invalid
    assert p.first_dirty_offset == 27
    assert p.clean_bytes == log.segments[0].size + log.segments[1].size
    assert p.cleanable_bytes == log.segments[1].size


# --- LogCleanerManagerTest: checkpoint corrections (50, 51) ---------------------------------------
def test_dirty_offset_reset_if_larger_than_end_offset(tmp_path: Path) -> None:
    log = _make_log(tmp_path)
    _fill(log, 3, T0)
    p = plan(_meta(log, checkpoint=200), COMPACT, T0)
    assert p.first_dirty_offset == 0
    assert p.checkpoint_invalid


def test_dirty_offset_reset_if_smaller_than_start_offset(tmp_path: Path) -> None:
    log = _make_log(tmp_path)
    _fill(log, 3, T0)
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {TP: 10})
    p = plan(_meta(log, checkpoint=0), COMPACT, T0)
    assert p.first_dirty_offset == 10
    assert p.checkpoint_invalid


def test_checkpoint_updated_for_invalid_offset() -> None:
    """testCleanableOffsetsNeedsCheckpointReset: only out-of-log checkpoints force a rewrite."""
    log = _hand_log([10, 10, 10], start=10)
    assert cleanable_offsets(log, COMPACT, T0) == (10, 20, False)  # absent: log start, no rewrite
    for checkpoint, invalid in ((15, False), (10, False), (30, False), (9, True), (31, True)):
        offsets = cleanable_offsets(LogMeta(TP, log.segments, 10, 30, 30, checkpoint), COMPACT, T0)
        assert offsets.force_update_checkpoint is invalid, checkpoint
        assert offsets.first_dirty_offset == (10 if invalid else checkpoint)


def test_checkpoint_invalid_is_reported_even_when_nothing_to_clean() -> None:
    log = _hand_log([10, 10], start=15, checkpoint=12)
    p = plan(log, COMPACT, T0)
    assert p.checkpoint_invalid
    assert p.first_dirty_offset == 15
    assert not p.is_cleanable


def test_log_start_offset_larger_than_active_segment_base_offset(tmp_path: Path) -> None:
    log = _make_log(tmp_path)
    for i in range(3):
        log.append([_record(i, T0)])
    assert len(log.segments) == 1
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {TP: 2})
    p = plan(_meta(log, checkpoint=0), TopicCleanerConfig(compact=True), T0)
    assert p.first_dirty_offset == 2
    assert p.cleanable_bytes == 0
    assert not p.is_cleanable
    assert rank([p]) == []


def test_checkpoint_ahead_of_active_base_in_single_segment_log(tmp_path: Path) -> None:
    log = _make_log(tmp_path)
    for i in range(3):
        log.append([_record(i, T0)])
    config = TopicCleanerConfig(
        compact=True, min_cleanable_dirty_ratio=0.0, max_compaction_lag_ms=1
    )
    p = plan(_meta(log, checkpoint=2), config, T0 + HOUR)
    assert (p.first_dirty_offset, p.first_uncleanable_offset) == (2, 0)
    assert p.total_bytes == log.active_segment.size  # the active segment counts as clean
    assert p.cleanable_bytes == 0
    assert p.compaction_delay_ms == 0  # no inactive segment
    assert not p.is_cleanable


def test_empty_log_has_nothing_to_clean(tmp_path: Path) -> None:
    p = plan(_meta(_make_log(tmp_path)), TopicCleanerConfig(min_cleanable_dirty_ratio=0.0), T0)
    assert (p.total_bytes, p.dirty_ratio, p.must_clean_ratio) == (0, 0.0, 0.0)
    assert not p.is_cleanable


# --- LogCleanerManagerTest: cleanableOffsets (56) -------------------------------------------------
def test_cleanable_offsets_for_none(tmp_path: Path) -> None:
    """Bounded by the last stable offset = the high watermark (50), then rounded down."""
    log = _make_log(tmp_path)
    _fill(log, 8, T0)
    assert log.log_end_offset > 50
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {TP: 50})
    meta = _meta(log, checkpoint=0)
    assert meta.last_stable_offset == log.high_watermark == 50
    offsets = cleanable_offsets(meta, COMPACT, T0)
    assert offsets == (0, 50, False)
    p = plan(meta, COMPACT, T0)
    holder = log.segments[log.segment_for(50)]
    assert p.first_uncleanable_offset == holder.base_offset
    below = [s.size for s in log.segments if s.base_offset < holder.base_offset]
    assert p.cleanable_bytes == sum(below)


def test_cleanable_offsets_active_segment(tmp_path: Path) -> None:
    log = _make_log(tmp_path)
    _fill(log, 8, T0)
    p = plan(_meta(log, checkpoint=0), COMPACT, T0)
    assert p.first_dirty_offset == 0
    assert p.first_uncleanable_dirty_offset == log.active_segment.base_offset
    assert p.first_uncleanable_offset == log.active_segment.base_offset
    assert p.dirty_ratio == 1.0


def test_cleanable_offsets_for_time(tmp_path: Path) -> None:
    """min.compaction.lag.ms: only the block older than the lag is cleanable."""
    config = TopicCleanerConfig(compact=True, min_compaction_lag_ms=HOUR)
    clock = Clock()
    log = _make_log(tmp_path, clock=clock)
    _fill(log, 4, T0)
    active_at_t0 = log.active_segment.base_offset
    clock.now = t1 = T0 + HOUR + 1
    _fill(log, 8, t1)
    offsets = cleanable_offsets(_meta(log, checkpoint=0), config, t1)
    assert offsets == (0, active_at_t0, False)


def test_cleanable_offsets_for_short_time(tmp_path: Path) -> None:
    config = TopicCleanerConfig(compact=True, min_compaction_lag_ms=HOUR)
    log = _make_log(tmp_path)
    _fill(log, 8, T0)
    offsets = cleanable_offsets(_meta(log, checkpoint=0), config, T0 + HOUR + 1)
    assert offsets == (0, log.active_segment.base_offset, False)


def test_min_lag_search_starts_at_the_first_dirty_segment() -> None:
    """A recent segment before the first dirty one does not stop cleaning (3.3 item 3)."""
    log = _hand_log([10, 10, 10, 10], largests=[T0, T0 - 2 * HOUR, T0, 0], checkpoint=10)
    config = TopicCleanerConfig(compact=True, min_compaction_lag_ms=HOUR)
    assert cleanable_offsets(log, config, T0) == (10, 20, False)
    at_edge = _hand_log([10, 10, 10], largests=[T0 - HOUR, T0 - HOUR + 1, 0])
    assert cleanable_offsets(at_edge, config, T0).first_uncleanable_dirty_offset == 10


def test_undecided_transactional_data_not_cleanable(tmp_path: Path) -> None:
    """An open transaction bounds the range; its ABORT plus the HW open it, then min lag."""
    config = TopicCleanerConfig(compact=True, min_compaction_lag_ms=HOUR)
    clock = Clock()
    log = _make_log(tmp_path, clock=clock)
    for records, sequence in (
        ([Record(0, T0, b"1", b"a"), Record(0, T0, b"2", b"b")], 0),
        ([Record(0, T0, b"3", b"c")], 2),
    ):
        log.append(
            records, producer_id=15, producer_epoch=0, base_sequence=sequence, transactional=True
        )
    log.roll()
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {TP: 3})

    clock.now += HOUR + 1  # the lag has passed, but the data is undecided
    assert cleanable_offsets(_meta(log, 0), config, clock.now) == (0, 0, False)
    p = plan(_meta(log, 0), config, clock.now)
    assert (p.first_uncleanable_offset, p.cleanable_bytes) == (0, 0)

    log.append_marker(
        commit=False, producer_id=15, producer_epoch=0, timestamp=clock.now, coordinator_epoch=15
    )
    log.roll()
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {TP: 4})
    assert cleanable_offsets(_meta(log, 0), config, clock.now) == (0, 3, False)

    clock.now += HOUR + 1  # now the marker's segment is past the lag too
    assert cleanable_offsets(_meta(log, 0), config, clock.now) == (0, 4, False)


def test_log_meta_from_log_matches_the_segments(tmp_path: Path) -> None:
    clock = Clock()
    log = _make_log(tmp_path, segment_bytes=300, clock=clock)
    for i in range(12):
        log.append([_record(i, T0 + i)])
    write_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT, {TP: 4})
    meta = LogMeta.from_log(log, cleaner_checkpoint(log))
    assert meta.checkpoint == 4
    assert len(meta.segments) == len(log.segments) > 2
    assert meta.log_end_offset == log.log_end_offset == 12
    assert meta.last_stable_offset == 12
    assert meta.size_bytes == sum(s.size for s in log.segments)
    for m, s in zip(meta.segments, log.segments, strict=True):
        assert (m.base_offset, m.size_bytes) == (s.base_offset, s.size)
        assert m.first_batch_timestamp == T0 + s.base_offset
    for m, nxt in zip(meta.segments, meta.segments[1:], strict=False):
        assert m.largest_timestamp == T0 + nxt.base_offset - 1
        assert m.next_offset == nxt.base_offset
    assert LogMeta.from_log(log, None, last_stable_offset=99).last_stable_offset == 12  # capped


def test_log_meta_rejects_bad_segment_lists() -> None:
    with pytest.raises(ValueError, match="active segment"):
        LogMeta(TP, (), 0, 0, 0)
    seg = SegmentMeta(0, 1, 0, None, 1)
    with pytest.raises(ValueError, match="must rise"):
        LogMeta(TP, (seg, seg), 0, 1, 1)


# --- KIP-354 --------------------------------------------------------------------------------------
def test_max_compaction_delay_from_first_batch_timestamps() -> None:
    config = TopicCleanerConfig(compact=True, max_compaction_lag_ms=HOUR)
    firsts: list[int | None] = [T0 - 5 * HOUR, T0 - 3 * HOUR, T0 - 2 * HOUR, T0 - 9 * HOUR]
    log = _hand_log([10, 10, 10, 10], firsts=firsts)
    assert max_compaction_delay(log, 0, config, T0) == 4 * HOUR  # the active segment is ignored
    assert max_compaction_delay(log, 15, config, T0) == 2 * HOUR  # from the first dirty segment
    assert max_compaction_delay(log, 30, config, T0) == 0  # only the active segment is dirty
    assert max_compaction_delay(log, 0, config, T0 - 4 * HOUR) == 0
    assert max_compaction_delay(log, 0, COMPACT, T0) == 0  # default: no maximum lag


def test_max_compaction_delay_ignores_unknown_timestamps() -> None:
    config = TopicCleanerConfig(compact=True, max_compaction_lag_ms=1)
    log = _hand_log([10, 10, 10, 10], firsts=[None, -1, 0, None])
    assert max_compaction_delay(log, 0, config, T0) == 0
    log = _hand_log([10, 10, 10], firsts=[None, 5, None])
    assert max_compaction_delay(log, 0, config, 10) == 4


def test_need_compaction_now_makes_a_clean_log_eligible(tmp_path: Path) -> None:
    """testMaxLogCompactionLag-like: ratio 1.0 never passes, the max lag does."""
    config = TopicCleanerConfig(
        compact=True, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=6 * HOUR
    )
    log = _make_log(tmp_path)
    _fill(log, 4, T0)
    meta = _meta(log)
    early = plan(meta, config, T0 + 6 * HOUR)
    assert early.dirty_ratio == 1.0
    assert (early.compaction_delay_ms, early.need_compaction_now) == (0, False)
    assert not early.is_cleanable
    late = plan(meta, config, T0 + 6 * HOUR + 7)
    assert (late.compaction_delay_ms, late.need_compaction_now, late.is_cleanable) == (
        7,
        True,
        True,
    )
    assert late.must_clean_ratio == 1.0


def test_need_compaction_now_without_cleanable_bytes_is_not_cleanable() -> None:
    """Overdue, but everything dirty is beyond the last stable offset: Kafka skips the log."""
    config = TopicCleanerConfig(compact=True, max_compaction_lag_ms=HOUR)
    log = _hand_log([10, 10, 10], firsts=[T0 - 3 * HOUR] * 3, lso=0)
    p = plan(log, config, T0)
    assert p.need_compaction_now
    assert (p.cleanable_bytes, p.must_clean_bytes) == (0, 0)
    assert not p.is_cleanable


def test_dirty_ratio_threshold_is_strict() -> None:
    log = _hand_log([50, 50, 7], checkpoint=10)
    assert plan(log, TopicCleanerConfig(compact=True), T0).dirty_ratio == 0.5
    assert not plan(log, TopicCleanerConfig(compact=True), T0).is_cleanable
    assert plan(
        log, TopicCleanerConfig(compact=True, min_cleanable_dirty_ratio=0.49), T0
    ).is_cleanable


def test_must_clean_ratio_counts_overdue_cleanable_segments() -> None:
    """Segments 0 and 2 hold records past the max lag; 1 is exactly at it; 3 is within min lag."""
    config = TopicCleanerConfig(
        compact=True, min_compaction_lag_ms=HOUR, max_compaction_lag_ms=HOUR
    )
    log = _hand_log(
        [100, 200, 300, 400, 50],
        firsts=[T0 - 5 * HOUR, T0 - HOUR, T0 - 4 * HOUR, T0 - 3 * HOUR, T0 - 9 * HOUR],
        largests=[T0 - 5 * HOUR, T0 - HOUR, T0 - 2 * HOUR, T0, T0],
    )
    p = plan(log, config, T0)
    assert p.first_uncleanable_offset == 30
    assert (p.clean_bytes, p.cleanable_bytes, p.must_clean_bytes) == (0, 600, 400)
    assert p.must_clean_ratio == 400 / 600
    assert p.compaction_delay_ms == 4 * HOUR  # segment 0; the active segment's 9 h do not count

    def at(checkpoint: int) -> CleaningPlan:
        return plan(LogMeta(TP, log.segments, 0, 50, 50, checkpoint), config, T0)

    clean_prefix = at(20)
    assert (clean_prefix.clean_bytes, clean_prefix.cleanable_bytes) == (300, 300)
    assert clean_prefix.must_clean_ratio == 300 / 600
    assert clean_prefix.compaction_delay_ms == 3 * HOUR
    # Min lag wins over max lag: segment 3 is overdue but may not be cleaned yet
    # (docs/kafka-format.md §4.4).
    held = at(30)
    assert (held.compaction_delay_ms, held.cleanable_bytes, held.must_clean_bytes) == (
        2 * HOUR,
        0,
        0,
    )
    assert held.need_compaction_now
    assert not held.is_cleanable


# --- the deadline ---------------------------------------------------------------------------------
def test_deadline_is_the_oldest_dirty_first_batch_plus_the_max_lag() -> None:
    """Segments from the one holding the first dirty offset count, the active one included; a
    segment wholly below the checkpoint does not, however old."""
    config = TopicCleanerConfig(compact=True, max_compaction_lag_ms=HOUR)
    firsts: list[int | None] = [T0 - 9 * HOUR, T0 - 2 * HOUR, T0 - 3 * HOUR, T0 - 5 * HOUR]
    log = _hand_log([10, 10, 10, 10], firsts=firsts)
    assert compaction_deadline_ms(log, 0, config) == T0 - 8 * HOUR
    assert compaction_deadline_ms(log, 15, config) == T0 - 4 * HOUR  # the active segment's
    assert compaction_deadline_ms(log, 10, config) == T0 - 4 * HOUR
    assert compaction_deadline_ms(log, 30, config) == T0 - 4 * HOUR  # only the active is dirty
    assert compaction_deadline_ms(log, 40, config) is None  # nothing dirty
    # the plan carries it; unlike the delay, it does not depend on when the plan is made
    early, late = plan(log, config, T0 - 20 * HOUR), plan(log, config, T0)
    assert early.deadline_ms == late.deadline_ms == T0 - 8 * HOUR
    assert late.summary()["deadline_ms"] == T0 - 8 * HOUR


def test_deadline_skips_unknown_timestamps_and_needs_a_max_lag() -> None:
    config = TopicCleanerConfig(compact=True, max_compaction_lag_ms=HOUR)
    log = _hand_log([10, 10, 10, 10], firsts=[None, -1, 0, T0])
    assert compaction_deadline_ms(log, 0, config) == T0 + HOUR
    assert compaction_deadline_ms(_hand_log([10, 10], firsts=[None, 0]), 0, config) is None
    # Kafka's default lag (Long.MAX_VALUE) is no deadline, not an overflowed one
    assert compaction_deadline_ms(log, 0, COMPACT) is None
    assert plan(log, COMPACT, T0).deadline_ms is None
    # an empty active segment has no first batch
    assert compaction_deadline_ms(_hand_log([10, 0], firsts=[T0, None]), 10, config) is None


def test_deadline_of_a_real_log_follows_its_records_timestamps(tmp_path: Path) -> None:
    """Through ``LogMeta.from_log``: the first batch's timestamp of each segment, as stored."""
    config = TopicCleanerConfig(compact=True, max_compaction_lag_ms=HOUR)
    log = _make_log(tmp_path)
    _fill(log, 3, T0)
    log.roll()
    log.append([_record(99, T0 + HOUR)])  # the first batch of the new active segment
    meta = _meta(log, checkpoint=log.active_segment.base_offset)
    assert compaction_deadline_ms(meta, meta.checkpoint or 0, config) == T0 + 2 * HOUR
    assert plan(_meta(log), config, T0).deadline_ms == T0 + HOUR


# --- ranking --------------------------------------------------------------------------------------
def _plan(
    name: str, dirty: int, clean: int = 100, must: int = 0, delay: int = 0, ratio: float = 0.5
) -> CleaningPlan:
    return CleaningPlan(
        topic_partition=TopicPartition(name, 0),
        first_dirty_offset=0,
        checkpoint_invalid=False,
        first_uncleanable_dirty_offset=0,
        first_uncleanable_offset=0,
        clean_bytes=clean,
        cleanable_bytes=dirty,
        compaction_delay_ms=delay or (1 if must else 0),
        must_clean_bytes=must,
        min_cleanable_dirty_ratio=ratio,
    )


def test_rank_puts_overdue_logs_first_by_must_clean_ratio() -> None:
    plans = [
        _plan("dirtiest", dirty=900),
        _plan("overdue-little", dirty=10, must=10, delay=HOUR),
        _plan("too-clean", dirty=50),
        _plan("overdue-much", dirty=100, must=100),
        _plan("dirty", dirty=300),
        _plan("delayed-not-overdue", dirty=150, delay=5),  # its overdue bytes are not cleanable
    ]
    order = [p.topic_partition.topic for p in rank(plans)]
    assert order == ["overdue-much", "overdue-little", "dirtiest", "dirty", "delayed-not-overdue"]


def test_rank_breaks_ties_deterministically() -> None:
    plans = [_plan("b", dirty=300), _plan("a", dirty=300), _plan("c", dirty=300, delay=9)]
    assert [p.topic_partition.topic for p in rank(plans)] == ["c", "a", "b"]
    assert rank([]) == []


def test_plan_summary_has_the_derived_figures() -> None:
    s = _plan("x", dirty=300, must=100).summary()
    assert s["partition"] == "x-0"
    assert s["dirty_ratio"] == 0.75
    assert s["must_clean_ratio"] == 0.25
    assert s["need_compaction_now"] is True


@given(
    sizes=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    data=st.data(),
)
def test_plan_invariants(sizes: list[int], data: st.DataObject) -> None:
    n = len(sizes)
    firsts = data.draw(st.lists(st.one_of(st.none(), st.integers(-1, 100)), min_size=n, max_size=n))
    largests = data.draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    leo = n * 10
    log = _hand_log(
        sizes,
        firsts=firsts,
        largests=largests,
        lso=data.draw(st.integers(0, leo)),
        start=data.draw(st.integers(0, leo)),
        checkpoint=data.draw(st.one_of(st.none(), st.integers(-5, leo + 5))),
    )
    min_lag = data.draw(st.integers(0, 50))
    config = TopicCleanerConfig(
        compact=True,
        min_compaction_lag_ms=min_lag,
        max_compaction_lag_ms=data.draw(st.integers(max(min_lag, 1), 60)),
        min_cleanable_dirty_ratio=data.draw(st.floats(0, 1)),
    )
    now = data.draw(st.integers(0, 120))
    p = plan(log, config, now)
    assert log.log_start_offset <= p.first_dirty_offset <= log.log_end_offset
    assert p.first_dirty_offset <= p.first_uncleanable_dirty_offset
    assert p.first_uncleanable_offset in {s.base_offset for s in log.segments}
    assert p.first_uncleanable_offset <= min(
        log.active_segment.base_offset, max(p.first_dirty_offset, log.last_stable_offset)
    )
    assert 0 <= p.must_clean_bytes <= p.cleanable_bytes <= log.size_bytes
    assert p.total_bytes <= log.size_bytes + max(sizes)  # one segment may count twice
    assert 0.0 <= p.must_clean_ratio <= p.dirty_ratio <= 1.0
    if p.must_clean_bytes:
        assert p.need_compaction_now
        assert p.is_cleanable
        # what KIP-354 calls overdue is past its deadline (so the scheduler takes it as due)
        assert p.deadline_ms is not None
        assert p.deadline_ms < now
    assert (p in rank([p])) is p.is_cleanable


# --- topic config validation ----------------------------------------------------------------------
def test_topic_config_has_kafkas_defaults() -> None:
    c = TopicCleanerConfig()
    assert (c.compact, c.delete, c.cleanup_policy) == (False, True, "delete")
    assert c.min_cleanable_dirty_ratio == 0.5
    assert (c.min_compaction_lag_ms, c.max_compaction_lag_ms) == (0, LONG_MAX)
    assert c.delete_retention_ms == 86_400_000
    assert TopicCleanerConfig(compact=True).compact_and_delete


@pytest.mark.parametrize(
    ("settings", "setting", "rule"),
    [
        ({"min_cleanable_dirty_ratio": 1.5}, "min.cleanable.dirty.ratio", "between 0 and 1"),
        ({"min_cleanable_dirty_ratio": -0.1}, "min.cleanable.dirty.ratio", "between 0 and 1"),
        ({"min_cleanable_dirty_ratio": float("nan")}, "min.cleanable.dirty.ratio", "between"),
        ({"min_compaction_lag_ms": -1}, "min.compaction.lag.ms", "at least 0"),
        ({"max_compaction_lag_ms": 0}, "max.compaction.lag.ms", "at least 1"),
        ({"delete_retention_ms": -1}, "delete.retention.ms", "at least 0"),
        ({"delete_retention_ms": 2**63}, "delete.retention.ms", "Java long"),
        ({"max_compaction_lag_ms": 1.5}, "max.compaction.lag.ms", "integer"),
        (
            {"min_compaction_lag_ms": 2 * HOUR, "max_compaction_lag_ms": HOUR},
            "min.compaction.lag.ms",
            r"must not exceed max\.compaction\.lag\.ms",
        ),
    ],
)
def test_topic_config_validation_names_the_kafka_setting(
    settings: dict[str, object], setting: str, rule: str
) -> None:
    with pytest.raises(InvalidTopicConfigError, match=rule) as info:
        TopicCleanerConfig(**settings)  # type: ignore[arg-type]
    assert info.value.setting == setting
    assert str(info.value).startswith(setting)


def test_min_lag_equal_to_max_lag_is_allowed() -> None:
    assert TopicCleanerConfig(min_compaction_lag_ms=HOUR, max_compaction_lag_ms=HOUR)


def test_cleanup_policy_parsing() -> None:
    assert parse_cleanup_policy("compact") == (True, False)
    assert parse_cleanup_policy(" Compact , DELETE ") == (True, True)
    assert parse_cleanup_policy("") == (False, False)
    with pytest.raises(InvalidTopicConfigError, match="'compacted' is not one of") as info:
        parse_cleanup_policy("compacted")
    assert info.value.setting == "cleanup.policy"


def test_from_kafka_settings() -> None:
    c = TopicCleanerConfig.from_kafka(
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "min.compaction.lag.ms": "1000",
            "max.compaction.lag.ms": 5000,
            "delete.retention.ms": " 0 ",
            "segment.bytes": "1024",  # not the planner's: ignored
        }
    )
    assert c == TopicCleanerConfig(
        compact=True,
        delete=True,
        min_cleanable_dirty_ratio=0.1,
        min_compaction_lag_ms=1000,
        max_compaction_lag_ms=5000,
        delete_retention_ms=0,
    )
    with pytest.raises(InvalidTopicConfigError, match=r"max\.compaction\.lag\.ms = 'soon'"):
        TopicCleanerConfig.from_kafka({"max.compaction.lag.ms": "soon"})
    with pytest.raises(InvalidTopicConfigError, match=r"min\.cleanable\.dirty\.ratio"):
        TopicCleanerConfig.from_kafka({"min.cleanable.dirty.ratio": "half"})
    with pytest.raises(InvalidTopicConfigError, match=r"min\.compaction\.lag\.ms"):
        TopicCleanerConfig.from_kafka({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
