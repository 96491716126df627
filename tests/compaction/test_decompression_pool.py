"""A cleaner with a decompression pool (``Cleaner(decompression_pool=...)``): pass 1 lays out and
indexes pieces of each chunk in a pool thread too, and puts them into the map in order on the
cleaner's thread. Pass 1 must leave the same map, record cache, stats and errors as without the
pool (a map filling mid-chunk included), the cleaned log must be the same bytes, and the pool
thread must decompress within the topic's ``max.decompressed.message.bytes``."""

from __future__ import annotations

import shutil
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cleanerd.compaction import (
    Cleaner,
    CleanerStats,
    OffsetMap,
    _filter as filter_mod,
    clean_once,
    open_log,
)
from cleanerd.compaction._cleaned import _group_writer as group_writer_mod
from cleanerd.compaction._offset_map import _build
from cleanerd.compaction._offset_map._build import build_offset_map
from cleanerd.compaction._offset_map._record_cache import RecordCache
from cleanerd.format import (
    Compression,
    CorruptRecordError,
    Record,
    _payloads as payloads_module,
    build_batch,
    kernels as k,
    limit_decompression,
    scan_batches,
)
from cleanerd.format._builder import finish_crc
from cleanerd.format.layout import LAST_OFFSET_DELTA_AT, RECORDS_COUNT_AT
from cleanerd.storage import PartitionLog, _chunks as chunks_mod, iter_chunks
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig
from cleanerd.workload import WorkloadSpec, generate
from tests.support.bombs import bomb_batch, files_of

NOW = 1_700_000_000_000


