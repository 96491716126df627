"""PartitionLog: append, roll, reopen, read, indexes, recovery of a torn tail, producer state."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.format import Compression, CorruptRecordError, Record
from cleanerd.format._builder import build_batch, finish_crc
from cleanerd.storage import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogSegment,
    PartitionLog,
    StorageError,
    TopicPartition,
    _segment_list as segment_list,
    iter_chunks,
    parse_partition_dir_name,
    write_offset_checkpoint,
)
from cleanerd.topics import LogConfig


def _rec(i: int, ts: int | None = None, value: bytes | None = b"value") -> Record:
    return Record(0, 1_000 + i if ts is None else ts, f"k{i % 13}".encode(), value)


def _all(log: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]


def _check_indexes(log: PartitionLog) -> None:
    """Every index entry points at a batch start whose batch holds the entry's offset."""
    for seg in log.segments:
        seg.sanity_check()
        scan = seg.scan()
        starts = {int(b[0]): (int(b[2]), int(b[3])) for b in scan.batches}
        for i in range(seg.offset_index.entries):
            offset, position = seg.offset_index.entry(i)
            assert position in starts, (seg, offset, position)
            base, last = starts[position]
            assert base <= offset <= last
        last_ts = -1
        for i in range(seg.time_index.entries):
            ts, offset = seg.time_index.entry(i)
            assert ts > last_ts
            assert seg.base_offset <= offset < seg.next_offset()
            last_ts = ts


@pytest.mark.slow
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.tuples(
            st.integers(1, 12),
            st.sampled_from(list(Compression)),
            st.integers(0, 300),
        ),
        min_size=1,
        max_size=30,
    ),
    segment_bytes=st.integers(200, 3000),
    interval=st.integers(0, 500),
)
def test_append_roll_reopen_keeps_every_record(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[int, Compression, int]],
    segment_bytes: int,
    interval: int,
) -> None:
    directory = tmp_path_factory.mktemp("p") / "topic-0"
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
    log = PartitionLog.create(directory, config, clock=lambda: 0)
    expected = []
    n = 0
    for count, codec, value_len in batches:
        recs = [_rec(n + j, value=b"x" * value_len if (n + j) % 5 else None) for j in range(count)]
        info = log.append(recs, compression=codec)
        assert info.first_offset == n
        assert info.last_offset == n + count - 1
        expected += [(n + j, r.timestamp, r.key, r.value) for j, r in enumerate(recs)]
        n += count
    assert _all(log) == expected
    log.close()
    reopened = PartitionLog(directory, config)
    assert _all(reopened) == expected
    assert reopened.log_end_offset == n
    assert not reopened.report.rebuilt_indexes
    _check_indexes(reopened)
    sizes = [s.size for s in reopened.segments[:-1]]
    assert all(size <= max(segment_bytes, 1) or size > 0 for size in sizes)
    # appending after reopen continues the offsets
    assert reopened.append([_rec(n)]).first_offset == n


def test_roll_on_segment_bytes(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(segment_bytes=500))
    for i in range(20):
        log.append([_rec(i, value=b"x" * 60)])
    assert len(log.segments) > 3
    for seg in log.segments[:-1]:
        assert seg.size <= 500
        assert seg.next_offset() == log.segments[log.segments.index(seg) + 1].base_offset


def test_roll_on_segment_ms_by_record_timestamps(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(segment_ms=1000))
    log.append([_rec(0, ts=10_000)])
    log.append([_rec(1, ts=10_900)])
    assert len(log.segments) == 1
    log.append([_rec(2, ts=11_001)])  # 1001 ms after the first batch
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_compacted_topic_rolls_by_max_compaction_lag(tmp_path: Path) -> None:
    cfg = LogConfig(segment_ms=10**9, compact=True, max_compaction_lag_ms=500)
    assert cfg.max_segment_ms == 500
    log = PartitionLog.create(tmp_path / "t-0", cfg)
    log.append([_rec(0, ts=0)])
    log.append([_rec(1, ts=501)])
    assert len(log.segments) == 2
    plain = LogConfig(segment_ms=10**9, max_compaction_lag_ms=500)
    assert plain.max_segment_ms == 10**9


def test_roll_jitter_is_within_bounds_and_deterministic(tmp_path: Path) -> None:
    cfg = LogConfig(segment_ms=1000, segment_jitter_ms=400)
    log = PartitionLog.create(tmp_path / "t-0", cfg)
    jitters = {log._jitter_ms(b) for b in range(50)}
    assert all(0 <= j < 400 for j in jitters)
    assert len(jitters) > 5
    assert log._jitter_ms(7) == log._jitter_ms(7)


