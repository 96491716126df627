"""``storage._chunks.release``: a pass drops the mapped pages it is done with (resident memory stays
about one chunk per segment however large the segment)."""

from __future__ import annotations

import mmap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from cleanerd.compaction import (
    Cleaner,
    CleanerStats,
    LogMeta,
    OffsetMap,
    cleaner_checkpoint,
    plan_log,
)
from cleanerd.compaction._offset_map._build import PASS_1_CHUNKS, build_offset_map
from cleanerd.format import Record, build_batch
from cleanerd.storage import PartitionLog, _chunks as chunks_mod, iter_chunks, release
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig

PAGE = mmap.PAGESIZE


def _rss_kib(arr: np.ndarray) -> int:
    """Resident KiB of the mapping that holds ``arr`` (from /proc/self/smaps)."""
    address = arr.ctypes.data
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        head = line.split(" ", 1)[0]
        if "-" in head and not line.startswith(("Rss", "Size")):
            try:
                lo, hi = (int(x, 16) for x in head.split("-"))
            except ValueError:
                continue
            if lo <= address < hi:
                for detail in lines[i + 1 :]:
                    if detail.startswith("Rss:"):
                        return int(detail.split()[1])
    raise AssertionError("mapping not found in /proc/self/smaps")


FAULT_AROUND = 64 * 1024  # the kernel's fault_around_bytes, 64 KiB by default


def _mapped(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mm, dtype=np.uint8)


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    with open(path, "wb") as f:
        for i in range(64):
            records = [Record(i * 10 + j, 0, b"k%d" % j, bytes(4000)) for j in range(10)]
            f.write(build_batch(records))
    return path


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_release_drops_the_pages_of_a_range(segment: Path) -> None:
    arr = _mapped(segment)
    int(arr.sum())  # fault every page in
    full = _rss_kib(arr)
    assert full >= arr.size // 1024 - PAGE // 1024
    release(arr, 0, arr.size // 2)
    half = _rss_kib(arr)
    assert half <= full // 2 + PAGE // 1024
    on_disk = np.frombuffer(segment.read_bytes(), np.uint8)
    assert np.array_equal(arr, on_disk)  # released pages read back from the page cache


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_iter_chunks_keeps_about_one_chunk_resident(
    segment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the segment's batches are uncompressed: its chunks are uncompressed_chunk_bytes() wide
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 10_000)
    chunk = chunks_mod.uncompressed_chunk_bytes()
    arr = _mapped(segment)
    peak = 0
    for _ in iter_chunks(arr, path=str(segment), prev_last_offset=-1):
        peak = max(peak, _rss_kib(arr))
    assert arr.size > 5 * chunk
    # a fault maps the neighbouring pages already in the page cache too (the kernel's
    # fault-around, 64 KiB by default), so up to that much past a chunk can be resident
    assert peak * 1024 <= 3 * chunk + FAULT_AROUND + 2 * PAGE
    assert _rss_kib(arr) * 1024 <= 2 * chunk + FAULT_AROUND + 2 * PAGE
    assert peak * 1024 < arr.size // 2  # far from the whole segment


def test_release_ignores_arrays_that_map_no_file() -> None:
    arr = np.ones(10 * PAGE, dtype=np.uint8)
    release(arr, 0, arr.size)
    assert int(arr.sum()) == arr.size


def _rolled_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, resident: int) -> PartitionLog:
    """A log of one 2.4 MB segment, rolled, read in 64 KiB chunks with ``resident`` as the most
    a cleaning keeps mapped."""
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(chunks_mod, "RESIDENT_LOG_BYTES", resident)
    log = PartitionLog.create(tmp_path / "t-0", LogConfig())
    for i in range(300):
        log.append([Record(0, 0, b"k%d" % (i % 7), bytes(8000))])
    log.roll()
    return log


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_planning_leaves_about_one_chunk_of_the_segment_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's producer-state walk goes through the segment's kept map (the clean reuses
    it) a chunk at a time: the pages behind it are released, so planning a log larger than
    ``RESIDENT_LOG_BYTES`` does not leave it resident."""
    log = _rolled_log(tmp_path, monkeypatch, resident=1 << 20)
    LogMeta.from_log(log, cleaner_checkpoint(log))
    segment = log.segments[0]
    kept = segment.view()
    assert kept.size > 2 << 20
    assert _rss_kib(kept) * 1024 <= 3 * (64 << 10) + 2 * PAGE
    log.close()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_a_small_log_stays_mapped_from_the_plan_through_the_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log within ``RESIDENT_LOG_BYTES``: the plan leaves its pages mapped for the passes to
    read without faulting them in again, and once the clean swapped the segment out, its map
    (and every page of it) is gone."""
    log = _rolled_log(tmp_path, monkeypatch, resident=8 << 20)
    _, plan = plan_log(log, TopicCleanerConfig(), 0)
    segment = log.segments[0]
    kept = segment.view()
    assert 2 << 20 < kept.size <= 8 << 20
    assert _rss_kib(kept) * 1024 >= kept.size - 2 * PAGE  # every page still mapped
    address, inode = kept.ctypes.data, segment.log_path.stat().st_ino
    del kept
    assert plan.first_uncleanable_offset > plan.first_dirty_offset
    Cleaner(OffsetMap(1 << 20)).clean(log, plan, TopicCleanerConfig(), StrategyConfig(), 0)
    assert log.segments[0] is not segment
    # the old file's map is gone: no map of its inode at its address (either alone may be
    # reused: the address by a map the kernels' compiler makes, the inode by a file on disk)
    maps = [m.split() for m in Path("/proc/self/maps").read_text().splitlines()]
    assert not any(int(m[0].split("-")[0], 16) == address and int(m[4]) == inode for m in maps)
    log.close()


def test_pages_kept_holds_for_its_block_only() -> None:
    limit = chunks_mod.RESIDENT_LOG_BYTES
    with chunks_mod.pages_kept(limit) as outer:
        assert outer
        assert chunks_mod._KEPT.get()
        with chunks_mod.pages_kept(limit + 1) as inner:  # a larger read inside keeps the outer's
            assert not inner
            assert chunks_mod._KEPT.get()
    assert not chunks_mod._KEPT.get()
    with chunks_mod.pages_kept(limit + 1) as big:
        assert not big
        assert not chunks_mod._KEPT.get()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_pass_1_with_a_pool_leaves_about_one_chunk_of_the_segment_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a pool, pass 1's walk runs a chunk ahead and releases nothing itself: the cleaner's
    thread releases each chunk once it is done with it, so the segment's pages do not stay."""
    log = _rolled_log(tmp_path, monkeypatch, resident=1 << 20)
    segment = log.segments[0]
    kept = segment.view()
    int(kept.sum())  # every page mapped, as a walk before the pass would leave it
    assert kept.size > 2 << 20
    with ThreadPoolExecutor(1) as pool:
        build = build_offset_map(
            log.segments[:-1],
            log.segments,
            0,
            log.segments[-1].base_offset,
            OffsetMap(1 << 20),
            StrategyConfig(),
            CleanerStats(),
            lambda n: None,
            pool=pool,
        )
    assert not build.full
    step = (64 << 10) * PASS_1_CHUNKS  # a pass-1 chunk with a pool (uncompressed: wide as it)
    assert _rss_kib(kept) * 1024 <= step + FAULT_AROUND + 2 * PAGE
    log.close()
