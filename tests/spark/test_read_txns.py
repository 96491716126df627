"""The Spark source's transaction state of a partition (``_read_ranges.partition_txns``, what
``read_committed`` filters by): the aborted transactions and the last stable offset the test
wrote, read a chunk of batch headers at a time however many batches the segments hold."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from cleanerd.format import Record
from cleanerd.spark._read_ranges import PartitionDir, partition_txns
from cleanerd.storage import PartitionLog, _chunks as chunks_mod
from cleanerd.topics import LogConfig

PLAIN = 8_000  # one-record batches before the transactions
ABORTED, OPEN = 41, 42  # producer ids


def test_partition_txns_are_what_was_written_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t-0"
    log = PartitionLog.create(path, LogConfig(segment_bytes=512 << 10))
    for i in range(PLAIN):
        log.append([Record(0, 1000 + i, b"k%d" % (i % 5), b"v")])
    first_aborted = log.log_end_offset
    for seq in range(3):
        log.append(
            [Record(0, 5000, b"a", b"x")],
            producer_id=ABORTED,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
    marker = log.append_marker(commit=False, producer_id=ABORTED, producer_epoch=0, timestamp=6000)
    first_open = log.log_end_offset
    log.append(
        [Record(0, 7000, b"o", b"y")],
        producer_id=OPEN,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    log.append([Record(0, 8000, b"after", b"z")])
    segments = len(log.segments)
    log.close()
    assert segments > 1
    part = PartitionDir("t", 0, path)
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 8 << 10)
    partition_txns(part)  # kernels loaded (or compiled) outside the measure
    tracemalloc.start()
    try:
        txns = partition_txns(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert txns.aborted == ((ABORTED, first_aborted, marker.first_offset),)
    assert txns.last_stable_offset == first_open
    assert peak < PLAIN * 14 * 8 // 4  # a chunk's batch rows, not the partition's
