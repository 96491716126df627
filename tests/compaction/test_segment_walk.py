"""The read-only header walk of a segment (``compaction.walk_segment``, ``producer_scans``): it
reads the file a chunk at a time and keeps only its summary, so a segment of small batches (an
unbatched producer's: one record a batch) costs a chunk's batch rows, not the file's size or
more. The summaries are checked against what the test wrote, not against another walk."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from cleanerd.compaction import producer_scans, walk_segment
from cleanerd.format import Record, build_batch
from cleanerd.storage import _chunks as chunks_mod, scan_producer_state

BATCHES = 30_000
ROW_BYTES = 14 * 8  # a batch's row in a walk's matrix
PRODUCER = 77


def _segment(tmp_path: Path, *, open_txn_at: int | None = None, torn: bool = False) -> Path:
    """``BATCHES`` one-record batches, offsets 0.., timestamps 1000 + offset (the largest at
    offset ``BATCHES // 2``); from ``open_txn_at`` on, transactional batches of a producer whose
    transaction never ends; ``torn``: the last batch cut short, as a writer mid-append leaves
    it."""
    path = tmp_path / "00000000000000000000.log"
    with path.open("wb") as f:
        for i in range(BATCHES):
            ts = 5_000_000 if i == BATCHES // 2 else 1000 + i
            txn = open_txn_at is not None and i >= open_txn_at
            f.write(
                build_batch(
                    [Record(i, ts, b"k%d" % (i % 50), b"v" * 20)],
                    transactional=txn,
                    producer_id=PRODUCER if txn else -1,
                    producer_epoch=0 if txn else -1,
                    base_sequence=i - open_txn_at if txn and open_txn_at is not None else -1,
                )
            )
    if torn:
        with path.open("r+b") as f:
            f.truncate(path.stat().st_size - 10)
    return path


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """64 KiB chunks (256 KiB of uncompressed batches at a time); returns the widest read."""
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 64 << 10)
    return chunks_mod.uncompressed_chunk_bytes()


def test_a_walk_keeps_a_chunk_of_batch_rows_not_the_segments(
    tmp_path: Path, small_chunks: int
) -> None:
    path = _segment(tmp_path)
    size = path.stat().st_size
    whole = BATCHES * ROW_BYTES  # what one matrix of every batch would take
    assert whole > size
    walk_segment(0, path)  # kernels loaded (or compiled) outside the measure
    tracemalloc.start()
    try:
        result = walk_segment(0, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    walk = result.walk
    assert walk.error is None
    assert walk.records == BATCHES
    assert walk.meta.next_offset == BATCHES
    assert walk.last_offset == BATCHES - 1
    assert walk.end == size
    assert walk.max_timestamp == walk.meta.largest_timestamp == 5_000_000
    assert walk.meta.first_batch_timestamp == 1000
    assert not walk.transactional
    # a chunk's rows (at most one batch a 61 bytes of it) and its checks' temporaries
    assert peak < 4 * (small_chunks // 61) * ROW_BYTES < whole


def test_a_walk_over_chunks_sees_a_transactional_batch_and_stops_at_a_torn_tail(
    tmp_path: Path, small_chunks: int
) -> None:
    start = BATCHES - 7
    path = _segment(tmp_path, open_txn_at=start, torn=True)
    result = walk_segment(0, path, torn_tail_ok=True)
    walk = result.walk
    assert walk.error is None
    assert walk.torn_tail is not None
    assert walk.records == BATCHES - 1  # the torn batch is not counted
    assert walk.transactional
    assert walk.meta.next_offset == BATCHES - 1
    assert walk.end == walk.torn_tail.position
    # not forgiven: the same stop, as an error
    assert walk_segment(0, path).walk.error is not None


def test_producer_scans_fold_a_chunk_at_a_time_up_to_the_torn_tail(
    tmp_path: Path, small_chunks: int
) -> None:
    start = BATCHES - 7
    path = _segment(tmp_path, open_txn_at=start, torn=True)
    scans = list(producer_scans(0, path))
    assert len(scans) > 2  # many chunks
    assert max(b.shape[0] for _, b, _ in scans) * 61 <= small_chunks
    assert sum(b.shape[0] for _, b, _ in scans) == BATCHES - 1
    assert scan_producer_state(iter(scans)).first_unstable_offset == start