def test_roll_when_index_is_full(tmp_path: Path) -> None:
    # 3 time-index slots: full at 2 entries (the last slot is reserved for the roll)
    cfg = LogConfig(segment_index_bytes=36, index_interval_bytes=0)
    log = PartitionLog.create(tmp_path / "t-0", cfg)
    for i in range(12):
        log.append([_rec(i)])
    assert len(log.segments) > 2
    _check_indexes(log)
    for seg in log.segments[:-1]:
        assert seg.time_index.entries <= 3


def test_roll_on_relative_offset_overflow(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    log.append([_rec(0)])
    batch = bytearray()
    # a batch whose offsets span past base + 2^31 - 1 cannot join segment 0
    data = build_batch([Record(0, 5, b"k", b"v"), Record(2**31 - 1, 5, b"k", b"w")])
    batch += data
    info = log.append_batches(bytes(batch))
    assert info.first_offset == 1
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_torn_tail_is_cut_before_the_next_append(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    for i in range(5):
        log.append([_rec(i)])
    log.close()
    seg_path = log.active_segment.log_path
    whole = seg_path.read_bytes()
    seg_path.write_bytes(whole + whole[:30])  # a writer crashed mid-append
    reopened = PartitionLog(log.directory)
    assert reopened.log_end_offset == 5
    assert reopened.append([_rec(5)]).first_offset == 5
    assert reopened.report.truncated_tail_bytes == 30
    assert [r[0] for r in _all(reopened)] == [0, 1, 2, 3, 4, 5]


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = PartitionLog.create(tmp_path / "t-0", cfg)
    for i in range(30):
        log.append([_rec(i)])
    expected = _all(log)
    log.close()
    first, second = log.segments[0], log.segments[1]
    first.offset_index.path.unlink()
    second.offset_index.path.write_bytes(b"\x00" * 5)  # not a multiple of 8
    reopened = PartitionLog(log.directory, cfg)
    assert len(reopened.report.rebuilt_indexes) == 2
    assert _all(reopened) == expected
    _check_indexes(reopened)
    assert first.offset_index.path.stat().st_size % 8 == 0


def test_read_from_an_offset_uses_the_index(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=64)
    log = PartitionLog.create(tmp_path / "t-0", cfg)
    for i in range(200):
        log.append([_rec(i)])
    for start in (0, 1, 77, 150, 199):
        assert [r.offset for r in log.records(start)] == list(range(start, 200))
    batches = list(log.read(123))
    assert batches[0].header.base_offset == 123


def test_corrupt_segment_is_reported_with_file_and_position(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    for i in range(10):
        log.append([_rec(i)])
    log.close()
    path = log.active_segment.log_path
    data = bytearray(path.read_bytes())
    batch_size = len(data) // 10
    data[batch_size * 4 + 40] ^= 0xFF  # inside batch 4: CRC mismatch
    path.write_bytes(bytes(data))
    reopened = PartitionLog(log.directory)
    got: list[int] = []

    def consume() -> None:
        got.extend(r.offset for r in reopened.records())

    with pytest.raises(CorruptRecordError) as err:
        consume()
    assert got == [0, 1, 2, 3]
    assert err.value.position == batch_size * 4
    assert str(path) in str(err.value)
    assert err.value.last_good_offset == 3


def test_high_watermark_and_log_start_from_checkpoints(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    for i in range(10):
        log.append([_rec(i)])
    assert log.high_watermark == 10
    tp = TopicPartition("t", 0)
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {tp: 7})
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {tp: 3})
    assert log.high_watermark == 7
    assert log.log_start_offset == 3
    assert log.last_stable_offset() == 7


def test_producer_state_and_last_stable_offset(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    log.append([_rec(0)])  # plain
    log.append([_rec(1), _rec(2)], producer_id=5, producer_epoch=1, base_sequence=0)
    log.append([_rec(3)], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    log.append([_rec(4)], producer_id=9, producer_epoch=0, base_sequence=1, transactional=True)
    state = log.producer_state()
    assert state.first_unstable_offset == 3
    assert log.last_stable_offset() == 3
    assert state.producers[5].last_sequence == 1
    assert state.producers[5].last_data_offset == 2
    log.append_marker(
        commit=False, producer_id=9, producer_epoch=0, timestamp=5, coordinator_epoch=4
    )
    state = log.producer_state()
    assert state.first_unstable_offset is None
    assert log.last_stable_offset() == log.log_end_offset == 6
    assert [
        (a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in state.aborted
    ] == [(9, 3, 5, 6)]
    assert state.producers[9].coordinator_epoch == 4


def test_only_the_active_segment_may_end_inside_a_batch(tmp_path: Path) -> None:
    """The producer-state walk stops quietly before a cut batch at the end of the active
    segment (a writer's append in flight); in a closed segment the same cut is damage, named."""

    def txn_then_cut(directory: Path, *, roll: bool) -> tuple[Path, int]:
        log = PartitionLog.create(directory)
        log.append([_rec(0)], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
        log.append_marker(
            commit=True, producer_id=9, producer_epoch=0, timestamp=5, coordinator_epoch=0
        )
        seg = log.active_segment
        marker_at = int(seg.scan().batches[-1, 0])
        if roll:
            log.roll()
            log.append([_rec(2)])
        log.close()
        seg.log_path.write_bytes(seg.log_path.read_bytes()[: marker_at + 20])
        return seg.log_path, marker_at

    txn_then_cut(tmp_path / "active-0", roll=False)
    active = PartitionLog(tmp_path / "active-0")
    assert active.last_stable_offset() == 0  # the COMMIT is not there yet: open from 0
    active.close()

    cut, marker_at = txn_then_cut(tmp_path / "closed-0", roll=True)
    closed = PartitionLog(tmp_path / "closed-0")
    with pytest.raises(CorruptRecordError) as caught:
        closed.last_stable_offset()
    assert caught.value.path == str(cut)
    assert caught.value.position == marker_at
    closed.close()


def test_concurrent_appends_under_the_writer_lock(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(segment_bytes=1000))

    def writer(w: int) -> None:
        for i in range(50):
            log.append([Record(0, i, f"w{w}".encode(), str(i).encode())])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    offsets = [r[0] for r in _all(log)]
    assert offsets == list(range(200))
    _check_indexes(log)


def test_leader_epoch_checkpoint_follows_new_epochs(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    log.append([_rec(0)])
    log.append([_rec(1)], leader_epoch=3)
    log.append([_rec(2)])
    text = (log.directory / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n0 0\n3 1\n"
    assert [b.header.partition_leader_epoch for b in log.read()] == [0, 3, 3]


def test_opening_bad_directories_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        PartitionLog(tmp_path / "missing-0")
    (tmp_path / "notapartition").mkdir()
    with pytest.raises(StorageError, match="not a partition directory"):
        PartitionLog(tmp_path / "notapartition")


def test_segment_create_refuses_to_overwrite(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    with pytest.raises(StorageError, match="already exists"):
        LogSegment.create(log.directory, 0, log.config)


def test_record_level_corruption_names_the_last_good_offset(tmp_path: Path) -> None:
    """A batch whose CRC is right but whose records do not decode (count too high)."""
    log = PartitionLog.create(tmp_path / "t-0")
    for i in range(4):
        log.append([_rec(i)])
    log.close()
    path = log.active_segment.log_path
    data = bytearray(path.read_bytes())
    size = len(data) // 4
    pos = size * 2
    data[pos + 57 : pos + 61] = (2).to_bytes(4, "big")  # records count 2, one record present
    finish_crc(memoryview(data)[pos : pos + size])  # type: ignore[arg-type]
    path.write_bytes(bytes(data))
    got: list[int] = []

    def consume() -> None:
        got.extend(r.offset for r in PartitionLog(log.directory).records())

    with pytest.raises(CorruptRecordError, match="record count") as err:
        consume()
    assert got == [0, 1]
    assert err.value.position == pos
    assert err.value.last_good_offset == 1


# --- beside a running daemon ---------------------------------------------------------------


def test_a_writer_beside_the_daemon_leaves_its_cleaning_in_progress(tmp_path: Path) -> None:
    """A ``.cleaned`` file is written outside the writer lock (only its swap takes it): a writer
    opening the partition meanwhile must not roll it back under the cleaner."""
    directory = tmp_path / "t-0"
    log = PartitionLog.create(directory)
    log.append([_rec(i) for i in range(5)])
    log.roll()
    log.append([_rec(5)])
    log.close()
    in_progress = directory / "00000000000000000000.log.cleaned"
    in_progress.write_bytes(b"")  # the cleaner has started its output
    beside = PartitionLog(directory, recover=False)
    beside.append([_rec(6)])
    assert beside.report.recovery.rolled_back == []
    beside.close()
    assert in_progress.exists()
    assert [r[0] for r in _all(PartitionLog(directory, recover=False))] == list(range(7))
    owner = PartitionLog(directory)  # the daemon's own open (no cleaning running) recovers
    assert owner.report.recovery.rolled_back == [in_progress.name]
    owner.close()
    assert not in_progress.exists()


def test_a_new_partition_dir_appears_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the first segment is made, the partition dir does not exist under its name (a
    daemon's survey lists the log dir at any moment); the staging dir is skipped by the survey,
    and it is gone afterwards."""
    directory = tmp_path / "t-0"
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {TopicPartition("t", 0): 42})
    real_create = LogSegment.create
    seen: list[tuple[bool, Path]] = []

    def spy(where: Path, base: int, config: LogConfig, *, created_ms: int = 0) -> LogSegment:
        seen.append((directory.exists(), Path(where)))
        return real_create(where, base, config, created_ms=created_ms)

    monkeypatch.setattr(LogSegment, "create", spy)
    log = PartitionLog.create(directory)
    monkeypatch.undo()
    assert len(seen) == 1
    existed, staging = seen[0]
    assert not existed
    assert staging.parent == tmp_path
    assert parse_partition_dir_name(staging.name) is None  # the survey skips it
    assert staging.name.startswith("t-0.")
    assert staging.name.endswith("-delete")  # a broker deletes one a crash left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOG_START_OFFSET_CHECKPOINT, "t-0"]
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000042.index",
        "00000000000000000042.log",
        "00000000000000000042.timeindex",
    ]
    log.append([_rec(0)])
    assert log.log_end_offset == 43
    log.close()


def test_a_partition_dir_made_meanwhile_by_another_writer_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    real_create = LogSegment.create

    def racing(where: Path, base: int, config: LogConfig, *, created_ms: int = 0) -> LogSegment:
        if Path(where).parent == tmp_path and Path(where) != directory:  # our staging dir
            monkeypatch.setattr(LogSegment, "create", real_create)
            other = PartitionLog.create(directory)  # the other writer wins the race
            other.append([_rec(0, value=b"theirs")])
            other.close()
        return real_create(where, base, config, created_ms=created_ms)

    monkeypatch.setattr(LogSegment, "create", racing)
    log = PartitionLog.create(directory)
    assert [r[3] for r in _all(log)] == [b"theirs"]
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-0"]


def test_the_offsets_check_takes_the_last_batches_the_producer_walk_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer-state walk checked every closed segment from byte 0, so the offsets check
    across segments takes each one's last batch from it instead of walking it again; a segment
    changed since is walked again. A last batch reaching the next segment's base offset (the
    base offset is not CRC-covered) is refused either way, at the same file and position."""
    walked: list[str] = []
    real = iter_chunks

    def counting(arr: object, **kw: object) -> object:
        walked.append(str(kw["path"]))
        return real(arr, **kw)  # type: ignore[arg-type]

    def damaged_log(name: str) -> tuple[PartitionLog, Path, int]:
        log = PartitionLog.create(tmp_path / name, LogConfig(segment_bytes=300))
        for i in range(30):
            log.append([_rec(i)])
        assert len(log.segments) > 3
        target, following = log.segments[1], log.segments[2]
        last_at = int(target.scan().batches[-1, 0])
        log.close()
        raw = bytearray(target.log_path.read_bytes())
        raw[last_at : last_at + 8] = following.base_offset.to_bytes(8, "big")
        target.log_path.write_bytes(bytes(raw))
        return PartitionLog(tmp_path / name), target.log_path, last_at

    monkeypatch.setattr(segment_list, "iter_chunks", counting)
    log = PartitionLog.create(tmp_path / "whole-0", LogConfig(segment_bytes=300))
    for i in range(30):
        log.append([_rec(i)])
    log.begin_checks()
    log.last_stable_offset()
    log.check_offsets_across()
    assert walked == []
    changed = log.segments[1].log_path
    os.utime(changed, ns=(1, 1))
    log.check_offsets_across()
    assert walked == [str(changed)]
    log.close()

    errors = []
    for name, walk_first in (("fresh-0", False), ("walked-0", True)):
        log, target, last_at = damaged_log(name)
        walked.clear()
        if walk_first:
            log.begin_checks()
            log.last_stable_offset()
        with pytest.raises(CorruptRecordError) as caught:
            log.check_offsets_across()
        assert (str(target) in walked) is not walk_first
        assert caught.value.path == str(target)
        assert caught.value.position == last_at
        errors.append(str(caught.value).replace(name, "P"))
        log.close()
    assert errors[0] == errors[1]
