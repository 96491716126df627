"""CleanerStats and PreCleanStats: Kafka's arithmetic (reference 5), merging, the summary dict."""

from __future__ import annotations

import json
import math

import pytest

from cleanerd.compaction.stats import MB, CleanerStats, PreCleanStats
from cleanerd.storage.topic_partition import TopicPartition


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
    stats.add(tombstones_removed=5, markers_removed=1, batches_copied=3, batches_rebuilt=2)
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
    assert stats.tombstones_removed == 5
    assert stats.markers_removed == 1
    assert stats.batches_copied == 3
    assert stats.batches_rebuilt == 2
    assert stats.mb_per_s == 2.0  # 8 MB / 4 s
    assert stats.map_mb_per_s == 2.0  # 2 MB / 1 s
    assert stats.clean_mb_per_s == pytest.approx(8 / 3)  # Kafka: all bytes read / clean time
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
        stats.mb_per_s,
        stats.map_mb_per_s,
        stats.clean_mb_per_s,
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
    # "%.1f MB of log processed in %.1f seconds (%.1f MB/sec)"
    assert (summary["mb_processed"], summary["seconds"], summary["mb_per_s"]) == (8.0, 4.0, 2.0)
    # "Indexed %.1f MB in %.1f seconds (%.1f Mb/sec, %.1f%% of total time)"
    assert summary["indexed_mb"] == 2.0
    assert summary["index_seconds"] == 1.0
    assert summary["index_mb_per_s"] == 2.0
    assert summary["index_time_percent"] == 25.0
    assert summary["buffer_utilization_percent"] == 25.0
    # "Cleaned %.1f MB in %.1f seconds (%.1f Mb/sec, %.1f%% of total time)"
    assert summary["cleaned_mb"] == 8.0
    assert summary["clean_seconds"] == 3.0
    assert summary["clean_mb_per_s"] == 2.667
    assert summary["clean_time_percent"] == 75.0
    # "Start size: %.1f MB (%d messages)" / "End size: ..."
    assert (summary["start_size_mb"], summary["start_messages"]) == (8.0, 8000)
    assert (summary["end_size_mb"], summary["end_messages"]) == (2.0, 1000)
    # "%.1f%% size reduction (%.1f%% fewer messages)"
    assert summary["size_reduction_percent"] == 75.0
    assert summary["fewer_messages_percent"] == 87.5
    # raw counts for machines
    assert summary["bytes_read"] == 8 * MB
    assert summary["invalid_messages_read"] == 3
    assert summary["tombstones_removed"] == 5
    assert summary["passes"] == 1
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
