"""A group's cleaned output rolls into several segments when it would overflow one (KAFKA-20036).

Kafka's rule (docs/kafka-format.md §4.8), restated here as the oracle ``kafka_roll`` from the
batch headers alone: walking the output batches in order, a batch that would take the current
cleaned segment past its byte limit, or whose last offset lies more than 2^31-1 past the
segment's base, closes that segment and starts a new one based at the batch's first offset.
The byte limit is Kafka's int32 file size; the tests lower ``_writer.MAX_SEGMENT_BYTES`` to reach
it with small logs. Rolling never changes a batch, so the segments end to end must be the bytes
of the one segment the same clean writes without the limit.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import crc32c
import pytest
import zstandard
from kafka.record.memory_records import MemoryRecords

from cleanerd.compaction._cleaned import _writer as writer_mod
from cleanerd.format import INT_MAX, Compression, Record, build_batch
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import PartitionLog, TransactionIndex
from cleanerd.topics import LogConfig
from tests.support.cleaning import clean, data_records

WORDS = [f"w{i:03d}" for i in range(400)]
HEADER = 61


def kafka_roll(log_bytes: bytes, first_base: int, limit: int) -> list[tuple[int, bytes]]:
    """KAFKA-20036's roll over a cleaned group's batches: (base offset, bytes) per segment,
    read with ``struct`` from the v2 header (baseOffset @0, batchLength @8, lastOffsetDelta @23)."""
    segments: list[tuple[int, bytearray]] = [(first_base, bytearray())]
    pos = 0
    while pos < len(log_bytes):
        base_offset, length = struct.unpack_from(">qi", log_bytes, pos)
        (delta,) = struct.unpack_from(">i", log_bytes, pos + 23)
        batch = log_bytes[pos : pos + 12 + length]
        seg_base, data = segments[-1]
        over_size = len(data) + len(batch) > limit and len(data) > 0
        over_offsets = base_offset + delta - seg_base > INT_MAX
        if over_size or over_offsets:
            segments.append((base_offset, bytearray()))
        segments[-1][1].extend(batch)
        pos += 12 + length
    return [(b, bytes(d)) for b, d in segments]


def _level19(batch: bytes) -> bytes:
    """The zstd batch as a producer with ``compression.zstd.level=19`` writes it: the cleaner
    rebuilds it at the codec's default level (KIP-390), which can take more bytes."""
    payload = zstandard.ZstdDecompressor().decompressobj().decompress(batch[HEADER:])
    body = bytearray(batch[:HEADER]) + zstandard.ZstdCompressor(level=19).compress(payload)
    struct.pack_into(">i", body, 8, len(body) - 12)
    struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
    return bytes(body)


def _build(directory: Path, batches: int = 60) -> PartitionLog:
    """Level-19 zstd batches of 30 records; each batch's first record updates a key of the
    batch before, so every batch but the last loses one record and is rebuilt."""
    rng = random.Random(20036)
    log = PartitionLog.create(directory, LogConfig(segment_bytes=4000), clock=lambda: 0)
    offset = 0
    for b in range(batches):
        records = []
        for i in range(30):
            key = f"b{b - 1}-{5}" if i == 0 and b else f"b{b}-{i}"
            value = " ".join(rng.choice(WORDS) for _ in range(12)).encode()
            records.append(Record(offset + i, 1000 + offset + i, key.encode(), value))
        log.append_batches(_level19(build_batch(records, compression=Compression.ZSTD)))
        offset += len(records)
    log.roll()
    log.close()
    # clean with one group: every source segment fits segment.bytes together
    return PartitionLog(directory, LogConfig(segment_bytes=1 << 30), clock=lambda: 0)


def _cleaned_files(log: PartitionLog, upper: int) -> list[tuple[int, bytes]]:
    return [(s.base_offset, s.log_path.read_bytes()) for s in log.segments if s.base_offset < upper]


def _records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(o, r.key, r.value) for o, r in sorted(data_records(log).items())]


def _kafka_python_batches(data: bytes) -> list[tuple[int, int]]:
    """(base offset, records) of every batch, decoded by kafka-python with its CRC checked."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        out.append((batch.base_offset, len(list(batch))))
    return out


def _reference(
    tmp_path: Path,
) -> tuple[int, list[tuple[int, bytes]], list[tuple[int, bytes | None, bytes | None]]]:
    """The group's input bytes, its one cleaned segment and its records, without a limit."""
    log = _build(tmp_path / "reference-0")
    upper = log.active_segment.base_offset
    input_bytes = sum(s.size for s in log.segments[:-1])
    clean(log)
    files = _cleaned_files(log, upper)
    return input_bytes, files, _records(log)


def test_recompressed_output_that_outgrows_its_group_rolls_into_more_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    input_bytes, reference, want = _reference(tmp_path)
    assert len(reference) == 1
    (ref_base, ref_bytes) = reference[0]
    # the scenario of KAFKA-20036: the group fits, its output recompressed at the default level
    # does not
    assert len(ref_bytes) > input_bytes

    monkeypatch.setattr(writer_mod, "MAX_SEGMENT_BYTES", input_bytes)
    log = _build(tmp_path / "t-0")
    upper = log.active_segment.base_offset
    clean(log)
    got = _cleaned_files(log, upper)

    assert len(got) == 2
    assert got == kafka_roll(ref_bytes, ref_base, input_bytes)
    assert b"".join(d for _, d in got) == ref_bytes
    assert _records(log) == want
    assert verify_partition(log.directory).problems == []
    for base, data in got:
        decoded = _kafka_python_batches(data)
        assert decoded[0][0] == base
        assert len(data) <= input_bytes


