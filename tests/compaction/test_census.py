"""The census ``cleanerd compact`` takes of a log before and after (``_summary.census``): its
counts are what the test wrote, and it reads a segment a chunk at a time (the fingerprint is the
same however the batch rows are cut)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleanerd.compaction._summary import census
from cleanerd.format import Record
from cleanerd.storage import PartitionLog, _chunks as chunks_mod
from cleanerd.topics import LogConfig

BATCHES = 6_000


def test_census_counts_what_was_written_however_it_is_chunked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(segment_bytes=256 << 10))
    for i in range(BATCHES):
        log.append([Record(0, 1000 + i, b"k%d" % (i % 7), b"v" * (i % 3))])
    size = sum(seg.size for seg in log.segments)
    whole = census(log)
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 4 << 10)
    chunked = census(log)
    log.close()
    assert len(log.segments) > 1
    assert (whole.records, whole.batches, whole.bytes) == (BATCHES, BATCHES, size)
    assert chunked == whole