class _AllInPool(Executor):
    """A pool whose thread takes every piece before the caller takes any: each job runs to its
    end in a new thread (which, like a pool thread, does not inherit the caller's context)
    before ``submit`` returns."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()

        def run() -> None:
            try:
                done.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the caller, as a pool would
                done.set_exception(e)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        return done


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as executor:
        yield executor


def _pools(pool: ThreadPoolExecutor) -> list[Executor]:
    return [pool, _AllInPool()]


def _cleaned(src: Path, dst: Path, map_bytes: int, pool: Executor | None) -> Path:
    shutil.copytree(src, dst)
    cleaner = Cleaner(OffsetMap(map_bytes, StrategyConfig()), decompression_pool=pool)
    with open_log(dst, LogConfig(segment_bytes=64 * 1024), clock=lambda: NOW) as log:
        clean_once(log, cleaner, TopicCleanerConfig(delete_retention_ms=0), StrategyConfig(), NOW)
    return dst


def _log(root: Path, codec: str, records: int = 6_000) -> Path:
    spec = WorkloadSpec(
        topic="t",
        records=records,
        keys=700,
        codec=codec,
        records_per_batch=20,
        transactional_producers=2,
        segment_bytes=256 * 1024,
    )
    generate(root, spec)
    return root / "t-0"


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("map_bytes", [1 << 20, 24 * 400], ids=["whole", "fills"])
def test_one_and_two_threads_write_the_same_bytes(
    tmp_path: Path, codec: str, map_bytes: int, pool: ThreadPoolExecutor
) -> None:
    src = _log(tmp_path / "src", codec)
    one = _cleaned(src, tmp_path / "one" / "t-0", map_bytes, None)
    two = _cleaned(src, tmp_path / "two" / "t-0", map_bytes, pool)
    before, after = files_of(src), files_of(one)
    assert after != before  # something was cleaned
    assert files_of(two) == after


def _pass1(part: Path, map_bytes: int, cache_bytes: int, pool: Executor | None) -> dict[str, Any]:
    """Everything pass 1 leaves: the map, the build's result, the stats, the record cache."""
    log = PartitionLog(part)
    try:
        dirty = log.segments[:-1]
        end = log.segments[-1].base_offset
        omap = OffsetMap(map_bytes, StrategyConfig())
        stats = CleanerStats()
        cache = RecordCache(cache_bytes)
        build = build_offset_map(
            dirty, log.segments, 0, end, omap, StrategyConfig(), stats, lambda n: None, cache,
            pool=pool,
        )  # fmt: skip
        n = cache.records
        segments = {
            seg.base_offset: (
                cache.chunks(id(seg)),
                cache.payload_bytes(id(seg)),
                cache.first_records(id(seg), scan_batches(seg.view()).batches),
            )
            for seg in dirty
        }
        return {
            "table": omap.table.copy(),
            "size": omap.size,
            "latest": omap.latest_offset,
            "end": build.end_offset,
            "full": build.full,
            "checked": len(build.checked),
            "stats": (stats.map_messages_read, stats.map_bytes_read),
            "records": n,
            "offsets": cache.offsets[:n].copy(),
            "flags": cache.flags[:n].copy(),
            "base": cache.base,
            "segments": segments,
            "bases": [s.base_offset for s in log.segments],
        }
    finally:
        log.close()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[x], b[x]) for x in a)
    if isinstance(a, list | tuple):
        return (
            isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return bool(a == b)


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
@pytest.mark.parametrize(
    ("map_bytes", "cache_bytes"),
    [(1 << 20, 1 << 20), (24 * 400, 1 << 20), (1 << 20, 26 * 3_000)],
    ids=["whole", "fills", "cache-fills"],
)
def test_pass_1_with_a_pool_leaves_what_one_thread_leaves(
    tmp_path: Path, codec: str, map_bytes: int, cache_bytes: int, pool: ThreadPoolExecutor
) -> None:
    part = _log(tmp_path, codec)
    one = _pass1(part, map_bytes, cache_bytes, None)
    if map_bytes < 1 << 20:  # the map fills inside a chunk (a segment is one chunk here)
        assert one["full"]
        assert one["end"] not in one["bases"]
        assert one["end"] == one["latest"] + 1
    else:
        assert not one["full"]
    if cache_bytes < 1 << 20:  # a chunk (of 2000 to 4000 records) did not fit the cache
        assert any((s[2] is None or (s[2] < 0).any()) for s in one["segments"].values())
    for other in _pools(pool):
        got = _pass1(part, map_bytes, cache_bytes, other)
        assert _same(got, one), type(other).__name__


def _damage(part: Path, codec: str) -> int:
    """Spoil the payload of a batch in the middle of the first segment (CRC made valid again):
    compressed, it does not decompress; uncompressed, its first record's length is a varint
    that never ends. Returns the batch's position."""
    seg = sorted(part.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    batches = scan_batches(np.frombuffer(bytes(data), np.uint8)).batches
    row = batches[batches.shape[0] * 3 // 4]
    pos, size = int(row[k.B_POS]), int(row[k.B_SIZE])
    raw = bytearray(data[pos : pos + size])
    width = 12 if codec != "none" else 6
    raw[k.HEADER_SIZE : k.HEADER_SIZE + width] = b"\xff" * width
    data[pos : pos + size] = finish_crc(raw)
    seg.write_bytes(bytes(data))
    return pos


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_a_bad_payload_in_the_pools_part_is_the_readers_error(
    tmp_path: Path, codec: str, pool: ThreadPoolExecutor
) -> None:
    part = _log(tmp_path, codec)
    pos = _damage(part, codec)
    with pytest.raises(CorruptRecordError) as one:
        _pass1(part, 1 << 20, 1 << 20, None)
    assert str(one.value.path).endswith("00000000000000000000.log")
    assert one.value.position == pos
    for other in _pools(pool):
        with pytest.raises(CorruptRecordError) as two:
            _pass1(part, 1 << 20, 1 << 20, other)
        assert str(two.value) == str(one.value)
        assert (two.value.path, two.value.position) == (one.value.path, one.value.position)


def _bomb_log(tmp_path: Path, limit: int) -> tuple[Path, int]:
    """A segment of three honest lz4 batches and a bomb that decompresses to 2 x ``limit``."""
    honest = [
        build_batch([Record(i, 5, b"k%d" % i, bytes(limit // 8))], compression=Compression.LZ4)
        for i in range(3)
    ]
    arr = np.frombuffer(b"".join([*honest, bomb_batch(Compression.LZ4, 3, 2 * limit)]), np.uint8)
    part = tmp_path / "t-0"
    config = LogConfig(max_decompressed_message_bytes=limit)
    log = PartitionLog.create(part, config, clock=lambda: NOW)
    log.append_batches(arr.tobytes())
    log.roll()
    log.close()
    return part, int(scan_batches(arr).batches[3, k.B_POS])


def test_the_pool_thread_decompresses_within_the_callers_limit(tmp_path: Path) -> None:
    limit = 1 << 20
    part, pos = _bomb_log(tmp_path, limit)
    with limit_decompression(8 * limit), pytest.raises(CorruptRecordError) as fits:
        _pass1(part, 1 << 20, 1 << 20, _AllInPool())
    # the bomb fits this bound: what is wrong is its record count, not its size
    assert fits.value.position == pos
    assert "record count" in str(fits.value)
    assert "max.decompressed.message.bytes" not in str(fits.value)
    # the pool thread must see this bound, not the default (which the bomb fits)
    with limit_decompression(limit), pytest.raises(CorruptRecordError) as raised:
        _pass1(part, 1 << 20, 1 << 20, _AllInPool())
    assert raised.value.position == pos
    assert "max.decompressed.message.bytes" in str(raised.value)


def test_a_bomb_read_with_a_pool_names_file_and_position(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    limit = 1 << 20
    part, pos = _bomb_log(tmp_path, limit)
    config = LogConfig(max_decompressed_message_bytes=limit)
    cleaner = Cleaner(OffsetMap(1 << 20, StrategyConfig()), decompression_pool=pool)
    with (
        open_log(part, config, clock=lambda: NOW) as log,
        pytest.raises(CorruptRecordError) as raised,
    ):
        clean_once(log, cleaner, TopicCleanerConfig(), StrategyConfig(), NOW)
    assert str(raised.value.path).endswith("00000000000000000000.log")
    assert raised.value.position == pos
    assert "max.decompressed.message.bytes" in str(raised.value)


def test_a_shut_down_pool_leaves_the_work_to_the_caller(tmp_path: Path) -> None:
    part = _log(tmp_path, "lz4")
    stopped = ThreadPoolExecutor(1)
    stopped.shutdown()
    assert _same(_pass1(part, 1 << 20, 1 << 20, stopped), _pass1(part, 1 << 20, 1 << 20, None))


def test_a_piece_past_its_share_is_laid_out_with_the_whole_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    """Pieces are cut by compressed bytes, so one may decompress past its half of the chunk's
    bound while the whole chunk fits: the chunk is then laid out on the cleaner's thread, as one
    thread does, and pass 1 leaves the same as without a pool."""
    limit = 1 << 20
    monkeypatch.setattr(_build, "POOL_PIECES", 2)
    monkeypatch.setattr(payloads_module, "CHUNK_PAYLOADS_FLOOR", 1)  # the bound: 4 x the limit
    squeezed = [  # 3 x 0.7 of the limit in the first piece: past its 2 x limit
        build_batch([Record(i, 5, b"k%d" % i, bytes(limit * 7 // 10))], base_offset=i,
                    compression=Compression.LZ4)
        for i in range(3)
    ]  # fmt: skip
    noise = np.random.default_rng(7).integers(0, 256, limit // 2, dtype=np.uint8).tobytes()
    loud = build_batch([Record(3, 5, b"k3", noise)], base_offset=3, compression=Compression.LZ4)
    part = tmp_path / "t-0"
    log = PartitionLog.create(part, LogConfig(), clock=lambda: NOW)
    log.append_batches(b"".join([*squeezed, loud]))
    log.roll()
    log.close()
    went: list[bool] = []
    run = _build._Pieces.run

    def spied(self: _build._Pieces, *args: Any) -> bool:
        went.append(run(self, *args))
        return went[-1]

    monkeypatch.setattr(_build._Pieces, "run", spied)
    with limit_decompression(limit):
        one = _pass1(part, 1 << 20, 1 << 20, None)
        assert one["size"] == 4
        assert 2 * limit < one["segments"][0][1][0] < 4 * limit  # laid out: fits the chunk
        for other in _pools(pool):
            assert _same(_pass1(part, 1 << 20, 1 << 20, other), one)
    assert went == [True, False, False]  # both pool runs fell back to the whole chunk


@pytest.mark.parametrize("codec", [Compression.ZSTD, Compression.LZ4])
def test_a_count_past_what_the_limit_can_hold_sizes_no_rows(
    tmp_path: Path, codec: Compression, pool: ThreadPoolExecutor
) -> None:
    """A compressed batch decompresses to at most ``max.decompressed.message.bytes``, so a count
    of more 7-byte records than that holds is corrupt, and is refused before it sizes pass 1's
    rows (25 bytes a record): 50M claimed records would have taken 1.2 GB, within the chunk's
    bound of 512 MiB decompressed."""
    claimed = 50_000_000
    honest = [build_batch([Record(i, 5, b"k%d" % i, b"v")], compression=codec) for i in range(3)]
    raw = bytearray(build_batch([Record(3, 5, b"k", b"v")], compression=codec))
    raw[RECORDS_COUNT_AT : RECORDS_COUNT_AT + 4] = claimed.to_bytes(4, "big")
    raw[LAST_OFFSET_DELTA_AT : LAST_OFFSET_DELTA_AT + 4] = (claimed - 1).to_bytes(4, "big")
    arr = np.frombuffer(b"".join([*honest, bytes(finish_crc(raw))]), np.uint8)
    part = tmp_path / "t-0"
    log = PartitionLog.create(part, LogConfig(), clock=lambda: NOW)
    log.append_batches(arr.tobytes())
    log.roll()
    log.close()
    pos = int(scan_batches(arr).batches[3, k.B_POS])
    for threads in (None, pool):
        tracemalloc.start()
        try:
            with pytest.raises(CorruptRecordError) as raised:
                _pass1(part, 1 << 20, 1 << 20, threads)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert raised.value.position == pos
        assert "record count" in str(raised.value)
        assert peak < 64 << 20, peak


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_with_a_pool_pass_1_reads_larger_chunks_and_pass_2_rebuilds_no_more_at_once(
    tmp_path: Path, codec: str, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass 1 with a pool reads ``PASS_1_CHUNKS`` chunks at a time (fewer waits for the pool
    thread); pass 2 takes what it cached in parts of one chunk's bytes, so what it rebuilds at
    once does not grow, and the cleaned log is the one a single thread writes."""
    src = _log(tmp_path / "src", codec)
    step = 16 << 10
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", step)
    seen: dict[str, list[int]] = {"map": [], "decide": []}
    map_chunk, decide = _build._map_chunk, filter_mod.decide_chunk

    def spy_map(arr: Any, batches: Any, *args: Any, **kw: Any) -> Any:
        seen["map"].append(int(batches[:, k.B_SIZE].sum()))
        return map_chunk(arr, batches, *args, **kw)

    def spy_decide(ctx: Any, meta: Any, arr: Any, batches: Any, *args: Any, **kw: Any) -> Any:
        seen["decide"].append(int(batches[:, k.B_SIZE].sum()) if batches.shape[0] > 1 else 0)
        return decide(ctx, meta, arr, batches, *args, **kw)

    monkeypatch.setattr(_build, "_map_chunk", spy_map)
    monkeypatch.setattr(group_writer_mod, "decide_chunk", spy_decide)
    one = _cleaned(src, tmp_path / "one" / "t-0", 1 << 20, None)
    assert max(seen["map"]) <= step
    seen["map"].clear()
    seen["decide"].clear()
    two = _cleaned(src, tmp_path / "two" / "t-0", 1 << 20, pool)
    assert max(seen["map"]) > step  # pass 1 read larger chunks
    assert max(seen["map"]) <= _build.PASS_1_CHUNKS * step
    assert 0 < max(seen["decide"]) <= step
    assert files_of(two) == files_of(one)


def _walked_by(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spy on pass 1's walk: the name of the thread that walked each chunk, in order."""
    walkers: list[str] = []
    walk = iter_chunks

    def spy(*args: Any, **kw: Any) -> Iterator[Any]:
        for batches in walk(*args, **kw):
            walkers.append(threading.current_thread().name)
            yield batches

    monkeypatch.setattr(_build, "iter_chunks", spy)
    return walkers


def _chunk_bases(part: Path, step: int) -> list[int]:
    """The first segment's chunks of ``step`` bytes (``storage.iter_chunks``): each one's first
    batch's base offset."""
    seg = sorted(part.glob("*.log"))[0]
    arr = np.frombuffer(seg.read_bytes(), np.uint8)
    return [int(b[0, k.B_BASE_OFFSET]) for b in iter_chunks(arr, path=str(seg), chunk_bytes=step)]


@pytest.mark.parametrize("codec", ["none", "lz4"])
@pytest.mark.parametrize(
    ("map_bytes", "cache_bytes"),
    [(1 << 20, 1 << 20), (24 * 400, 1 << 20), (1 << 20, 26 * 3_000)],
    ids=["whole", "fills", "cache-fills"],
)
def test_the_walk_ahead_on_the_pool_leaves_what_one_thread_leaves(
    tmp_path: Path,
    codec: str,
    map_bytes: int,
    cache_bytes: int,
    pool: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Segments of many chunks: with a pool, the pool thread walks each next chunk while the
    cleaner's thread finishes the one before (the same chunks as one thread reads here, with
    ``PASS_1_CHUNKS`` at 1), and pass 1 leaves exactly what one thread leaves."""
    part = _log(tmp_path, codec)
    step = 16 << 10
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", step)
    monkeypatch.setattr(_build, "PASS_1_CHUNKS", 1)
    assert len(_chunk_bases(part, step)) >= 4
    walkers = _walked_by(monkeypatch)
    one = _pass1(part, map_bytes, cache_bytes, None)
    assert set(walkers) == {threading.current_thread().name}
    for other in _pools(pool):
        walkers.clear()
        got = _pass1(part, map_bytes, cache_bytes, other)
        assert _same(got, one), type(other).__name__
        if isinstance(other, _AllInPool):  # every chunk but a segment's first, walked ahead
            here = walkers.count(threading.current_thread().name)
            assert 0 < here <= len(one["segments"])
            assert len(walkers) > here


def _spoil_crc(part: Path, base_offset: int) -> int:
    """Flip a CRC bit of the first segment's batch at ``base_offset``; returns its position."""
    seg = sorted(part.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    batches = scan_batches(np.frombuffer(bytes(data), np.uint8)).batches
    row = batches[batches[:, k.B_BASE_OFFSET] == base_offset][0]
    pos = int(row[k.B_POS])
    data[pos + 17] ^= 0x01  # the CRC field: bytes 17 to 20 of the header
    seg.write_bytes(bytes(data))
    return pos


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_a_bad_chunk_walked_ahead_is_raised_when_its_turn_comes(
    tmp_path: Path, codec: str, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the walk refuses (a CRC that does not match) in the third chunk: with a pool its
    walk runs ahead on the pool thread, and its error is the one one thread raises, no sooner
    than one thread would raise it (the chunks before it are in the map)."""
    part = _log(tmp_path, codec)
    step = 16 << 10
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", step)
    monkeypatch.setattr(_build, "PASS_1_CHUNKS", 1)
    bad = _chunk_bases(part, step)[2]
    pos = _spoil_crc(part, bad)
    mapped: list[int] = []
    map_chunk = _build._map_chunk

    def spy(arr: Any, batches: Any, *args: Any, **kw: Any) -> Any:
        mapped.append(int(batches[0, k.B_BASE_OFFSET]))
        return map_chunk(arr, batches, *args, **kw)

    monkeypatch.setattr(_build, "_map_chunk", spy)
    with pytest.raises(CorruptRecordError) as one:
        _pass1(part, 1 << 20, 1 << 20, None)
    assert one.value.position == pos
    first = list(mapped)
    assert len(first) == 2
    for other in _pools(pool):
        mapped.clear()
        with pytest.raises(CorruptRecordError) as two:
            _pass1(part, 1 << 20, 1 << 20, other)
        assert str(two.value) == str(one.value)
        assert mapped == first


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_a_bad_chunk_past_a_full_map_is_never_an_error(
    tmp_path: Path, codec: str, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The map fills in a chunk, and the chunk after it holds a batch the walk refuses: one
    thread stops at the full map and never reads that chunk, so with a pool the walk ahead's
    error must not surface either, and pass 1 leaves the same."""
    part = _log(tmp_path, codec)
    step = 16 << 10
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", step)
    monkeypatch.setattr(_build, "PASS_1_CHUNKS", 1)
    map_bytes = 24 * 400
    end = _pass1(part, map_bytes, 1 << 20, None)["end"]
    bases = _chunk_bases(part, step)
    after = [b for b in bases if b > end]
    assert after, "the map fills before the first segment's last chunk"
    _spoil_crc(part, after[0])  # the first batch of the chunk after the one that filled it
    one = _pass1(part, map_bytes, 1 << 20, None)
    assert one["full"]
    assert one["end"] == end
    for other in _pools(pool):
        assert _same(_pass1(part, map_bytes, 1 << 20, other), one), type(other).__name__
