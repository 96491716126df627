"""The engine's own contract: what it writes (copies, rebuilds, horizons, codecs), where (mtime,
checkpoint), the strategies across passes, chunking, and how it fails on corrupt input."""

from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.memory_records import MemoryRecords

from cleanerd.compaction import Throttler, _filter as filter_mod, plan_log
from cleanerd.compaction._cleaned import _group_writer as group_writer_mod, _writer as writer_mod
from cleanerd.compaction._cleaned._rebuild import NO_HORIZON, rebuild_batches
from cleanerd.compaction._cleaner import Cleaner, segment_sizes
from cleanerd.compaction._grouping import group_segments
from cleanerd.compaction._offset_map import _build as build_mod
from cleanerd.format import (
    ATTR_DELETE_HORIZON,
    Compression,
    CorruptRecordError,
    Record,
    _crc as crc_mod,
    build_batch,
    index_batches,
    kernels as k,
    records_from_index,
    scan_batches,
)
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    PartitionLog,
    TopicPartition,
    _chunks as chunks_mod,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from cleanerd.topics import LogConfig, Strategy, StrategyConfig
from tests.support.cleaning import (
    DAY,
    LARGE_TS,
    OFFSET,
    batches_of,
    clean,
    clean_until_done,
    compacted_config,
    data_records,
    files_snapshot,
    make_plan,
    new_log,
    no_temp_files,
    offset_map,
    rec,
)

TIMESTAMP = StrategyConfig(Strategy.TIMESTAMP)
HEADER = StrategyConfig(Strategy.HEADER, "v")


def _log_bytes(log: PartitionLog) -> list[bytes]:
    return [s.log_path.read_bytes() for s in log.segments]


# --- what is written ---------------------------------------------------------------------------
def test_untouched_batches_are_copied_byte_for_byte(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=600)
    for i in range(20):
        log.append([rec(i, i), rec(100 + i, i)], compression=Compression.LZ4)
    log.roll()
    before = _log_bytes(log)
    result = clean(log)
    assert _log_bytes(log) == before
    assert result.stats.batches_copied == 20
    assert result.stats.batches_rebuilt == 0
    assert result.stats.bytes_written == result.stats.bytes_read == sum(map(len, before))


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("log_append_time", [False, True])
def test_rebuilt_batch_keeps_its_header_fields(
    tmp_path: Path, codec: Compression, log_append_time: bool
) -> None:
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(), clock=lambda: 5_000)
    records = [rec(1, 1, ts=1000), rec(2, 2, ts=3000), rec(3, None, ts=2000), rec(4, 4, ts=1500)]
    log.append(
        records,
        compression=codec,
        producer_id=7,
        producer_epoch=3,
        base_sequence=10,
        log_append_time=log_append_time,
        leader_epoch=4,
    )
    log.append([rec(2, 9, ts=4000)])  # supersedes key 2
    log.roll()
    old = batches_of(log)[0].header
    now = 1_000_000
    clean(log, now=now)
    new = batches_of(log)[0].header
    assert new.base_offset == old.base_offset == 0
    assert new.last_offset == old.last_offset == 3
    assert new.base_sequence == 10
    assert new.last_sequence == old.last_sequence == 13
    assert (new.producer_id, new.producer_epoch) == (7, 3)
    assert new.partition_leader_epoch == 4
    assert new.compression == codec
    assert new.timestamp_type == old.timestamp_type
    assert new.records_count == 3
    assert new.delete_horizon_ms == now + DAY  # a tombstone is kept: the horizon is stamped
    assert new.attributes & ATTR_DELETE_HORIZON
    if log_append_time:
        assert new.max_timestamp == old.max_timestamp == 5_000
        expected = {0: 5_000, 2: 5_000, 3: 5_000}
    else:
        assert new.max_timestamp == 2000  # the max of the kept records: it can go down
        expected = {0: 1000, 2: 2000, 3: 1500}
    assert {o: r.timestamp for o, r in data_records(log).items() if o < 4} == expected
    # kafka-python reads the rebuilt batch (CRC included) the same way
    mr = MemoryRecords(log.segments[0].log_path.read_bytes())
    batch = mr.next_batch()
    assert batch.validate_crc()
    assert [(r.offset, r.key, r.value) for r in batch] == [
        (0, b"1", b"1"),
        (2, b"3", None),
        (3, b"4", b"4"),
    ]


