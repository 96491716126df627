"""The swap protocol survives a crash at every rename (Kafka's testRecoveryAfterCrash, and more)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from cleanerd.format import Record, RecordBatch, build_batch
from cleanerd.storage import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    PartitionLog,
    StorageError,
    _swap as swap,
)
from cleanerd.topics import LogConfig

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
KEYS = 5


def _build(directory: Path) -> PartitionLog:
    """A log of keys 0..4 repeated, one record per batch, over several segments."""
    log = PartitionLog.create(directory, CONFIG, clock=lambda: 0)
    for i in range(40):
        key = str(i % KEYS).encode()
        log.append([Record(0, 1000 + i, key, f"v{i}".encode())])
    return log


def _cleaned_copy(
    log: PartitionLog, n: int, parts: int = 1
) -> tuple[list[LogSegment], list[LogSegment]]:
    """.cleaned segments replacing the first n segments, keeping each key's newest record
    among them plus the last record (so the offset range is covered, as the cleaner does),
    in ``parts`` segments (a rolled output, KAFKA-20036): the first at the old base, each
    other at its first record's offset."""
    old = log.segments[:n]
    records = [r for seg in old for b in seg_batches(log, seg) for r in b.records()]
    newest: dict[bytes | None, Record] = {}
    for r in records:
        newest[r.key] = r
    keep = sorted({*newest.values(), records[-1]}, key=lambda r: r.offset)
    step = -(-len(keep) // parts)
    new = []
    for i in range(0, len(keep), step):
        base = old[0].base_offset if i == 0 else keep[i].offset
        seg = LogSegment.create(log.directory, base, CONFIG, temp_suffix=CLEANED_SUFFIX)
        for r in keep[i : i + step]:
            data = build_batch([r], partition_leader_epoch=0)
            seg.append(
                data,
                largest_offset=r.offset,
                largest_timestamp=r.timestamp,
                offset_of_max_timestamp=r.offset,
            )
        seg.on_become_inactive()
        new.append(seg)
    return new, old


def seg_batches(log: PartitionLog, seg: LogSegment):  # type: ignore[no-untyped-def]
    arr = seg.view()
    scan = seg.scan(view=arr)
    return [RecordBatch(arr, scan.batches[i], scan.header(i), None) for i in range(len(scan))]


def _contents(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    log = PartitionLog(directory, CONFIG)
    out = [(r.offset, r.key, r.value) for r in log.records()]
    log.close()
    return out


class _Crash(Exception):
    pass


_REAL_REPLACE = os.replace


def _count_renames(tmp_path: Path, parts: int) -> int:
    log = _build(tmp_path / "count-0")
    new, old = _cleaned_copy(log, 3, parts)
    calls = 0
    real = os.replace

    def counting(a: object, b: object) -> None:
        nonlocal calls
        calls += 1
        real(a, b)  # type: ignore[arg-type]

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "replace", counting)
    try:
        log.replace_segments(new, old)
    finally:
        mp.undo()
    return calls


def test_replace_segments_swaps_in_cleaned_data(tmp_path: Path) -> None:
    log = _build(tmp_path / "t-0")
    before = [(r.offset, r.key, r.value) for r in log.records()]
    new, old = _cleaned_copy(log, 3)
    end = old[-1].next_offset()
    expected_first = {r[1]: r for r in before if r[0] < end}
    log.replace_segments(new, old)
    names = sorted(p.name for p in log.directory.iterdir())
    assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))]
    after = _contents(log.directory)
    # the three old segments shrank to the newest record per key (plus the last record)
    cleaned_part = [r for r in after if r[0] < end]
    assert {r[1] for r in cleaned_part} == set(expected_first)
    assert len(cleaned_part) <= KEYS + 1
    # everything after the replaced segments is untouched
    assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]


