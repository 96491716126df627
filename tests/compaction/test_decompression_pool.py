"""A cleaner with a decompression pool (``Cleaner(decompression_pool=...)``): pass 1 decompresses
part of each chunk in a pool thread. The cleaned log must be the same bytes as without the pool,
and the pool thread must decompress within the topic's ``max.decompressed.message.bytes``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from cleanerd.compaction import Cleaner, OffsetMap, clean_once, open_log
from cleanerd.compaction._offset_map._build import _parts
from cleanerd.format import (
    Compression,
    CorruptRecordError,
    Record,
    build_batch,
    kernels as k,
    limit_decompression,
    scan_batches,
)
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig
from cleanerd.workload import WorkloadSpec, generate
from tests.support.bombs import bomb_batch, files_of

NOW = 1_700_000_000_000


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as executor:
        yield executor


def _cleaned(src: Path, dst: Path, map_bytes: int, pool: ThreadPoolExecutor | None) -> Path:
    shutil.copytree(src, dst)
    cleaner = Cleaner(OffsetMap(map_bytes, StrategyConfig()), decompression_pool=pool)
    with open_log(dst, LogConfig(segment_bytes=64 * 1024), clock=lambda: NOW) as log:
        clean_once(log, cleaner, TopicCleanerConfig(delete_retention_ms=0), StrategyConfig(), NOW)
    return dst


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("map_bytes", [1 << 20, 24 * 400], ids=["whole", "fills"])
def test_one_and_two_threads_write_the_same_bytes(
    tmp_path: Path, codec: str, map_bytes: int, pool: ThreadPoolExecutor
) -> None:
    spec = WorkloadSpec(
        topic="t",
        records=6_000,
        keys=700,
        codec=codec,
        records_per_batch=20,
        transactional_producers=2,
        segment_bytes=256 * 1024,
    )
    generate(tmp_path / "src", spec)
    src = tmp_path / "src" / "t-0"
    one = _cleaned(src, tmp_path / "one" / "t-0", map_bytes, None)
    two = _cleaned(src, tmp_path / "two" / "t-0", map_bytes, pool)
    before, after = files_of(src), files_of(one)
    assert after != before  # something was cleaned
    assert files_of(two) == after


def _chunk(limit: int) -> tuple[np.ndarray, np.ndarray]:
    honest = [
        build_batch([Record(i, 5, b"k%d" % i, bytes(limit // 8))], compression=Compression.LZ4)
        for i in range(3)
    ]
    arr = np.frombuffer(b"".join([*honest, bomb_batch(Compression.LZ4, 3, 2 * limit)]), np.uint8)
    scan = scan_batches(arr)
    scan.raise_error()
    return arr, scan.batches


def test_the_pool_thread_decompresses_within_the_callers_limit(pool: ThreadPoolExecutor) -> None:
    limit = 1 << 20
    arr, batches = _chunk(limit)
    counts = np.ascontiguousarray(batches[:, k.B_COUNT])
    with limit_decompression(8 * limit):  # the bomb fits this one
        parts = _parts(arr, batches, counts, pool)
        assert parts is not None
        assert len(parts) == 2
        later = parts[1][2]
        assert isinstance(later, Future)
        assert later.result() is not None
    with limit_decompression(limit):  # the pool thread must see this bound, not the default
        parts = _parts(arr, batches, counts, pool)
        assert parts is not None
        assert len(parts) == 2
        later = parts[1][2]
        assert isinstance(later, Future)
        assert later.result() is None  # refused there: the chunk is then laid out here


def test_a_bomb_read_with_a_pool_names_file_and_position(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    limit = 1 << 20
    part = tmp_path / "t-0"
    config = LogConfig(max_decompressed_message_bytes=limit)
    log = PartitionLog.create(part, config, clock=lambda: NOW)
    arr, _ = _chunk(limit)
    log.append_batches(arr.tobytes())
    log.roll()
    log.close()
    cleaner = Cleaner(OffsetMap(1 << 20, StrategyConfig()), decompression_pool=pool)
    with (
        open_log(part, config, clock=lambda: NOW) as log,
        pytest.raises(CorruptRecordError) as raised,
    ):
        clean_once(log, cleaner, TopicCleanerConfig(), StrategyConfig(), NOW)
    assert str(raised.value.path).endswith("00000000000000000000.log")
    assert raised.value.position == int(scan_batches(arr).batches[3, k.B_POS])
    assert "max.decompressed.message.bytes" in str(raised.value)
