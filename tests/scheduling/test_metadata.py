"""The daemon's metadata cache: same ``LogMeta`` as opening the log, without rescans."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cleanerd.compaction import LogMeta, _segment_walk as log_meta, compact_partition
from cleanerd.format import Record
from cleanerd.scheduling import _metadata as metadata
from cleanerd.scheduling._metadata import LogDirCheckpoints, MetadataCache, PartitionMeta
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    PartitionLog,
    TopicPartition,
    write_offset_checkpoint,
)
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig
from tests.support.legacy import legacy_set

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
PID, EPOCH = 7, 0


def _records(n: int, ts: int, start: int = 0) -> list[Record]:
    return [Record(0, ts, f"k{(start + i) % 5:04d}".encode(), b"v" * 20) for i in range(n)]


def _log(log_dir: Path, segments: int = 3, per_segment: int = 4) -> PartitionLog:
    """``segments`` rolled segments of ``per_segment`` one-record batches, then 2 in the active."""
    log = PartitionLog.create(log_dir / TP.dir_name, LogConfig(), clock=lambda: T0)
    for s in range(segments):
        for i in range(per_segment):
            log.append(_records(1, T0 + s * 1000 + i, s * per_segment + i))
        log.roll()
    log.append(_records(1, T0 + 10_000))
    log.append(_records(1, T0 + 10_001))
    return log


def _read(cache: MetadataCache, log_dir: Path, tp: TopicPartition = TP) -> PartitionMeta:
    cache.begin_scan()
    meta = cache.read(log_dir / tp.dir_name, tp, cache.checkpoints(log_dir))
    cache.end_scan()
    return meta


def _same_as_opening(meta: PartitionMeta, log: PartitionLog) -> None:
    """What ``LogMeta.from_log`` says after opening the log, the active segment's largest
    timestamp aside (ours is the newest batch's, the open segment's is kept in memory)."""
    assert meta.log is not None
    expected = LogMeta.from_log(log, meta.log.checkpoint)
    assert meta.log.segments[:-1] == expected.segments[:-1]
    ours, theirs = meta.log.active_segment, expected.active_segment
    assert (ours.base_offset, ours.size_bytes, ours.next_offset) == (
        theirs.base_offset,
        theirs.size_bytes,
        theirs.next_offset,
    )
    assert ours.first_batch_timestamp == theirs.first_batch_timestamp
    assert meta.log.log_start_offset == expected.log_start_offset
    assert meta.log.log_end_offset == expected.log_end_offset
    assert meta.log.last_stable_offset == expected.last_stable_offset


def test_second_scan_reuses_unchanged_segments(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    first = _read(cache, tmp_path)
    assert first.error is None
    assert cache.walks == 4
    _same_as_opening(first, log)
    assert first.segment_records == (4, 4, 4, 2)
    second = _read(cache, tmp_path)
    assert cache.walks == 4
    assert second == first


def test_no_header_walk_for_unchanged_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _log(tmp_path)
    calls: list[Path] = []

    def counting(base: int, path: Path, **kw: object) -> log_meta.WalkResult:
        calls.append(path)
        return log_meta.walk_segment(base, path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(metadata, "walk_segment", counting)
    cache = MetadataCache()
    _read(cache, tmp_path)
    assert len(calls) == 4
    _read(cache, tmp_path)
    assert len(calls) == 4


def test_grown_active_segment_is_walked_from_where_it_stopped(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    _read(cache, tmp_path)
    log.append(_records(3, T0 + 20_000))
    meta = _read(cache, tmp_path)
    assert cache.walks == 5  # the active segment only
    _same_as_opening(meta, log)
    assert meta.segment_records == (4, 4, 4, 5)
    assert meta.log is not None
    assert meta.log.active_segment.first_batch_timestamp == T0 + 10_000


def test_rewritten_segment_is_walked_again(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    before = _read(cache, tmp_path)
    # a swap puts a new file (new inode) where the first segment was: here, its first 2 batches
    first = log.segments[0].log_path
    data = first.read_bytes()
    replacement = first.with_name(first.name + ".new")
    second_batch_end = _batch_end(data, 2)
    replacement.write_bytes(data[:second_batch_end])
    os.replace(replacement, first)
    after = _read(cache, tmp_path)
    assert cache.walks == 5
    assert after.segment_records[0] == 2
    assert after.log is not None
    assert after.log.segments[0].size_bytes == second_batch_end
    assert after.fingerprint != before.fingerprint


def _batch_end(data: bytes, batches: int) -> int:
    pos = 0
    for _ in range(batches):
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    return pos


def test_appends_keep_the_fingerprint_a_roll_changes_it(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    before = _read(cache, tmp_path).fingerprint
    log.append(_records(1, T0 + 30_000))
    assert _read(cache, tmp_path).fingerprint == before
    log.roll()
    assert _read(cache, tmp_path).fingerprint != before


def test_lso_is_the_high_watermark_without_transactions(tmp_path: Path) -> None:
    _log(tmp_path)
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert meta.log is not None
    assert meta.log.last_stable_offset == meta.log.log_end_offset == 14
    assert not meta.transactional
    assert cache.lso_walks == 0
    write_offset_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {TP: 9})
    meta = _read(cache, tmp_path)
    assert meta.log is not None
    assert meta.log.last_stable_offset == 9
    assert cache.lso_walks == 0


def test_lso_stops_at_an_open_transaction(tmp_path: Path) -> None:
    log = _log(tmp_path)
    open_at = log.append(
        _records(2, T0 + 11_000), producer_id=PID, producer_epoch=EPOCH, transactional=True
    ).first_offset
    log.append(_records(1, T0 + 11_500))
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert meta.transactional
    assert meta.log is not None
    assert meta.log.last_stable_offset == open_at
    assert cache.lso_walks == 1
    _same_as_opening(meta, log)
    _read(cache, tmp_path)
    assert cache.lso_walks == 1  # nothing changed: the cached LSO
    log.append_marker(commit=True, producer_id=PID, producer_epoch=EPOCH, timestamp=T0 + 12_000)
    meta = _read(cache, tmp_path)
    assert meta.log is not None
    assert meta.log.last_stable_offset == meta.log.log_end_offset
    assert cache.lso_walks == 2
    _same_as_opening(meta, log)


def test_checkpoints_are_read_once_while_unchanged(tmp_path: Path) -> None:
    _log(tmp_path)
    write_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT, {TP: 8})
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {TP: 4})
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert meta.log is not None
    assert (meta.log.checkpoint, meta.log.log_start_offset) == (8, 4)
    assert cache.checkpoint_reads == 2
    _read(cache, tmp_path)
    assert cache.checkpoint_reads == 2
    write_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT, {TP: 12})
    meta = _read(cache, tmp_path)
    assert meta.log is not None
    assert meta.log.checkpoint == 12
    assert cache.checkpoint_reads == 3


def test_unreadable_checkpoint_is_an_error_not_an_exception(tmp_path: Path) -> None:
    _log(tmp_path)
    (tmp_path / CLEANER_OFFSET_CHECKPOINT).write_text("0\n1\nnot a line\n")
    cache = MetadataCache()
    checkpoints = cache.checkpoints(tmp_path)
    assert checkpoints.error is not None
    assert CLEANER_OFFSET_CHECKPOINT in checkpoints.error
    meta = cache.read(tmp_path / TP.dir_name, TP, checkpoints)
    assert meta.error == checkpoints.error
    assert meta.log is None


def test_corrupt_segment_is_an_error_for_its_partition_only(tmp_path: Path) -> None:
    log = _log(tmp_path)
    good_tp = TopicPartition("good", 0)
    good = PartitionLog.create(tmp_path / good_tp.dir_name, LogConfig(), clock=lambda: T0)
    good.append(_records(2, T0))
    path = log.segments[1].log_path
    data = bytearray(path.read_bytes())
    data[_batch_end(bytes(data), 1) + 16] = 9  # the second batch's magic byte
    path.write_bytes(bytes(data))
    cache = MetadataCache()
    bad = _read(cache, tmp_path)
    assert bad.error is not None
    assert bad.log is not None  # planned up to the bad batch, so its bytes still show
    assert bad.log.segments[1].next_offset == 5
    assert path.name in bad.error
    assert "magic" in bad.error
    ok = _read(cache, tmp_path, good_tp)
    assert ok.error is None
    assert ok.log is not None
    assert ok.log.log_end_offset == 2


def test_torn_tail_of_the_active_segment_is_a_note(tmp_path: Path) -> None:
    log = _log(tmp_path)
    active = log.active_segment.log_path
    batch = active.read_bytes()[: _batch_end(active.read_bytes(), 1)]
    with open(active, "ab") as f:  # a writer in the middle of an append: a header, no records
        f.write(batch[:65])
    meta = _read(MetadataCache(), tmp_path)
    assert meta.error is None
    assert meta.log is not None
    assert meta.log.log_end_offset == 14
    assert len(meta.notes) == 1


def test_records_between_counts_the_dirty_segments(tmp_path: Path) -> None:
    _log(tmp_path)
    meta = _read(MetadataCache(), tmp_path)
    assert meta.records_between(0, 12) == 12
    assert meta.records_between(5, 12) == 8  # from the segment holding 5
    assert meta.records_between(8, 8) == 0


def test_not_walked_when_not_compacted(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    meta = cache.read(tmp_path / TP.dir_name, TP, LogDirCheckpoints(), walk=False)
    assert cache.walks == 0
    assert meta.log is None
    assert meta.size_bytes == sum(s.size for s in log.segments)


def test_missing_partition_dir_is_an_error(tmp_path: Path) -> None:
    meta = MetadataCache().read(tmp_path / "gone-0", TopicPartition("gone", 0), LogDirCheckpoints())
    assert meta.error is not None
    assert "FileNotFoundError" in meta.error


def test_torn_tail_left_in_a_rolled_segment_is_an_error(tmp_path: Path) -> None:
    log = _log(tmp_path)
    active = log.active_segment.log_path
    cache = MetadataCache()
    batch = active.read_bytes()[: _batch_end(active.read_bytes(), 1)]
    with open(active, "ab") as f:
        f.write(batch[:65])
    assert _read(cache, tmp_path).error is None
    log.segments[-1].log_path.with_name(f"{20:020d}.log").touch()  # another segment after it
    meta = _read(cache, tmp_path)
    assert meta.error is not None
    assert active.name in meta.error


# --- listings: a dir that did not change is not listed again ------------------------------------


@pytest.fixture
def settled_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans an hour after now: every dir's last change is older than ``RACY_NS``, so an
    unchanged stamp is trusted."""
    later = time.time_ns() + 3600 * 10**9
    monkeypatch.setattr(time, "time_ns", lambda: later)


