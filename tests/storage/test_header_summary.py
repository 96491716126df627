"""Walks that keep a chunk of batch rows at a time (``storage.summarise_headers``, the rebuild of
a segment's indexes): what they report is what the test wrote, across many small chunks, and the
memory they take is about a chunk's rows, not the file's (a batch's row is 112 bytes, and an
unbatched producer's batch is about 90: the rows of a whole segment take more than the file)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cleanerd.format import Record, build_batch
from cleanerd.storage import PartitionLog, _chunks as chunks_mod, summarise_headers
from cleanerd.topics import LogConfig

BATCHES = 20_000
ROW_BYTES = 14 * 8
TOP = 9_000_000  # the largest timestamp, at two batches: the first of them counts


def _timestamp(i: int) -> int:
    return TOP if i in (BATCHES // 3, BATCHES // 2) else 1000 + i


def _batches() -> list[bytes]:
    return [
        build_batch([Record(i, _timestamp(i), b"k%d" % (i % 9), b"v" * 8)]) for i in range(BATCHES)
    ]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """16 KiB chunks (64 KiB of uncompressed batches at a time); returns the widest read."""
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 16 << 10)
    return chunks_mod.uncompressed_chunk_bytes()


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_summary_over_many_chunks_is_what_was_written(small_chunks: int) -> None:
    parts = _batches()
    arr = np.frombuffer(b"".join(parts), np.uint8)
    got = summarise_headers(arr, path="x.log")
    assert got.error is None
    assert (got.batches, got.records) == (BATCHES, BATCHES)
    assert (got.first_offset, got.last_offset) == (0, BATCHES - 1)
    assert got.first_timestamp == 1000
    assert (got.max_timestamp, got.max_timestamp_offset) == (TOP, BATCHES // 3)
    assert not got.transactional
    assert got.end == arr.size
    assert got.last_batch is not None
    assert got.last_batch[:2] == (arr.size - len(parts[-1]), BATCHES - 1)
    whole = BATCHES * ROW_BYTES
    assert whole > arr.size
    assert _peak(lambda: summarise_headers(arr, path="x.log")) < whole // 4


def test_a_bad_batch_ends_the_summary_where_it_lies(small_chunks: int) -> None:
    parts = _batches()
    bad = BATCHES * 3 // 4
    at = sum(len(p) for p in parts[:bad])
    data = bytearray(b"".join(parts))
    data[at + 17] ^= 0x40  # a CRC bit
    arr = np.frombuffer(bytes(data), np.uint8)
    got = summarise_headers(arr, path="x.log", check_crc=True)
    assert got.error is not None
    assert got.error.position == at
    assert got.end == at
    assert (got.batches, got.last_offset) == (bad, bad - 1)
    assert not summarise_headers(arr, path="x.log").error  # without CRCs it walks to the end


def _rebuilt(tmp_path: Path, name: str, parts: list[bytes]) -> tuple[bytes, bytes, int]:
    """The ``.index`` and ``.timeindex`` a log open writes for a segment that has none, and the
    open's peak memory."""
    part = tmp_path / name / "t-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(b"".join(parts))
    config = LogConfig(index_interval_bytes=4096)
    logs: list[PartitionLog] = []
    peak = _peak(lambda: logs.append(PartitionLog(part, config)))
    logs[0].close()
    return (
        (part / "00000000000000000000.index").read_bytes(),
        (part / "00000000000000000000.timeindex").read_bytes(),
        peak,
    )


def test_indexes_rebuilt_over_many_chunks_point_at_their_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = _batches()
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
    _rebuilt(tmp_path, "warm", parts)  # kernels loaded (or compiled) outside the measures
    whole_index, whole_times, whole_peak = _rebuilt(tmp_path, "one", parts)
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 16 << 10)
    index, times, peak = _rebuilt(tmp_path, "many", parts)
    assert (index, times) == (whole_index, whole_times)  # chunks change nothing
    entries = np.frombuffer(index, ">i4").reshape(-1, 2)
    assert entries.shape[0] > 10
    # each entry: an offset (relative) and the position of the batch that holds it
    for relative, position in entries:
        assert starts[relative] == position
    assert (np.diff(entries[:, 1]) > 4096).all()
    stamps = np.frombuffer(times, ">i8,>i4")
    assert stamps[-1][0] == TOP
    assert stamps[-1][1] == BATCHES // 3  # the first batch with the largest timestamp
    assert peak < BATCHES * ROW_BYTES // 4 < whole_peak
