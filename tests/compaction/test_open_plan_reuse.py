"""What one cleaning reuses between opening, planning and cleaning a log, and when it must not.

A segment keeps its map and its last batch's end while its file is unchanged, and a log keeps its
last producer-state walk while its segments are; every test here changes the log between two
reads and checks the second one against a log opened afresh (which has nothing to reuse).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cleanerd.compaction import Cleaner, LogMeta, _cleaner as cleaner_mod, cleaner_checkpoint, plan
from cleanerd.compaction._batches import fold_producers
from cleanerd.format import Record, build_batch, scan_batches
from cleanerd.storage import LogSegment, PartitionLog
from cleanerd.storage._producer_state import ProducerState, fold_segment, scan_producer_state
from tests.support.cleaning import (
    LARGE_TS,
    OFFSET,
    Producer,
    compacted_config,
    data_records,
    new_log,
    offset_map,
    rec,
)


def _walked_afresh(directory: Path) -> ProducerState:
    """The producer state as the walk before any reuse computed it: every segment scanned."""
    log = PartitionLog(directory)
    try:
        scans = []
        for seg in log.segments:
            arr = seg.view(keep=False)
            scans.append((arr, seg.scan(check_crc=False, view=arr).batches, str(seg.log_path)))
        return scan_producer_state(scans)
    finally:
        log.close()


def _fresh_lso(directory: Path) -> int:
    log = PartitionLog(directory)
    try:
        return log.producer_state().last_stable_offset(log.high_watermark)
    finally:
        log.close()


# --- a segment's map and last batch end ---------------------------------------------------------
def test_next_offset_follows_appends_of_this_and_another_writer(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([rec(1), rec(2)])
    seg = log.active_segment
    assert seg.next_offset() == 2
    log.append([rec(3)])
    assert seg.next_offset() == 3  # our own append
    other = PartitionLog(log.directory)
    other.append([rec(4), rec(5)])
    other.close()
    assert seg.next_offset() == log.log_end_offset == 5  # another writer's append
    assert seg.size == os.path.getsize(seg.log_path)


def test_last_batch_end_ignores_a_torn_tail_until_it_is_cut(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([rec(1)])
    log.close()
    seg = log.active_segment
    end = seg.last_batch_end()
    whole = build_batch([Record(1, 0, b"k", b"v")])
    with open(seg.log_path, "ab") as f:
        f.write(whole[:30])  # a writer died mid-append
    assert seg.last_batch_end() == end
    assert seg.size == end[1] + 30
    reopened = PartitionLog(log.directory)
    reopened.append([rec(2)])  # cuts the torn tail first
    reopened.close()
    assert seg.last_batch_end() == (2, os.path.getsize(seg.log_path))


def test_view_is_kept_until_the_file_grows_or_is_replaced(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([rec(1)])
    seg = log.active_segment
    first = seg.view()
    assert seg.view() is first
    assert seg.view(keep=False) is not first
    log.append([rec(2)])
    grown = seg.view()
    assert grown.shape[0] == os.path.getsize(seg.log_path) > first.shape[0]
    assert bytes(grown) == seg.log_path.read_bytes()
    # same size, new inode: a rename over the file (as a swap by another process would)
    data = bytearray(seg.log_path.read_bytes())
    data[-1] ^= 0xFF
    tmp = seg.log_path.with_name("replacement")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, seg.log_path)
    assert bytes(seg.view()) == bytes(data)


def test_closed_segment_lets_go_of_its_map(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([rec(1)])
    seg = log.active_segment
    kept = seg.view()
    seg.close()
    again = seg.view()
    assert again is not kept
    assert np.array_equal(again, kept)


# --- the producer-state walk --------------------------------------------------------------------
def _txn_log(tmp_path: Path) -> PartitionLog:
    """A log of several segments with a plain, an idempotent and an aborted transactional write."""
    log = new_log(tmp_path, segment_bytes=300)
    log.append([rec(0)])
    Producer(log, 7, txn=False)(1, 2)
    p = Producer(log, 9)
    p(3)
    p.abort()
    return log


@pytest.mark.parametrize("txn", ["none", "open", "committed", "aborted", "open after abort"])
def test_last_stable_offset_is_the_fresh_walks(tmp_path: Path, txn: str) -> None:
    log = _txn_log(tmp_path)
    p = Producer(log, 9)
    if txn != "none":
        p(3, 4)
    for i in range(8):  # several segments, the transaction's first batch in an early one
        log.append([rec(10 + i)])
    if txn in ("committed",):
        p.commit()
    if txn in ("aborted", "open after abort"):
        p.abort()
    if txn == "open after abort":
        p(5)
    assert len(log.segments) > 2
    assert log.last_stable_offset() == _fresh_lso(log.directory)
    assert log.producer_state() == _walked_afresh(log.directory)
    expected_open = txn in ("open", "open after abort")
    assert (log.producer_state().first_unstable_offset is not None) == expected_open


def test_producer_state_follows_every_change(tmp_path: Path) -> None:
    """A log kept open while it is appended to, rolled and its state asked for in between."""
    log = _txn_log(tmp_path)
    p = Producer(log, 9)
    steps: list[Callable[[], object]] = [
        lambda: p(3),
        lambda: log.append([rec(20)]),
        p.commit,
        lambda: p(4, 5),
        log.roll,
        lambda: Producer(log, 11, txn=False)(6),
        p.abort,
    ]
    for step in steps:
        step()
        assert log.producer_state() == _walked_afresh(log.directory)
        assert log.last_stable_offset() == _fresh_lso(log.directory)


def test_only_the_active_segment_is_walked_again(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=600)
    p = Producer(log, 9)
    while len(log.segments) < 3:
        p(1)
        p.abort()
        log.append([rec(2)])
    log.roll()  # room in the active segment for the appends below
    p(3)
    p.abort()
    p(4)  # an aborted and an open transaction in the active segment
    walked: list[int] = []

    def fold(seg: LogSegment, state: ProducerState) -> bool:
        walked.append(seg.base_offset)
        return fold_segment(seg, state)

    log.producer_state(fold)
    assert walked == [s.base_offset for s in log.segments]
    walked.clear()
    log.producer_state(fold)
    assert walked == []  # nothing changed
    segments = list(log.segments)
    log.append([rec(30)])
    assert log.segments == segments
    state = log.producer_state(fold)
    assert walked == [log.active_segment.base_offset]
    assert state == _walked_afresh(log.directory)
    walked.clear()
    log.roll()
    log.producer_state(fold)
    assert log.active_segment.size == 0
    # a new list: walked whole, but for the empty new active segment
    assert walked == [s.base_offset for s in log.segments[:-1]]
    assert log.producer_state() == _walked_afresh(log.directory)


def test_the_state_handed_out_is_a_copy(tmp_path: Path) -> None:
    log = _txn_log(tmp_path)
    state = log.producer_state()
    state.producers[7].last_sequence = 1234
    del state.producers[9]
    state.aborted.clear()
    assert log.producer_state() == _walked_afresh(log.directory)


# --- plan, then clean -----------------------------------------------------------------------------
def _plan_and_clean(log: PartitionLog, *, forget: bool = False) -> int:
    config = compacted_config()
    meta = LogMeta.from_log(log, cleaner_checkpoint(log))
    assert meta.last_stable_offset == _fresh_lso(log.directory)
    if forget:
        log._producers = None  # as if nothing had walked the log before the clean
    p = plan(meta, config, LARGE_TS)
    return Cleaner(offset_map()).clean(log, p, config, OFFSET, LARGE_TS).end_offset


def test_plan_and_clean_walk_the_log_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = new_log(tmp_path, segment_bytes=400)
    p, q = Producer(log, 9), Producer(log, 5, txn=False)
    for i in range(30):
        q(i % 4)
        if i % 5 == 0:
            p(i % 3)
        if i % 5 == 3:
            (p.abort if i % 2 else p.commit)()
    p(99)  # left open: the LSO falls inside the log
    assert log.last_stable_offset() < log.log_end_offset
    other = PartitionLog(shutil.copytree(log.directory, tmp_path / "copy" / "t-0"), log.config)
    folds: list[int] = []
    real = fold_producers

    def counting(seg: LogSegment, state: ProducerState, cache: object = None) -> None:
        folds.append(seg.base_offset)
        real(seg, state, cache)  # type: ignore[arg-type]

    monkeypatch.setattr(cleaner_mod, "fold_producers", counting)
    end = _plan_and_clean(log)
    assert folds == []  # the plan's walk served the clean
    bases = [s.base_offset for s in other.segments]
    assert _plan_and_clean(other, forget=True) == end
    assert folds == bases  # with nothing to reuse, every segment is walked
    assert [b.header for b in log.read(0)] == [b.header for b in other.read(0)]
    assert data_records(log) == data_records(other)
    other.close()


def test_swapped_segments_are_not_served_stale(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=300)
    for i in range(40):
        log.append([rec(i % 3, i)])
    Producer(log, 9)(1)  # an open transaction in the active segment
    old = list(log.segments)
    before = [s.next_offset() for s in old]
    assert log.producer_state() == _walked_afresh(log.directory)
    config = compacted_config()
    meta = LogMeta.from_log(log, cleaner_checkpoint(log))
    Cleaner(offset_map()).clean(log, plan(meta, config, LARGE_TS), config, OFFSET, LARGE_TS)
    assert not any(s is o for s in log.segments for o in old[:-1])
    for seg in old[:-1]:  # replaced: their files are gone, nothing of them is served
        with pytest.raises(FileNotFoundError):
            seg.view()
    fresh = PartitionLog(log.directory)
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in fresh.segments]
    for mine, theirs in zip(log.segments, fresh.segments, strict=True):
        assert mine.last_batch_end() == theirs.last_batch_end()
        assert bytes(mine.view()) == mine.log_path.read_bytes()
        assert scan_batches(mine.view()).end == mine.size
    assert log.log_end_offset == before[-1] == fresh.log_end_offset
    assert log.producer_state() == fresh.producer_state() == _walked_afresh(log.directory)
    assert log.last_stable_offset() == _fresh_lso(log.directory)
    fresh.close()