@pytest.mark.slow
@pytest.mark.parametrize("parts", [1, 3])
def test_every_crash_point_recovers_old_or_new(tmp_path: Path, parts: int) -> None:
    """Crash after k renames for every k; reopening must give exactly the old log or the new one.

    This walks Kafka's six crash points of testRecoveryAfterCrash ((1) .cleaned only, (2) some
    .swap some .cleaned, (3) all .swap with old files, (4) .swap plus old .deleted, (5) some
    .swap already renamed, (6) .deleted pending) and every state between them, for three old
    segments replaced by one new segment and by three (a rolled output, KAFKA-20036).
    """
    total = _count_renames(tmp_path, parts)
    assert total >= 8 * parts
    reference = _build(tmp_path / "ref-0")
    old_contents = [(r.offset, r.key, r.value) for r in reference.records()]
    new, old = _cleaned_copy(reference, 3, parts)
    assert len(new) == parts
    reference.replace_segments(new, old)
    new_contents = _contents(reference.directory)
    assert new_contents != old_contents
    seen = set()
    for crash_after in range(total + 1):
        directory = tmp_path / f"crash{crash_after}-0"
        log = _build(directory)
        new, old = _cleaned_copy(log, 3, parts)
        calls = 0

        def crashing(a: object, b: object, limit: int = crash_after) -> None:
            nonlocal calls
            if calls == limit:
                raise _Crash
            calls += 1
            _REAL_REPLACE(a, b)  # type: ignore[arg-type]

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "replace", crashing)
            with contextlib.suppress(_Crash):
                log.replace_segments(new, old)
        state = sorted(p.name for p in directory.iterdir())
        got = _contents(directory)
        assert got in (old_contents, new_contents), (crash_after, state)
        seen.add("new" if got == new_contents else "old")
        leftovers = swap.leftover_temp_files(directory)
        assert leftovers == [], (crash_after, leftovers)
        # reopening twice changes nothing more
        assert _contents(directory) == got
    assert seen == {"old", "new"}


def test_crash_point_1_cleaned_files_are_discarded(tmp_path: Path) -> None:
    log = _build(tmp_path / "t-0")
    before = [(r.offset, r.key, r.value) for r in log.records()]
    _cleaned_copy(log, 3)  # written but never swapped
    log.close()
    reopened = PartitionLog(log.directory, CONFIG)
    assert reopened.report.recovery.rolled_back
    assert [(r.offset, r.key, r.value) for r in reopened.records()] == before


def test_crash_point_6_pending_deleted_files_are_removed(tmp_path: Path) -> None:
    log = _build(tmp_path / "t-0")
    new, old = _cleaned_copy(log, 3)
    log.replace_segments(new, old)
    after = _contents(log.directory)
    stale = log.directory / f"{0:020d}.log{DELETED_SUFFIX}"
    stale.write_bytes(b"junk")
    reopened = PartitionLog(log.directory, CONFIG)
    assert stale.name in reopened.report.recovery.deleted
    assert not stale.exists()
    assert [(r.offset, r.key, r.value) for r in reopened.records()] == after


def test_kraft_snapshot_deletions_are_left_alone(tmp_path: Path) -> None:
    log = _build(tmp_path / "t-0")
    kraft = log.directory / "00000000000000000010-0000000001.checkpoint.deleted"
    kraft.write_bytes(b"x")
    PartitionLog(log.directory, CONFIG)
    assert kraft.exists()


def test_replace_refuses_a_cleaned_segment_that_does_not_cover_old_ones(tmp_path: Path) -> None:
    log = _build(tmp_path / "t-0")
    old = log.segments[:3]
    new = LogSegment.create(log.directory, 0, CONFIG, temp_suffix=CLEANED_SUFFIX)
    new.append(
        build_batch([Record(0, 1, b"0", b"x")]),
        largest_offset=0,
        largest_timestamp=1,
        offset_of_max_timestamp=0,
    )
    new.on_become_inactive()
    with pytest.raises(StorageError, match="cover offsets"):
        log.replace_segments([new], old)
    assert len(log.segments) >= 4  # nothing was renamed


def test_active_segment_is_never_replaced(tmp_path: Path) -> None:
    log = _build(tmp_path / "t-0")
    new = LogSegment.create(
        log.directory, log.active_segment.base_offset, CONFIG, temp_suffix=CLEANED_SUFFIX
    )
    with pytest.raises(StorageError, match="active segment"):
        log.replace_segments([new], [log.active_segment])
