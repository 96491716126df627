"""Snapshot files (KIP-630): naming, framing, validation, and an independent decoder's view."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from cleanerd.format import Compression, Record
from cleanerd.snapshot._format import SnapshotError, SnapshotReader, SnapshotWriter
from cleanerd.storage import (
    SnapshotId,
    delete_snapshot,
    list_snapshots,
    parse_name,
    remove_leftovers,
    snapshot_dir,
)

RECORDS = [
    Record(10 + i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode() * 3, (("h", b"x"),))
    for i in range(2500)
]


def write(tmp_path: Path, sid: SnapshotId, codec: Compression = Compression.NONE) -> Path:
    with SnapshotWriter(
        tmp_path, sid, last_contained_timestamp=1_700_000_009_999, compression=codec
    ) as w:
        w.append(RECORDS)
        return w.finish()


def kafka_python_batches(data: bytes) -> list[tuple[DefaultRecordBatch, list[Any]]]:
    mr = MemoryRecords(data)
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        out.append((batch, list(batch)))
    assert mr.valid_bytes() == len(data)
    return out


def test_name_is_kafkas_twenty_and_ten_digits() -> None:
    sid = SnapshotId(5120793, 2)
    assert sid.file_name() == "00000000000005120793-0000000002.checkpoint"
    assert parse_name(sid.file_name()) == sid
    assert parse_name("00000000000005120793-0000000002.checkpoint.part") is None
    assert parse_name("00000000000000000000.log") is None


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.ZSTD])
def test_kafka_python_reads_header_data_and_footer(tmp_path: Path, codec: Compression) -> None:
    path = write(tmp_path, SnapshotId(2510, 7), codec)
    assert path.parent == snapshot_dir(tmp_path)
    batches = kafka_python_batches(path.read_bytes())
    head, *data, foot = batches
    # header: a control batch, offset 0, key (0, SNAPSHOT_HEADER=3), 11-byte value
    assert head[0].is_control_batch
    assert head[0].base_offset == 0
    (h,) = head[1]
    assert h.key == struct.pack(">hh", 0, 3)
    assert h.value == struct.pack(">hqB", 0, 1_700_000_009_999, 0)
    assert len(h.value) == 11
    # footer: last, key (0, SNAPSHOT_FOOTER=4), 3-byte value
    (f,) = foot[1]
    assert foot[0].is_control_batch
    assert f.key == struct.pack(">hh", 0, 4)
    assert f.value == b"\x00\x00\x00"
    assert f.offset == len(RECORDS) + 1
    # data: renumbered from 1, originals' timestamps, keys, values and headers kept
    got = [r for _, records in data for r in records]
    assert [r.offset for r in got] == list(range(1, len(RECORDS) + 1))
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (r.timestamp, r.key, r.value, list(r.headers)) for r in RECORDS
    ]
    for batch, _ in batches:
        assert batch.leader_epoch == 7
        assert batch.compression_type == (codec.value if batch not in (head[0], foot[0]) else 0)


def test_reader_gives_back_the_records(tmp_path: Path) -> None:
    path = write(tmp_path, SnapshotId(2510, 1), Compression.GZIP)
    with SnapshotReader(path) as r:
        assert r.info.records == len(RECORDS)
        assert r.info.last_contained_timestamp == 1_700_000_009_999
        got = list(r.records())
    assert [(x.key, x.value, x.timestamp, x.headers) for x in got] == [
        (x.key, x.value, x.timestamp, x.headers) for x in RECORDS
    ]


def _reject(path: Path, data: bytes, why: str) -> None:
    path.write_bytes(data)
    with pytest.raises(SnapshotError, match=why) as e:
        SnapshotReader(path)
    assert str(path) in str(e.value)


def test_truncated_footerless_corrupt_and_trailing_files_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, SnapshotId(2510, 0))
    good = path.read_bytes()
    with SnapshotReader(path) as r:
        footer_at = r._batches[-1].position
    bad = tmp_path / "bad.checkpoint"
    _reject(bad, b"", "empty file")
    _reject(bad, good[:-10], "at byte [0-9]+: (truncated|batch length field runs past)")
    _reject(bad, good[:footer_at], "no footer")
    flipped = bytearray(good)
    flipped[200] ^= 0xFF
    _reject(bad, bytes(flipped), "CRC|crc|corrupt")
    _reject(bad, good + b"\x00" * 7, "7 bytes after the footer|truncated|runs past")


def test_a_failed_write_leaves_no_snapshot_and_leftovers_are_removed(tmp_path: Path) -> None:
    def cut_short() -> None:
        with SnapshotWriter(tmp_path, SnapshotId(5, 0), last_contained_timestamp=0) as w:
            w.append(RECORDS[:5])
            raise RuntimeError("cut short")

    with pytest.raises(RuntimeError):
        cut_short()
    assert list_snapshots(tmp_path) == []
    assert list(snapshot_dir(tmp_path).iterdir()) == []
    # a part file left by a killed writer is not a snapshot, and the next run removes it
    w2 = SnapshotWriter(tmp_path, SnapshotId(6, 0), last_contained_timestamp=0)
    w2.append(RECORDS[:5])
    w2._file.flush()
    assert list_snapshots(tmp_path) == []
    assert remove_leftovers(tmp_path) == [w2.part]
    assert not w2.part.exists()


def test_listing_is_oldest_first_and_delete_goes_through_deleted(tmp_path: Path) -> None:
    a = write(tmp_path, SnapshotId(300, 2))
    b = write(tmp_path, SnapshotId(20, 1))
    assert [p for _, p in list_snapshots(tmp_path)] == [b, a]
    delete_snapshot(a)
    assert [p for _, p in list_snapshots(tmp_path)] == [b]
    assert sorted(p.name for p in snapshot_dir(tmp_path).iterdir()) == [b.name]