@pytest.mark.usefixtures("settled_dirs")
def test_unchanged_dir_is_not_listed_again_and_keeps_its_meta(tmp_path: Path) -> None:
    _log(tmp_path)
    cache = MetadataCache()
    first = _read(cache, tmp_path)
    assert (cache.listings, cache.walks) == (1, 4)
    second = _read(cache, tmp_path)
    assert (cache.listings, cache.walks) == (1, 4)
    assert second is first  # nothing re-parsed, nothing made


@pytest.mark.usefixtures("settled_dirs")
def test_append_to_the_active_segment_is_seen_without_a_listing(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    _read(cache, tmp_path)
    log.append(_records(3, T0 + 20_000))
    meta = _read(cache, tmp_path)
    assert cache.listings == 1
    assert cache.walks == 5  # the active segment, from where it stopped
    assert meta.segment_records == (4, 4, 4, 5)
    _same_as_opening(meta, log)


@pytest.mark.usefixtures("settled_dirs")
def test_roll_and_swap_change_the_dir_and_are_listed(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    before = _read(cache, tmp_path)
    log.roll()
    log.append(_records(1, T0 + 20_000))
    rolled = _read(cache, tmp_path)
    assert cache.listings == 2
    assert rolled.log is not None
    assert len(rolled.log.segments) == 5
    assert rolled.fingerprint != before.fingerprint
    _same_as_opening(rolled, log)
    first = log.segments[0].log_path  # a swap: a new file renamed over the first segment
    data = first.read_bytes()
    replacement = first.with_name(first.name + ".swap")
    replacement.write_bytes(data[: _batch_end(data, 2)])
    os.replace(replacement, first)
    swapped = _read(cache, tmp_path)
    assert cache.listings == 3
    assert swapped.segment_records[0] == 2


@pytest.mark.usefixtures("settled_dirs")
def test_checkpoint_entry_change_makes_a_new_meta(tmp_path: Path) -> None:
    _log(tmp_path)
    cache = MetadataCache()
    before = _read(cache, tmp_path)
    assert before.log is not None
    assert before.log.checkpoint is None
    write_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT, {TP: 8})
    after = _read(cache, tmp_path)
    assert cache.listings == 1
    assert after.log is not None
    assert after.log.checkpoint == 8


def test_dir_changed_just_before_a_scan_is_listed_again(tmp_path: Path) -> None:
    # the dir was made just now: a change within its timestamp's tick could follow unseen
    _log(tmp_path)
    cache = MetadataCache()
    _read(cache, tmp_path)
    _read(cache, tmp_path)
    assert cache.listings == 2
    assert cache.walks == 4  # listed, but the unchanged segments keep their walks


def test_a_racy_dir_listed_again_unchanged_keeps_its_meta(tmp_path: Path) -> None:
    # a cleaned partition's dir is racy for RACY_NS: each scan lists it, but makes nothing new
    _log(tmp_path)
    cache = MetadataCache()
    first = _read(cache, tmp_path)
    second = _read(cache, tmp_path)
    assert cache.listings == 2
    assert second is first


def test_a_racy_dir_listed_again_sees_a_change_of_its_names(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    first = _read(cache, tmp_path)
    (log.directory / f"{3:020d}.log.deleted").touch()  # only a name: no segment changed
    second = _read(cache, tmp_path)
    assert second is not first
    assert second.fingerprint != first.fingerprint
    assert second.log == first.log


def test_a_racy_dir_listed_again_sees_a_rewritten_segment(tmp_path: Path) -> None:
    log = _log(tmp_path)
    cache = MetadataCache()
    first = _read(cache, tmp_path)
    path = log.segments[0].log_path
    data = path.read_bytes()
    path.write_bytes(data[: _batch_end(data, 2)])  # in place: the dir's stamp does not move
    second = _read(cache, tmp_path)
    assert second is not first
    assert (first.segment_records[0], second.segment_records[0]) == (4, 2)


@pytest.mark.usefixtures("settled_dirs")
def test_a_partition_that_failed_is_listed_again_and_its_repair_seen(tmp_path: Path) -> None:
    log = _log(tmp_path)
    path = log.segments[1].log_path
    good = path.read_bytes()
    bad = bytearray(good)
    bad[16] = 9  # magic byte of the first batch: an in-place change, the dir unchanged
    path.write_bytes(bytes(bad))
    cache = MetadataCache()
    assert _read(cache, tmp_path).error is not None
    path.write_bytes(good)  # repaired in place
    meta = _read(cache, tmp_path)
    assert cache.listings == 2
    assert meta.error is None


# --- cleaned segments: read from their indexes ---------------------------------------------------


def _cleaned_to(log_dir: Path, offset: int) -> None:
    write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, {TP: offset})


@pytest.fixture
def summarise_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Summaries for segments of any size (the tests' segments are far below the threshold)."""
    monkeypatch.setattr(log_meta, "SUMMARY_MIN_BYTES", 0)


def test_small_cleaned_segments_are_walked(tmp_path: Path) -> None:
    _log(tmp_path)
    _cleaned_to(tmp_path, 8)
    cache = MetadataCache()
    _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (0, 4)  # a walk of a small segment is cheaper


def test_a_big_cleaned_segment_is_read_from_its_indexes(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / TP.dir_name, LogConfig(), clock=lambda: T0)
    value = b"v" * (64 << 10)
    while log.active_segment.size < log_meta.SUMMARY_MIN_BYTES:
        n = log.log_end_offset
        log.append([Record(0, T0 + n, f"k{n % 7}".encode(), value)])
    log.roll()
    log.append(_records(1, T0 + 99_000))
    _cleaned_to(tmp_path, log.segments[1].base_offset)
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (1, 1)
    _same_as_opening(meta, log)


@pytest.mark.usefixtures("summarise_small")
def test_segments_below_the_checkpoint_are_read_from_their_indexes(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _cleaned_to(tmp_path, 8)  # the segments [0, 4) and [4, 8) lie wholly below it
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (2, 2)
    _same_as_opening(meta, log)
    assert meta.segment_records == (4, 4, 4, 2)
    _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (2, 2)  # kept, as walks are


@pytest.mark.usefixtures("summarise_small")
def test_a_compacted_log_reads_the_same_from_indexes_as_walked(tmp_path: Path) -> None:
    # a real cleaning leaves gaps in the offsets and a checkpoint at the active segment
    log = _log(tmp_path, segments=4, per_segment=6)
    summary = compact_partition(log, TopicCleanerConfig(), StrategyConfig(), T0 + 60_000)
    assert summary.records_out < summary.records_in
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert cache.summaries == len(log.segments) - 1
    walked = MetadataCache()
    (tmp_path / CLEANER_OFFSET_CHECKPOINT).unlink()
    plain = _read(walked, tmp_path)
    assert walked.summaries == 0
    assert meta.log is not None
    assert plain.log is not None
    assert meta.log.segments == plain.log.segments
    _same_as_opening(meta, PartitionLog(tmp_path / TP.dir_name, LogConfig(), clock=lambda: T0))
    # the offset span, which is at least the records (Kafka's estimate of the map a log needs)
    assert all(s >= w for s, w in zip(meta.segment_records, plain.segment_records, strict=True))


@pytest.mark.usefixtures("summarise_small")
def test_a_checkpoint_moved_back_walks_what_was_read_from_indexes(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _cleaned_to(tmp_path, 12)
    cache = MetadataCache()
    _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (3, 1)
    _cleaned_to(tmp_path, 4)  # a checkpoint reset: [4, 12) is dirty again, and walked
    meta = _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (3, 3)
    _same_as_opening(meta, log)


@pytest.mark.usefixtures("summarise_small")
def test_a_checkpoint_past_the_active_segment_summarises_nothing(tmp_path: Path) -> None:
    _log(tmp_path)
    _cleaned_to(tmp_path, 13)  # beyond the active segment's base (12): not a cleaning's
    cache = MetadataCache()
    _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (0, 4)


@pytest.mark.usefixtures("summarise_small")
def test_an_open_transaction_above_the_checkpoint_still_bounds_the_lso(tmp_path: Path) -> None:
    log = _log(tmp_path)
    open_at = log.append(
        _records(2, T0 + 11_000), producer_id=PID, producer_epoch=EPOCH, transactional=True
    ).first_offset
    _cleaned_to(tmp_path, 12)
    meta = _read(MetadataCache(), tmp_path)
    assert meta.log is not None
    assert meta.log.last_stable_offset == open_at


def _summary(log: PartitionLog, i: int) -> log_meta.WalkResult | None:
    segment = log.segments[i]
    return log_meta.summarise_cleaned(
        segment.base_offset, segment.log_path, log.segments[i + 1].base_offset, segment.size
    )


@pytest.mark.usefixtures("summarise_small")
def test_a_summary_is_refused_where_the_indexes_do_not_add_up(tmp_path: Path) -> None:
    log = _log(tmp_path, segments=3, per_segment=200)  # enough bytes for offset-index entries
    for i in range(3):
        assert _summary(log, i) is not None
    log.close()
    first, second, third = log.segments[:3]
    first.offset_index.path.unlink()  # no index: walked
    assert _summary(log, 0) is None
    index = second.offset_index.path
    rel, pos = int.from_bytes(index.read_bytes()[-8:-4], "big"), index.read_bytes()[-4:]
    wrong = (int.from_bytes(pos, "big") + 1).to_bytes(4, "big")  # not where a batch starts
    index.write_bytes(index.read_bytes()[:-8] + rel.to_bytes(4, "big") + wrong)
    assert _summary(log, 1) is None
    times = third.time_index.path
    data = times.read_bytes()
    times.write_bytes(data + (0).to_bytes(8, "big") + data[-4:])  # a timestamp that falls
    assert _summary(log, 2) is None
    segment = log.segments[0]
    assert log_meta.summarise_cleaned(segment.base_offset, segment.log_path, 5, 1 << 30) is None


@pytest.mark.usefixtures("summarise_small")
def test_a_legacy_segment_below_the_checkpoint_is_walked(tmp_path: Path) -> None:
    log = _log(tmp_path)
    first = log.segments[0].log_path  # messages of magic 1 where the v2 batches of [0, 4) were
    records = [(i, T0 + i, f"k{i:04d}".encode(), b"v" * 20) for i in range(4)]
    first.write_bytes(legacy_set(1, "none", records))
    assert _summary(log, 0) is None
    _cleaned_to(tmp_path, 8)
    cache = MetadataCache()
    meta = _read(cache, tmp_path)
    assert (cache.summaries, cache.walks) == (1, 3)
    assert meta.error is None
    assert meta.segment_records[0] == 4