@pytest.mark.parametrize("divisor", [3, 7])
def test_every_rolled_segment_follows_kafkas_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, divisor: int
) -> None:
    _, reference, want = _reference(tmp_path)
    ((ref_base, ref_bytes),) = reference
    limit = len(ref_bytes) // divisor
    monkeypatch.setattr(writer_mod, "MAX_SEGMENT_BYTES", limit)
    log = _build(tmp_path / "t-0")
    upper = log.active_segment.base_offset
    clean(log)
    got = _cleaned_files(log, upper)
    assert len(got) >= divisor
    assert got == kafka_roll(ref_bytes, ref_base, limit)
    assert _records(log) == want
    assert verify_partition(log.directory).problems == []
    # the next clean finds nothing to change, and the groups it makes hold the rolled segments
    clean(log)
    assert _records(log) == want


def test_a_batch_past_the_32_bit_range_of_its_segment_starts_a_new_one(tmp_path: Path) -> None:
    """A source segment holding offsets more than 2^31-1 past its base (a legacy segment, as in
    KAFKA-6264): Kafka used to split it and abort the pass; the output now rolls at that batch."""
    far = INT_MAX + 10
    directory = tmp_path / "t-0"
    log = PartitionLog.create(directory, LogConfig(), clock=lambda: 0)
    log.append([Record(0, 1, b"a", b"1")])
    log.append([Record(1, 2, b"b", b"1")])
    log.roll()
    log.close()
    # the legacy batch goes straight into the inactive segment's file, as an old broker left it,
    # and the empty active segment moves past it
    with (directory / f"{0:020d}.log").open("ab") as f:
        f.write(build_batch([Record(far, 3, b"c", b"1")]))
    for p in directory.glob(f"{2:020d}.*"):
        p.unlink()
    (directory / f"{far + 1:020d}.log").touch()
    log = PartitionLog(directory, clock=lambda: 0)
    log.append([Record(0, 4, b"a", b"2")])
    log.roll()
    before = _records(log)
    clean(log)
    assert [s.base_offset for s in log.segments] == [0, far, far + 1, far + 2]
    assert _records(log) == [r for r in before if r[0] != 0]
    assert verify_partition(log.directory).problems == []


def test_aborted_transactions_are_indexed_in_the_segment_that_holds_their_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def build(directory: Path) -> PartitionLog:
        log = PartitionLog.create(directory, LogConfig(segment_bytes=3000), clock=lambda: 0)
        for t in range(12):
            pid = 100 + t % 3
            recs = [Record(0, 10 + t, f"k{t}-{i}".encode(), b"v" * 40) for i in range(5)]
            log.append(recs, producer_id=pid, producer_epoch=0, transactional=True)
            log.append([Record(0, 10 + t, f"plain{t}".encode(), b"x" * 60)])
            log.append_marker(commit=t % 2 == 0, producer_id=pid, producer_epoch=0, timestamp=20)
        log.roll()
        log.close()
        return PartitionLog(directory, LogConfig(segment_bytes=1 << 30), clock=lambda: 0)

    reference = build(tmp_path / "reference-0")
    clean(reference)
    want_entries = sorted(
        (e.producer_id, e.first_offset, e.last_offset)
        for s in reference.segments
        for e in TransactionIndex(s.txn_index.path, s.base_offset).all_aborted()
    )
    assert want_entries  # ABORT markers stay, re-indexed, in the first pass
    monkeypatch.setattr(writer_mod, "MAX_SEGMENT_BYTES", 700)
    log = build(tmp_path / "t-0")
    upper = log.active_segment.base_offset
    clean(log)
    assert _records(log) == _records(reference)
    segments = [s for s in log.segments if s.base_offset < upper]
    assert len(segments) > 2
    got_entries = []
    for seg in segments:
        end = seg.next_offset()
        for e in TransactionIndex(seg.txn_index.path, seg.base_offset).all_aborted():
            assert seg.base_offset <= e.last_offset < end  # the marker is in this segment
            got_entries.append((e.producer_id, e.first_offset, e.last_offset))
    assert sorted(got_entries) == want_entries
    assert verify_partition(log.directory).problems == []


def test_an_output_whose_indexes_fill_rolls_before_the_entry_that_would_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index.interval.bytes`` lowered after the data was written: the cleaned output takes
    more index entries than its sources, and ``segment.index.bytes`` bounds them. Kafka's append
    to a full index fails; cleanerd rolls (the active segment's rule, ``LogSegment`` full)."""
    directory = tmp_path / "t-0"
    log = PartitionLog.create(
        directory, LogConfig(segment_bytes=1500, index_interval_bytes=1 << 20), clock=lambda: 0
    )
    for i in range(30):
        log.append([Record(0, 1000 + i, f"k{i}".encode(), b"v" * 100)])
    log.roll()
    log.close()
    config = LogConfig(segment_index_bytes=48, index_interval_bytes=100)
    log = PartitionLog(directory, config, clock=lambda: 0)
    upper = log.active_segment.base_offset
    before = _records(log)
    sources = len(log.segments) - 1
    monkeypatch.setattr(writer_mod, "APPEND_BYTES", 1)  # one append, one index entry, per batch
    clean(log)
    cleaned = [s for s in log.segments if s.base_offset < upper]
    assert len(cleaned) > sources
    for seg in cleaned:
        assert seg.offset_index.entries <= 48 // 8
        assert seg.time_index.entries <= 48 // 12
    assert _records(log) == before
    assert verify_partition(directory).problems == []
