"""CleanerStats and PreCleanStats: Kafka's arithmetic (kafka-format.md §4.15), merging, summary."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from cleanerd.compaction import Cleaner, OffsetMap, plan_log
from cleanerd.compaction._stats import CleanerStats, PreCleanStats
from cleanerd.format import Record
from cleanerd.storage import PartitionLog, TopicPartition
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig

MB = 1024 * 1024  # Kafka's MB in its log message


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def one_pass(clock: FakeClock, map_s: float = 1.0, clean_s: float = 3.0) -> CleanerStats:
    """A pass that indexes 2 MB in ``map_s``, then reads 8 MB and writes 2 MB in ``clean_s``."""
    stats = CleanerStats(clock=clock)
    stats.index_bytes_read(2 * MB)
    stats.index_messages_read(2000)
    clock.now += map_s
    stats.index_done()
    stats.buffer_utilization = 0.25
    stats.read_messages(8000, 8 * MB)
    stats.recopy_messages(1000, 2 * MB)
    stats.invalid_message()
    stats.invalid_message(2)
    stats.add(
        tombstones_expired=2,
        tombstones_superseded=3,
        markers_removed=1,
        batches_copied=3,
        batches_rebuilt=2,
    )
    clock.now += clean_s
    stats.all_done()
    return stats


def test_times_come_from_the_injected_clock() -> None:
    clock = FakeClock()
    stats = one_pass(clock)
    assert stats.start_time == 1000.0
    assert stats.map_complete_time == 1001.0
    assert stats.end_time == 1004.0
    assert stats.elapsed_s == 4.0
    assert stats.map_elapsed_s == 1.0
    assert stats.clean_elapsed_s == 3.0
    assert stats.passes == 1


def test_elapsed_runs_until_done() -> None:
    clock = FakeClock()
    stats = CleanerStats(clock=clock)
    clock.now += 2.0
    assert stats.elapsed_s == 2.0
    assert stats.map_elapsed_s == 2.0  # map not complete: all time so far is map time
    assert stats.clean_elapsed_s == 0.0
    stats.index_done()
    clock.now += 1.0
    assert stats.clean_elapsed_s == 1.0


def test_counts_and_rates() -> None:
    stats = one_pass(FakeClock())
    assert (stats.bytes_read, stats.messages_read) == (8 * MB, 8000)
    assert (stats.bytes_written, stats.messages_written) == (2 * MB, 1000)
    assert (stats.map_bytes_read, stats.map_messages_read) == (2 * MB, 2000)
    assert stats.invalid_messages_read == 3
    assert (stats.tombstones_expired, stats.tombstones_superseded) == (2, 3)
    assert stats.tombstones_removed == 5
    assert stats.markers_removed == 1
    assert stats.batches_copied == 3
    assert stats.batches_rebuilt == 2
    assert stats.bytes_per_s == 2 * MB  # 8 MB / 4 s
    assert stats.map_bytes_per_s == 2 * MB  # 2 MB / 1 s
    assert stats.clean_bytes_per_s == pytest.approx(8 * MB / 3)  # Kafka: all bytes / clean time
    assert stats.size_reduction_ratio == 0.75
    assert stats.records_reduction_ratio == 0.875
    assert stats.recopy_ratio == 0.25
    assert stats.records_removed == 7000


def test_empty_cleaning_divides_by_nothing() -> None:
    clock = FakeClock()
    stats = CleanerStats(clock=clock)
    stats.index_done()
    stats.all_done()
    assert stats.elapsed_s == 0.0
    for value in (
        stats.bytes_per_s,
        stats.map_bytes_per_s,
        stats.clean_bytes_per_s,
        stats.size_reduction_ratio,
        stats.records_reduction_ratio,
        stats.recopy_ratio,
    ):
        assert value == 0.0
    summary = stats.summary("t-0", 0, 0)
    assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in summary.values())
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert summary["index_time_percent"] == 0.0
    assert summary["size_reduction_percent"] == 0.0


def test_merge_adds_counts_and_durations() -> None:
    clock = FakeClock()
    first = one_pass(clock, map_s=1.0, clean_s=3.0)
    clock.now += 100.0  # a gap between passes is not cleaning time
    second = one_pass(clock, map_s=2.0, clean_s=2.0)
    second.buffer_utilization = 0.9
    total = first.merge(second)
    assert total.passes == 2
    assert total.bytes_read == 16 * MB
    assert total.messages_written == 2000
    assert total.map_messages_read == 4000
    assert total.invalid_messages_read == 6
    assert (total.tombstones_expired, total.tombstones_superseded) == (4, 6)
    assert total.tombstones_removed == 10
    assert total.batches_copied == 6
    assert total.buffer_utilization == 0.9  # the max, like max-buffer-utilization-percent
    assert total.start_time == first.start_time
    assert total.elapsed_s == 8.0
    assert total.map_elapsed_s == 3.0
    assert total.clean_elapsed_s == 5.0
    assert total.size_reduction_ratio == 0.75
    # merge is pure
    assert first.passes == 1
    assert second.bytes_read == 8 * MB


def test_total_of_many_and_of_none() -> None:
    clock = FakeClock()
    passes = [one_pass(clock) for _ in range(3)]
    total = CleanerStats.total(passes)
    assert total.passes == 3
    assert total.elapsed_s == 12.0
    assert total.bytes_written == 6 * MB
    empty = CleanerStats.total([], clock=clock)
    assert empty.passes == 0
    assert empty.elapsed_s == 0.0
    clock.now += 50.0
    assert empty.elapsed_s == 0.0  # finished: does not run on


def test_summary_has_kafkas_log_message_fields() -> None:
    stats = one_pass(FakeClock())
    summary = stats.summary(TopicPartition("orders", 3), 120, 5000)
    assert summary["partition"] == "orders-3"
    assert (summary["dirty_section_start"], summary["dirty_section_end"]) == (120, 5000)
    # "%.1f MB of log processed in %.1f seconds (%.1f MB/sec)", in bytes
    assert (summary["bytes_read"], summary["seconds"], summary["bytes_per_s"]) == (
        8 * MB,
        4.0,
        2 * MB,
    )
    # "Indexed %.1f MB in %.1f seconds (%.1f Mb/sec, %.1f%% of total time)"
    assert summary["map_bytes_read"] == 2 * MB
    assert summary["index_seconds"] == 1.0
    assert summary["index_bytes_per_s"] == 2 * MB
    assert summary["index_time_percent"] == 25.0
    assert summary["buffer_utilization_percent"] == 25.0
    # "Cleaned %.1f MB in %.1f seconds (%.1f Mb/sec, %.1f%% of total time)": all bytes read
    assert summary["clean_seconds"] == 3.0
    assert summary["clean_bytes_per_s"] == round(8 * MB / 3)
    assert summary["clean_time_percent"] == 75.0
    # "Start size: %.1f MB (%d messages)" / "End size: ..."
    assert summary["start_messages"] == 8000
    assert (summary["bytes_written"], summary["end_messages"]) == (2 * MB, 1000)
    # "%.1f%% size reduction (%.1f%% fewer messages)"
    assert summary["size_reduction_percent"] == 75.0
    assert summary["fewer_messages_percent"] == 87.5
    # raw counts for machines
    assert summary["bytes_read"] == 8 * MB
    assert summary["invalid_messages_read"] == 3
    assert summary["tombstones_removed"] == 5
    assert (summary["tombstones_expired"], summary["tombstones_superseded"]) == (2, 3)
    assert summary["passes"] == 1
    # bytes and seconds only: no MB figure anywhere
    assert not [name for name in summary if "mb" in name.split("_")]
    assert summary["recopy_ratio"] == 0.25


def test_summary_round_trips_through_json() -> None:
    summary = one_pass(FakeClock()).summary(TopicPartition("t", 0), 0, 10)
    text = json.dumps(summary, allow_nan=False)
    assert json.loads(text) == summary
    assert all(isinstance(k, str) and k == k.lower() and " " not in k for k in summary)


def test_default_clock_is_real() -> None:
    stats = CleanerStats()
    assert math.isfinite(stats.start_time)
    stats.all_done()
    assert stats.elapsed_s >= 0.0


def test_pre_clean_stats() -> None:
    pre = PreCleanStats()
    for delay in (0, 1500, 0, 42_000, 7):
        pre.update_max_compaction_delay(delay)
    pre.record_cleanable_partitions(4)
    assert pre.max_compaction_delay_ms == 42_000
    assert pre.max_compaction_delay_s == 42.0
    assert pre.delayed_partitions == 3
    assert pre.cleanable_partitions == 4
    assert pre.summary() == {
        "cleanable_partitions": 4,
        "delayed_partitions": 3,
        "max_compaction_delay_ms": 42_000,
    }
    assert PreCleanStats().summary()["max_compaction_delay_ms"] == 0


# --- tombstones: expired (delete.retention.ms) and superseded (a newer record won), apart -------
DAY = 86_400_000


def _tombstone_log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.create(tmp_path / "t-0", LogConfig(), clock=lambda: 0)


def _record(key: int, value: bytes | None) -> Record:
    return Record(0, 1, str(key).encode(), value)


def _clean(log: PartitionLog, now: int) -> CleanerStats:
    config = TopicCleanerConfig(compact=True, delete=False, delete_retention_ms=DAY)
    plan = dataclasses.replace(
        plan_log(log, config, now)[1], first_dirty_offset=0
    )  # the whole log each time, as a sweep
    result = Cleaner(OffsetMap(1 << 20)).clean(log, plan, config, StrategyConfig(), now)
    return result.stats


def _data(log: PartitionLog) -> dict[int, bytes | None]:
    return {r.offset: r.value for b in log.read(0) if not b.header.is_control for r in b.records()}


def test_expired_and_superseded_tombstones_are_counted_apart(tmp_path: Path) -> None:
    log = _tombstone_log(tmp_path)
    try:
        log.append([_record(1, None)])  # 0: key 1 deleted, nothing newer: expires later
        log.append([_record(2, None)])  # 1: key 2 deleted ...
        log.append([_record(2, b"back")])  # 2: ... and written again: 1 is superseded
        log.roll()
        now = 10 * DAY
        first = _clean(log, now)
        # superseded at once; key 1's tombstone is kept and gets its delete horizon (now + DAY)
        assert (first.tombstones_superseded, first.tombstones_expired) == (1, 0)
        assert sorted(_data(log)) == [0, 2]

        log.append([_record(3, None)])  # 3: key 3 deleted ...
        log.append([_record(3, b"again")])  # 4: ... and written again
        log.roll()
        second = _clean(log, now + DAY)  # at key 1's horizon: both kinds in one pass
        assert (second.tombstones_superseded, second.tombstones_expired) == (1, 1)
        assert second.tombstones_removed == 2
        assert sorted(_data(log)) == [2, 4]
        summary = second.summary("t-0", 0, log.log_end_offset)
        assert (summary["tombstones_expired"], summary["tombstones_superseded"]) == (1, 1)
        assert summary["tombstones_removed"] == 2
    finally:
        log.close()
