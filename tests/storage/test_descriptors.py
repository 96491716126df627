"""Descriptors stay bounded whatever the segment count (issue 9, case 9).

CPython's ``mmap`` holds a duplicate descriptor while it lives, and a cleaning keeps a map per
segment it walks; ``storage._kept_maps`` bounds the kept maps. A partition of more segments than
the process may open descriptors must still compact.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd.format import Record, build_batch
from cleanerd.storage import PartitionLog, _kept_maps as map_cache

SEGMENTS = 600
PER_SEGMENT = 4


def many_segments(part: Path, count: int = SEGMENTS) -> None:
    """``count`` one-batch segments (keys repeat, so compaction removes most records), empty
    index files as Kafka leaves them for a tiny segment, then an empty active segment."""
    part.mkdir(parents=True)
    for i in range(count + 1):
        base = i * PER_SEGMENT
        name = f"{base:020d}"
        records = [
            Record(base + j, 1_700_000_000_000 + base + j, b"k%d" % ((base + j) % 50), b"v")
            for j in range(PER_SEGMENT)
        ]
        (part / f"{name}.log").write_bytes(build_batch(records) if i < count else b"")
        (part / f"{name}.index").write_bytes(b"")
        (part / f"{name}.timeindex").write_bytes(b"")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_kept_maps_are_bounded_in_process(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    many_segments(part, 200)
    before, limit = open_fds(), map_cache.MAPS.limit
    map_cache.MAPS.limit = 20
    try:
        log = PartitionLog(part)
        log.last_stable_offset()
        for seg in log.segments:
            seg.view()
        assert len(map_cache.MAPS) <= 20
        assert open_fds() <= before + 20 + 5  # the kept maps, the lock files, the active
        log.close()
    finally:
        map_cache.MAPS.limit = limit


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


@pytest.mark.slow
def test_compact_with_more_segments_than_descriptors(tmp_path: Path) -> None:
    """A real process limited to 256 descriptors compacts 600 segments."""
    logdir = tmp_path / "L"
    many_segments(logdir / "t-0")
    done = subprocess.run(
        [sys.executable, "-m", "cleanerd", "compact", str(logdir), "--format", "json"],
        capture_output=True,
        text=True,
        preexec_fn=_low_limit,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Too many open files" not in done.stderr
    log = PartitionLog(logdir / "t-0")
    keys = [r.key for r in log.records()]
    log.close()
    assert sorted(k or b"" for k in keys) == sorted({b"k%d" % i for i in range(50)})