def test_horizon_is_carried_and_then_honoured(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([rec(1, None), rec(2, 2)])
    log.roll()
    clean(log, now=100)
    assert batches_of(log)[0].header.delete_horizon_ms == 100 + DAY
    log.append([rec(2, 3)])  # the tombstone's batch loses a record: rebuilt, horizon carried
    log.roll()
    clean(log, now=200)
    assert batches_of(log)[0].header.delete_horizon_ms == 100 + DAY
    assert sorted(data_records(log)) == [0, 2]
    clean(log, now=100 + DAY)
    assert sorted(data_records(log)) == [2]


def test_cleaned_segment_takes_the_mtime_of_its_last_source(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=300)
    for i in range(12):
        log.append([rec(i % 3, i)])
    log.roll()
    sources = log.segments[:-1]
    stamps = []
    for n, seg in enumerate(sources):
        mtime = (1_600_000_000 + n) * 10**9
        os.utime(seg.log_path, ns=(mtime, mtime))
        stamps.append(mtime)
    sizes = [segment_sizes(s) for s in sources]
    groups = group_segments(sizes, 300, log.config.segment_index_bytes, log.log_end_offset)
    assert len(groups) > 1
    clean(log)
    mtimes = {s.base_offset: s.log_path.stat().st_mtime_ns for s in log.segments[:-1]}
    for group in groups:
        assert mtimes[sources[group[0]].base_offset] == stamps[group[-1]]


def test_checkpoint_is_written_and_other_entries_kept(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    other = TopicPartition("other", 3)
    path = log.directory.parent / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {other: 42})
    for i in range(5):
        log.append([rec(i % 2, i)])
    log.roll()
    assert clean(log).end_offset == 5
    assert read_offset_checkpoint(path) == {other: 42, log.topic_partition: 5}


def test_nothing_to_clean_is_a_no_op(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([rec(1, 1)])
    before = files_snapshot(log.directory)
    result = clean(log, 1, 1)
    assert result.end_offset == 1
    assert files_snapshot(log.directory) == before


def test_map_must_match_the_strategy(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    with pytest.raises(ValueError, match="offset map"):
        Cleaner(offset_map()).clean(
            log, make_plan(log, 0, 1), compacted_config(), TIMESTAMP, LARGE_TS
        )


@pytest.mark.slow
def test_small_chunks_write_the_same_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def build(d: Path) -> PartitionLog:
        log = new_log(d, segment_bytes=4000, index_interval_bytes=50)
        for i in range(300):
            log.append([rec(i % 17, i), rec(None, i)], compression=Compression.GZIP)
        log.roll()
        return log

    big = build(tmp_path / "a")
    clean_until_done(big, offset_map(16), OFFSET, compacted_config(), LARGE_TS)
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 150)
    monkeypatch.setattr(writer_mod, "APPEND_BYTES", 100)
    small = build(tmp_path / "b")
    clean_until_done(small, offset_map(16), OFFSET, compacted_config(), LARGE_TS)
    assert _log_bytes(small) == _log_bytes(big)
    assert small.segments[0].offset_index.entries > big.segments[0].offset_index.entries


def test_throttler_sees_reads_and_writes(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for i in range(50):
        log.append([rec(i % 5, i)])
    log.roll()
    throttler = Throttler(None)
    result = Cleaner(offset_map(), throttler).clean(
        log, make_plan(log, 0, 50), compacted_config(), OFFSET, LARGE_TS
    )
    stats = result.stats
    assert throttler.bytes_total == stats.map_bytes_read + stats.bytes_read + stats.bytes_written


# --- strategies across passes ------------------------------------------------------------------
def test_timestamp_strategy_keeps_an_older_clean_record(tmp_path: Path) -> None:
    """The winner is the best record of the whole log: a clean record with a later timestamp
    beats a newer offset in the dirty range, which is dropped."""
    log = new_log(tmp_path)
    log.append([rec(1, 1, ts=5000), rec(2, 2, ts=100)])
    log.roll()
    clean_until_done(log, offset_map(strategy=TIMESTAMP), TIMESTAMP, compacted_config(), LARGE_TS)
    log.append([rec(1, 3, ts=4000), rec(2, 4, ts=200)])  # key 1: stale; key 2: newer
    log.roll()
    clean_until_done(log, offset_map(strategy=TIMESTAMP), TIMESTAMP, compacted_config(), LARGE_TS)
    assert {o: (r.key, r.value) for o, r in data_records(log).items()} == {
        0: (b"1", b"1"),
        3: (b"2", b"4"),
    }


def _versioned(key: int, value: int, version: int | None, raw: bytes | None = None) -> Record:
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if raw is not None:
        headers = (("v", raw),)
    elif version is not None:
        headers = (("v", struct.pack(">q", version)),)
    return Record(0, 0, b"%d" % key, b"%d" % value, headers)


def test_header_strategy_versions_and_anomalies(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append(
        [
            _versioned(1, 1, 5),  # 0: key 1 at version 5 wins over a later version 3
            _versioned(1, 2, 3),  # 1
            _versioned(2, 3, None),  # 2: key 2 without a version loses to one with
            _versioned(2, 4, -7),  # 3
            _versioned(3, 5, 2),  # 4: key 3: a header of the wrong length counts as missing
            _versioned(3, 6, None, raw=b"\x01"),  # 5
            _versioned(4, 7, None),  # 6: neither has one: the higher offset
            _versioned(4, 8, None),  # 7
        ]
    )
    log.roll()
    results = clean_until_done(log, offset_map(strategy=HEADER), HEADER, compacted_config(), 0)
    assert sorted(data_records(log)) == [0, 3, 4, 7]
    assert sum(r.stats.anomalous_version_headers for r in results) == 1


def test_stale_tombstone_does_not_delete_a_newer_version(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append([_versioned(1, 1, 9)])
    log.append([Record(0, 0, b"1", None, (("v", struct.pack(">q", 4)),))])  # stale delete
    log.roll()
    clean_until_done(log, offset_map(strategy=HEADER), HEADER, compacted_config(), 0)
    assert {o: r.value for o, r in data_records(log).items()} == {0: b"1"}


# --- corrupt input -----------------------------------------------------------------------------
def _corrupt_log(tmp_path: Path) -> PartitionLog:
    log = new_log(tmp_path, segment_bytes=500)
    for i in range(30):
        log.append([rec(i % 4, i)])
    log.roll()
    return log


@pytest.mark.parametrize("segment", [0, 2])
@pytest.mark.parametrize("first_dirty_segment", [0, 1, 3])
def test_bad_crc_fails_naming_segment_and_position(
    tmp_path: Path, segment: int, first_dirty_segment: int
) -> None:
    """A bad CRC anywhere pass 2 would read (dirty or already clean) stops the clean before
    any segment is replaced; no ``.cleaned`` file is left."""
    log = _corrupt_log(tmp_path)
    seg = log.segments[segment]
    position = int(scan_batches(seg.view()).batches[1, k.B_POS])  # the segment's second batch
    with open(seg.log_path, "r+b") as f:
        f.seek(position + 65)  # inside its first record
        byte = f.read(1)
        f.seek(position + 65)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = files_snapshot(log.directory)
    first_dirty = log.segments[first_dirty_segment].base_offset
    with pytest.raises(CorruptRecordError) as info:
        clean(log, first_dirty)
    assert info.value.path == str(seg.log_path)
    assert info.value.position == position
    assert "CRC" in str(info.value)
    assert files_snapshot(log.directory) == before
    assert no_temp_files(log.directory)


def test_truncated_batch_fails_and_leaves_the_log(tmp_path: Path) -> None:
    log = _corrupt_log(tmp_path)
    seg = log.segments[1]
    size = seg.log_path.stat().st_size
    with open(seg.log_path, "r+b") as f:
        f.truncate(size - 5)
    before = files_snapshot(log.directory)
    with pytest.raises(CorruptRecordError) as info:
        clean(log)
    assert info.value.path == str(seg.log_path)
    assert info.value.position is not None
    assert 0 < info.value.position < size
    assert files_snapshot(log.directory) == before
    assert no_temp_files(log.directory)


# --- the rebuild kernel --------------------------------------------------------------------------
_REC = st.tuples(
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.integers(-(2**40), 2**40),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=9))), max_size=3
    ),
    st.integers(1, 3),  # offset gap before it
)


_BATCH = st.tuples(
    st.lists(_REC, min_size=1, max_size=12),
    st.sampled_from(list(Compression)),
    st.booleans(),  # log append time
    st.one_of(st.none(), st.integers(0, 2**50)),  # delete horizon to stamp
    st.booleans(),  # rebuilt in this call (else left out of ``rows``)
)


@pytest.mark.slow
@settings(max_examples=150)
@given(
    batch_specs=st.lists(_BATCH, min_size=1, max_size=4), data=st.data(), crc_kernel=st.booleans()
)
def test_rebuild_kernel_writes_what_the_builder_writes(
    batch_specs: list[Any], data: st.DataObject, crc_kernel: bool
) -> None:
    """Several batches (any codecs) rebuilt in one call: each is what the builder writes for
    its kept records, with the CRC kernel or the library's CRC."""
    offset = 100
    raws: list[bytes] = []
    expected_args: list[dict[str, Any]] = []
    all_records: list[list[Record]] = []
    for i, (recs, codec, log_append_time, horizon, _) in enumerate(batch_specs):
        base = offset
        records = []
        for key, value, ts, headers, gap in recs:
            offset += gap
            records.append(Record(offset, ts, key, value, tuple(headers)))
        args: dict[str, Any] = {
            "base_offset": base,
            "last_offset": offset + 2,
            "compression": codec,
            "log_append_time": log_append_time,
            "producer_id": 5 + i,
            "producer_epoch": 1,
            "base_sequence": 7,
            "partition_leader_epoch": 3,
            "transactional": True,
        }
        raws.append(build_batch(records, **args))
        expected_args.append(args | {"delete_horizon_ms": horizon})
        all_records.append(records)
        offset += 3
    buf = b"".join(raws)
    scan = scan_batches(buf)
    payload, index = index_batches(buf, scan.batches)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(index), max_size=len(index))))
    rows = [i for i, spec in enumerate(batch_specs) if spec[4]] or [0]
    for row in rows:  # every rebuilt batch keeps at least one record
        in_batch = np.flatnonzero(index[:, k.R_BATCH] == row)
        keep[in_batch[data.draw(st.integers(0, in_batch.size - 1))]] = True
    kept = np.flatnonzero(keep)
    stamp = np.array(
        [NO_HORIZON if spec[3] is None else spec[3] for spec in batch_specs], dtype=np.int64
    )
    with patch.object(crc_mod, "AVAILABLE", crc_kernel and crc_mod.AVAILABLE):
        rebuilt = rebuild_batches(
            payload, index, kept, index[kept, k.R_BATCH], scan.batches, np.array(rows), stamp
        )
    assert rebuilt.ends.tolist() == [*rebuilt.starts[1:].tolist(), len(rebuilt.buf)]
    for j, row in enumerate(rows):
        mine = index[kept][index[kept, k.R_BATCH] == row]
        args = expected_args[row]
        slow = build_batch(
            list(records_from_index(payload, mine)),
            **args,
            max_timestamp=int(scan.batches[row, k.B_MAX_TIMESTAMP])
            if args["log_append_time"]
            else None,
        )
        assert rebuilt.batch(j) == slow
        assert int(rebuilt.max_ts[j]) == int(scan_batches(slow).batches[0, k.B_MAX_TIMESTAMP])


