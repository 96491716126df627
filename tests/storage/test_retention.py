"""``delete_old_segments``: Kafka's retention by time, size and log start offset, the high
watermark and active segment rules, and crash safety (checkpoint first, ``.deleted`` recovery)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from cleanerd.format import Record
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import (
    DELETED_SUFFIX,
    SNAPSHOT_SUFFIX,
    LogSegment,
    PartitionLog,
    TopicPartition,
    segment_file,
)
from cleanerd.storage._checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from cleanerd.storage._retention import RetentionResult, delete_old_segments
from cleanerd.topics import LogConfig, RetentionConfig

TP = TopicPartition("t", 0)
NO_LIMIT = RetentionConfig(retention_ms=-1, retention_bytes=-1)


def make_log(tmp_path: Path, timestamps: Sequence[Sequence[int]]) -> PartitionLog:
    """One segment per inner sequence (one record per timestamp); the last one stays active."""
    log = PartitionLog.create(tmp_path / "t-0")
    for i, group in enumerate(timestamps):
        if i:
            log.roll()
        for ts in group:
            log.append([Record(0, ts, b"k%d" % ts, b"v" * 50)])
    return log


def offsets(log: PartitionLog) -> list[int]:
    return [r.offset for r in log.records()]


def checkpointed_start(tmp_path: Path) -> int | None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT
    return read_offset_checkpoint(path).get(TP) if path.exists() else None


def assert_consistent(log_dir: Path) -> None:
    report = verify_partition(log_dir)
    assert report.ok, [p.message for p in report.problems]


def test_time_retention_deletes_segments_whose_largest_timestamp_expired(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[900, 1_000], [2_000], [3_000], [9_000]])
    sizes = [s.size for s in log.segments]
    # now - 3_000 == retention.ms is not "older than": Kafka deletes only when strictly greater
    result = delete_old_segments(log, RetentionConfig(retention_ms=5_000), now_ms=8_000)
    assert result == RetentionResult(2, sizes[0] + sizes[1], 3)
    assert [s.base_offset for s in log.segments] == [3, 4]
    assert offsets(log) == [3, 4]
    assert checkpointed_start(tmp_path) == 3
    assert sorted(p.name for p in log.directory.glob("*.log")) == [
        "00000000000000000003.log",
        "00000000000000000004.log",
    ]
    reopened = PartitionLog(log.directory)
    assert reopened.log_start_offset == 3
    assert offsets(reopened) == [3, 4]
    assert_consistent(log.directory)


def test_size_retention_deletes_whole_oldest_segments_that_fit_the_excess(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1], [2], [3], [4], [5]])
    seg_size = log.segments[0].size
    assert {s.size for s in log.segments} == {seg_size}
    total = 5 * seg_size
    # excess 2 segments + 1 byte: the third segment does not fit what is left
    result = delete_old_segments(
        log, RetentionConfig(retention_ms=-1, retention_bytes=total - 2 * seg_size - 1), 10
    )
    assert result == RetentionResult(2, 2 * seg_size, 2)
    assert offsets(log) == [2, 3, 4]
    # below the limit: nothing more
    again = delete_old_segments(log, RetentionConfig(retention_ms=-1, retention_bytes=total), 10)
    assert again == RetentionResult(0, 0, 2)
    assert_consistent(log.directory)


def test_size_then_time_in_kafkas_order(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1_000], [2_000], [3_000], [9_000], [9_500]])
    seg_size = log.segments[0].size
    retention = RetentionConfig(retention_ms=6_500, retention_bytes=4 * seg_size)
    result = delete_old_segments(log, retention, now_ms=10_000)
    # size removes offset 0 (one segment over), time then removes 1 and 2 (older than 3_500)
    assert result == RetentionResult(3, 3 * seg_size, 3)
    assert offsets(log) == [3, 4]
    assert_consistent(log.directory)


def test_nothing_to_delete_leaves_the_log_alone(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1_000], [2_000]])
    before = sorted(p.name for p in log.directory.iterdir())
    assert delete_old_segments(log, RetentionConfig(), now_ms=2_500) == RetentionResult(0, 0, 0)
    assert delete_old_segments(log, NO_LIMIT, now_ms=10**12) == RetentionResult(0, 0, 0)
    assert sorted(p.name for p in log.directory.iterdir()) == before
    assert checkpointed_start(tmp_path) is None


def test_an_expired_active_segment_is_rolled_first_never_deleted(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1_000], [2_000, 2_001]])
    old_active = log.active_segment
    result = delete_old_segments(log, RetentionConfig(retention_ms=10), now_ms=100_000)
    assert result.segments_deleted == 2
    assert result.log_start_offset == 3 == log.log_end_offset
    assert [s.base_offset for s in log.segments] == [3]
    assert log.active_segment is not old_active
    assert log.active_segment.size == 0
    assert offsets(log) == []
    assert log.append([Record(0, 100_000, b"k", b"v")]).first_offset == 3
    reopened = PartitionLog(log.directory)
    assert reopened.log_start_offset == 3
    assert offsets(reopened) == [3]
    assert_consistent(log.directory)


def test_an_empty_active_segment_is_kept(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1_000], [2_000]])
    log.roll()
    result = delete_old_segments(log, RetentionConfig(retention_ms=10), now_ms=100_000)
    assert result == RetentionResult(2, result.bytes_deleted, 2)
    assert [(s.base_offset, s.size) for s in log.segments] == [(2, 0)]
    again = delete_old_segments(log, RetentionConfig(retention_ms=0, retention_bytes=0), 10**9)
    assert again == RetentionResult(0, 0, 2)


def test_segments_reaching_past_the_high_watermark_stay(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1], [2], [3], [4]])
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {TP: 2})
    # segment 0 ends at 1 <= hw, segment 1 ends at 2 <= hw, segment 2 ends at 3 > hw
    result = delete_old_segments(log, RetentionConfig(retention_ms=0), now_ms=10**9)
    assert result.segments_deleted == 2
    assert offsets(log) == [2, 3]
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {TP: 3})
    assert delete_old_segments(log, RetentionConfig(retention_ms=0), 10**9).segments_deleted == 1
    # the active segment would need hw >= log end offset (4)
    assert [s.base_offset for s in log.segments] == [3]


def test_segments_below_a_moved_log_start_offset_go_whatever_the_policy(tmp_path: Path) -> None:
    log = make_log(tmp_path, [[1, 2], [3, 4], [5, 6], [7]])
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {TP: 5})  # DeleteRecords
    result = delete_old_segments(log, NO_LIMIT, now_ms=0)
    # segments [0, 2) and [2, 4) lie wholly below 5; [4, 6) holds it and stays
    assert result == RetentionResult(2, result.bytes_deleted, 5)
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert offsets(log) == [5, 6]
    assert checkpointed_start(tmp_path) == 5
    assert_consistent(log.directory)


def test_checkpoint_is_written_before_any_file_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path, [[1_000], [2_000], [9_000]])

    def crash(self: LogSegment, suffix: str) -> None:
        raise OSError("simulated crash before the first rename")

    monkeypatch.setattr(LogSegment, "change_suffix", crash)
    with pytest.raises(OSError, match="simulated crash"):
        delete_old_segments(log, RetentionConfig(retention_ms=5_000), now_ms=8_000)
    monkeypatch.undo()
    assert checkpointed_start(tmp_path) == 2
    assert len(list(log.directory.glob("*.log"))) == 3  # nothing removed yet

    reopened = PartitionLog(log.directory)
    assert reopened.log_start_offset == 2
    assert offsets(reopened) == [2]
    assert_consistent(log.directory)
    # the next run finishes the job through the log start offset rule alone
    stale = reopened.segments[0].size + reopened.segments[1].size
    assert delete_old_segments(reopened, NO_LIMIT, now_ms=0) == RetentionResult(2, stale, 2)
    assert [s.base_offset for s in reopened.segments] == [2]
    assert_consistent(log.directory)


def test_deleted_leftovers_of_a_crash_are_removed_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path, [[1_000], [2_000], [3_000], [9_000]])
    snapshot = segment_file(log.directory, 1, SNAPSHOT_SUFFIX)
    snapshot.write_bytes(b"producer state")
    real = LogSegment.change_suffix
    calls: list[int] = []

    def crash_on_second(self: LogSegment, suffix: str) -> None:
        calls.append(self.base_offset)
        if len(calls) == 2:
            raise OSError("simulated crash between renames")
        real(self, suffix)

    monkeypatch.setattr(LogSegment, "change_suffix", crash_on_second)
    with pytest.raises(OSError, match="simulated crash"):
        delete_old_segments(log, RetentionConfig(retention_ms=5_000), now_ms=8_500)
    monkeypatch.undo()
    leftovers = sorted(p.name for p in log.directory.glob(f"*{DELETED_SUFFIX}"))
    assert leftovers
    assert all(name.startswith("00000000000000000000.") for name in leftovers)

    reopened = PartitionLog(log.directory)
    assert reopened.report.recovery.deleted == leftovers
    assert not list(log.directory.glob(f"*{DELETED_SUFFIX}"))
    assert reopened.log_start_offset == 3
    assert offsets(reopened) == [3]
    assert_consistent(log.directory)
    result = delete_old_segments(reopened, NO_LIMIT, now_ms=0)
    assert (result.segments_deleted, result.log_start_offset) == (2, 3)
    assert not snapshot.exists()
    assert [s.base_offset for s in reopened.segments] == [3]
    assert_consistent(log.directory)


def test_leader_epochs_and_producer_snapshots_follow_the_new_start(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    log.append([Record(0, 1, b"a", b"1")], leader_epoch=1)
    log.append([Record(0, 2, b"b", b"2")], leader_epoch=2)
    log.roll()
    log.append([Record(0, 1_000, b"c", b"3")], leader_epoch=2)
    log.roll()
    log.append([Record(0, 1_000, b"d", b"4")], leader_epoch=5)
    for base in (0, 2, 3):
        segment_file(log.directory, base, SNAPSHOT_SUFFIX).write_bytes(b"x")
    result = delete_old_segments(log, RetentionConfig(retention_ms=10), now_ms=100)
    assert (result.segments_deleted, result.log_start_offset) == (1, 2)
    # Kafka's truncateFromStart: epoch 2 (started at 1) now starts at the log start
    epochs = read_leader_epoch_checkpoint(log.directory / "leader-epoch-checkpoint")
    assert epochs == [(2, 2), (5, 3)]
    assert log.leader_epochs.entries == epochs
    assert [b.header.partition_leader_epoch for b in log.read()] == [2, 5]
    assert sorted(p.name for p in log.directory.glob("*.snapshot")) == [
        "00000000000000000002.snapshot",
        "00000000000000000003.snapshot",
    ]


def test_another_log_object_sees_the_deletion_on_its_next_append(tmp_path: Path) -> None:
    writer = make_log(tmp_path, [[1_000], [2_000], [9_000]])
    daemon = PartitionLog(writer.directory)
    doomed = writer.segments[0].size + writer.segments[1].size
    result = delete_old_segments(daemon, RetentionConfig(retention_ms=5_000), 8_000)
    assert result == RetentionResult(2, doomed, 2)
    info = writer.append([Record(0, 9_001, b"k", b"v")])
    assert info.first_offset == 3
    assert [s.base_offset for s in writer.segments] == [2]
    assert all(s.log_path.exists() for s in writer.segments)
    assert offsets(writer) == [2, 3]
    assert_consistent(writer.directory)


def test_batches_past_the_last_time_index_entry_count(tmp_path: Path) -> None:
    """Another process's view: the time index lags the last batches; retention must not."""
    config = LogConfig(index_interval_bytes=200)
    writer = PartitionLog.create(tmp_path / "t-0", config)
    for ts in (1_000, 1_000, 1_000, 9_000):
        writer.append([Record(0, ts, b"k", b"v" * 50)])
    daemon = PartitionLog(writer.directory, config)
    assert daemon.active_segment.time_index.last_entry[0] == 1_000  # the lag being tested
    assert delete_old_segments(daemon, RetentionConfig(retention_ms=5_000), 8_000) == (
        RetentionResult(0, 0, 0)
    )
    assert offsets(daemon) == [0, 1, 2, 3]