# --- Kafka tests 17 to 20: large and corrupt messages ---------------------------------------------
def test_large_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka test 17: a batch far larger than a chunk is read on its own (no buffer limit)."""
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 1024)
    log = new_log(tmp_path, max_message_bytes=1024)  # test 18: the topic limit is not enforced
    big = b"x" * (1 << 20)
    log.append([Record(0, 0, b"a", big)])
    log.append([Record(0, 0, b"b", b"small")])
    log.append([Record(0, 0, b"a", big + b"!")])
    log.roll()
    clean(log)
    assert {o: r.value for o, r in data_records(log).items()} == {1: b"small", 2: big + b"!"}


def test_message_larger_than_max_size_with_corrupt_header(tmp_path: Path) -> None:
    """Kafka test 19: a magic byte of 0xFF is corrupt input, named by file and position."""
    log = _corrupt_log(tmp_path)
    seg = log.segments[0]
    position = int(scan_batches(seg.view()).batches[2, k.B_POS])
    with open(seg.log_path, "r+b") as f:
        f.seek(position + 16)
        f.write(b"\xff")
    with pytest.raises(CorruptRecordError) as info:
        clean(log)
    assert (info.value.path, info.value.position) == (str(seg.log_path), position)
    assert "magic" in info.value.reason
    assert no_temp_files(log.directory)


def test_corrupt_message_size_larger_than_bytes_available(tmp_path: Path) -> None:
    """Kafka test 20: a segment cut short mid-batch."""
    log = new_log(tmp_path)
    for i in range(40):
        log.append([rec(i % 4, i)])
    log.roll()
    seg = log.segments[0]
    with open(seg.log_path, "r+b") as f:
        f.truncate(1024)
    with pytest.raises(CorruptRecordError) as info:
        clean(log)
    assert info.value.path == str(seg.log_path)
    assert no_temp_files(log.directory)


@pytest.mark.parametrize("cache_bytes", [0, 25 * 40, 64 << 20])
def test_record_cache_changes_nothing_but_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_bytes: int
) -> None:
    """Pass 2 decides the batches pass 1 cached without reading them; whatever the cache holds
    (nothing, some chunks, all), the cleaned log is the same."""
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 1500)

    def run(d: Path, cache: int) -> tuple[list[bytes], Any]:
        log = new_log(d, segment_bytes=3000)
        for i in range(200):
            key = None if i % 23 == 0 else i % 13
            log.append(
                [rec(key, None if i % 7 == 0 else i), rec(i % 5, i)], compression=Compression.LZ4
            )
        log.roll()
        cleaner = Cleaner(offset_map(), record_cache_bytes=cache)
        result = cleaner.clean(
            log,
            make_plan(log, 0, log.active_segment.base_offset),
            compacted_config(),
            OFFSET,
            LARGE_TS,
        )
        return _log_bytes(log), result.stats

    reference, plain = run(tmp_path / "ref", 0)
    got, stats = run(tmp_path / "got", cache_bytes)
    assert got == reference
    assert stats.messages_written == plain.messages_written
    assert stats.invalid_messages_read == plain.invalid_messages_read
    assert stats.tombstones_removed == plain.tombstones_removed
    if cache_bytes:
        assert (
            stats.batches_dropped_without_decompressing
            > plain.batches_dropped_without_decompressing
        )


@pytest.mark.parametrize("layout", ["dirty_from_mid_batch", "offsets_past_2_32"])
def test_record_cache_leaves_out_what_it_cannot_decide(tmp_path: Path, layout: str) -> None:
    """The cache keeps no key hash, so it takes only batches wholly in the dirty range (a record
    before it would need a map lookup) and offsets within 2^32 of its start; the batches it
    leaves out are read in pass 2, and the log comes out as without a cache."""

    def run(d: Path, cache: int) -> tuple[list[bytes], Any]:
        log = new_log(d, segment_bytes=1 << 20)
        for i in range(60):
            log.append([rec(i % 7, i), rec(i % 11, None if i % 5 == 0 else i), rec(i % 3, i)])
        if layout == "offsets_past_2_32":
            log.roll(1 << 33)  # the next segment's records lie 2^33 past the dirty range's start
            for i in range(60):
                log.append([rec(i % 13, i), rec(i % 7, None if i % 4 == 0 else i)])
        log.roll()
        start = 91 if layout == "dirty_from_mid_batch" else 0  # 91: the middle of a batch
        result = Cleaner(offset_map(), record_cache_bytes=cache).clean(
            log, make_plan(log, start, log.active_segment.base_offset), compacted_config(),
            OFFSET, LARGE_TS,
        )  # fmt: skip
        return _log_bytes(log), result.stats

    reference, plain = run(tmp_path / "ref", 0)
    got, stats = run(tmp_path / "got", 64 << 20)
    assert got == reference
    assert stats.messages_written == plain.messages_written
    assert stats.tombstones_removed == plain.tombstones_removed
    assert stats.batches_dropped_without_decompressing > plain.batches_dropped_without_decompressing


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
@pytest.mark.parametrize("threads", [1, 2])
def test_chunks_cut_by_record_count_write_the_same_log_and_bound_each_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_bytes: int, threads: int
) -> None:
    """Chunks of many tiny records (compressed batches hold tens of thousands in a few KiB) are
    cut at ``storage.chunk_records()``: neither pass takes more records at once, whether pass 2
    reads the segments again or decides from pass 1's cache, and the log written is the same."""

    def build(d: Path) -> PartitionLog:
        log = new_log(d, segment_bytes=1 << 20)
        for i in range(40):
            size = 50 if i % 5 else 700
            log.append(
                [rec((i * 31 + j) % 97, None if j % 11 == 0 else j) for j in range(size)],
                compression=Compression.ZSTD if i % 3 else Compression.LZ4,
            )
        log.roll()
        return log

    def run(d: Path) -> tuple[list[bytes], int, int]:
        log = build(d)
        seen = {"map": 0, "decide": 0}
        map_chunk, decide = build_mod._map_chunk, filter_mod.decide_chunk

        def spy_map(arr: Any, batches: Any, *args: Any, **kw: Any) -> Any:
            seen["map"] = max(seen["map"], int(batches[:, k.B_COUNT].sum()))
            return map_chunk(arr, batches, *args, **kw)

        def spy_decide(ctx: Any, meta: Any, arr: Any, batches: Any, *args: Any, **kw: Any) -> Any:
            seen["decide"] = max(seen["decide"], int(batches[:, k.B_COUNT].sum()))
            return decide(ctx, meta, arr, batches, *args, **kw)

        with monkeypatch.context() as m:
            m.setattr(build_mod, "_map_chunk", spy_map)
            m.setattr(group_writer_mod, "decide_chunk", spy_decide)
            pool = ThreadPoolExecutor(threads - 1) if threads > 1 else None
            try:
                cleaner = Cleaner(offset_map(), record_cache_bytes=cache_bytes,
                                  decompression_pool=pool)  # fmt: skip
                config = compacted_config()
                _, p = plan_log(log, config, LARGE_TS)
                cleaner.clean(log, p, config, OFFSET, LARGE_TS)
            finally:
                if pool is not None:
                    pool.shutdown()
        return _log_bytes(log), seen["map"], seen["decide"]

    whole, map_whole, decide_whole = run(tmp_path / "a")
    assert map_whole > 5000  # one chunk held every record
    assert decide_whole > 5000
    monkeypatch.setattr(chunks_mod, "CHUNK_RECORDS", 1000)
    cut, map_cut, decide_cut = run(tmp_path / "b")
    assert cut == whole
    assert map_cut <= 1000
    assert decide_cut <= 1000


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_pass_2_decides_uncompressed_batches_in_wide_parts_only_while_pages_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: Compression
) -> None:
    """Pass 2 takes what pass 1 cached in parts: of uncompressed batches, as wide as
    ``iter_chunks`` reads them while the cleaning keeps its log mapped anyway; otherwise (a
    log past ``RESIDENT_LOG_BYTES``, or compressed batches) one chunk's bytes. Same log out."""
    step = 2048
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", step)

    def run(d: Path, resident: int) -> tuple[list[bytes], int]:
        log = new_log(d, segment_bytes=1 << 20)
        for i in range(200):
            log.append([rec((i * 7 + j) % 61, i * 10 + j) for j in range(8)], compression=codec)
        log.roll()
        widest = 0
        decide = filter_mod.decide_chunk

        def spy(ctx: Any, meta: Any, arr: Any, batches: Any, *args: Any, **kw: Any) -> Any:
            nonlocal widest
            widest = max(widest, int(batches[:, k.B_SIZE].sum()))
            return decide(ctx, meta, arr, batches, *args, **kw)

        with monkeypatch.context() as m:
            m.setattr(group_writer_mod, "decide_chunk", spy)
            m.setattr(chunks_mod, "RESIDENT_LOG_BYTES", resident)
            clean(log)
        return _log_bytes(log), widest

    kept, kept_widest = run(tmp_path / "a", 1 << 30)
    dropped, dropped_widest = run(tmp_path / "b", 0)
    assert kept == dropped
    assert dropped_widest <= step
    if codec is Compression.NONE:
        assert step < kept_widest <= chunks_mod.uncompressed_chunk_bytes()
    else:
        assert kept_widest <= step
