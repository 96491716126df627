"""Segments written by Apache Kafka itself decode exactly as Kafka reads them.

The fixtures live in ``tests/fixtures/kafka/`` (vendored copies of the shared Kafka-generated
partitions; ``CLEANERD_FIXTURES`` overrides the location, see ``tests/support/kafka_fixtures.py``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cleanerd.format import (
    BatchHeader,
    BatchScan,
    Record,
    build_batch,
    index_batches,
    iter_batches,
    kernels as k,
    records_from_index,
    scan_batches,
)
from tests.support.kafka_fixtures import find_kafka_fixtures

PARTITIONS = ["small-gzip-hdr-tomb-0", "multiseg-snappy-0"]


@dataclass
class Segment:
    path: Path
    data: bytes
    scan: BatchScan
    records: list[Record]
    record_batch: list[int]  # row in scan.batches of each record


def _read_partition(partition: Path) -> list[Segment]:
    logs = sorted(partition.glob("*.log"))
    assert logs, f"no .log files in {partition}"
    out = []
    prev_last = -1
    for log in logs:
        data = log.read_bytes()
        scan = scan_batches(data, path=str(log), prev_last_offset=prev_last)
        assert scan.error is None, scan.error
        assert scan.end == len(data)
        payload, index = index_batches(data, scan.batches, path=str(log))
        records = list(records_from_index(payload, index))
        out.append(Segment(log, data, scan, records, [int(b) for b in index[:, k.R_BATCH]]))
        prev_last = int(scan.batches[-1, k.B_LAST_OFFSET])
    return out


@pytest.fixture(scope="module")
def partitions(kafka_fixtures: Path) -> dict[str, list[Segment]]:
    return {name: _read_partition(kafka_fixtures / name) for name in PARTITIONS}


def _expected(kafka_fixtures: Path, name: str) -> dict[str, Any]:
    with (kafka_fixtures / f"{name}.expected.json").open() as f:
        result: dict[str, Any] = json.load(f)
    return result


def test_fixture_directory_is_complete(kafka_fixtures: Path) -> None:
    names = sorted(
        p.name.removesuffix(".expected.json") for p in kafka_fixtures.glob("*.expected.json")
    )
    assert set(PARTITIONS) <= set(names), names
    assert (kafka_fixtures / "small-gzip-hdr-tomb-0.dump.jsonl").is_file()
    for name in names:
        assert (kafka_fixtures / name).is_dir(), name


def test_every_fixture_partition_decodes(kafka_fixtures: Path) -> None:
    # not just the known ones: anything added to the directory must decode too
    dirs = [p for p in sorted(kafka_fixtures.iterdir()) if p.is_dir()]
    assert len(dirs) >= len(PARTITIONS)
    for d in dirs:
        segments = _read_partition(d)
        assert sum(len(s.records) for s in segments) > 0


# -- (a) Kafka's own dump of small-gzip-hdr-tomb-0 ---------------------------------------------


def _batch_fields(h: BatchHeader) -> dict[str, Any]:
    """Our reading of a batch, in the dump's vocabulary (built field by field, not via describe)."""
    return {
        "base_offset": h.base_offset,
        "last_offset": h.base_offset + h.last_offset_delta,
        "magic": h.magic,
        "compression": ["none", "gzip", "snappy", "lz4", "zstd"][h.attributes & 7],
        "timestamp_type": "LogAppendTime" if h.attributes & 0x08 else "CreateTime",
        "transactional": bool(h.attributes & 0x10),
        "control": bool(h.attributes & 0x20),
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "partition_leader_epoch": h.partition_leader_epoch,
        "delete_horizon_ms": h.base_timestamp if h.attributes & 0x40 else None,
    }


def _dump_lines(kafka_fixtures: Path) -> list[dict[str, Any]]:
    path = kafka_fixtures / "small-gzip-hdr-tomb-0.dump.jsonl"
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def _decode_key(line: dict[str, Any]) -> bytes | None:
    key = line["key"]
    if key is None:
        return None
    enc = line.get("key_enc", "utf8")
    if enc == "utf8":
        return str(key).encode("utf-8")
    if enc == "hex":
        return bytes.fromhex(key)
    raise AssertionError(f"unknown key_enc {enc!r}")


def test_dump_matches_our_reading(
    kafka_fixtures: Path, partitions: dict[str, list[Segment]]
) -> None:
    (seg,) = partitions["small-gzip-hdr-tomb-0"]
    lines = _dump_lines(kafka_fixtures)
    batch_lines = [ln for ln in lines if ln.get("type") == "batch"]
    record_lines = [ln for ln in lines if ln.get("type") != "batch"]
    assert len(batch_lines) == len(seg.scan) == 100
    assert len(record_lines) == len(seg.records) == 1000

    # batches: every field of the dump, including the ones only the batch lines carry
    for i, line in enumerate(batch_lines):
        h = seg.scan.header(i)
        row = seg.scan.batches[i]
        ours = _batch_fields(h) | {
            "type": "batch",
            "position": int(row[k.B_POS]),
            "size": int(row[k.B_SIZE]),
            "count": h.records_count,
            "max_timestamp": h.max_timestamp,
            "crc": h.crc,
        }
        assert ours == line, f"batch {i}"
        # describe() (what `cleanerd dump` prints) agrees with the dump as well
        assert h.describe() == {
            k_: v for k_, v in line.items() if k_ not in ("type", "position", "size")
        }

    # records: in file order, each with its batch's fields
    current_batch = -1
    for i, (line, rec, b) in enumerate(
        zip(record_lines, seg.records, seg.record_batch, strict=True)
    ):
        where = f"record {i} (offset {line['offset']})"
        assert rec.offset == line["offset"], where
        assert rec.timestamp == line["timestamp"], where
        assert rec.key == _decode_key(line), where
        value_len = -1 if rec.value is None else len(rec.value)
        want_len = -1 if line["value_len"] is None else line["value_len"]
        assert value_len == want_len, where
        sha = None if rec.value is None else hashlib.sha256(rec.value).hexdigest()
        assert sha == line["value_sha256"], where
        assert rec.is_tombstone is line["tombstone"], where
        headers = [
            {"key": hk, "value_hex": None if hv is None else hv.hex()} for hk, hv in rec.headers
        ]
        assert headers == line["headers"], where
        assert _batch_fields(seg.scan.header(b)) == line["batch"], where
        assert b >= current_batch
        current_batch = b

    # the fixture really exercises what it claims: tombstones and null header values
    assert sum(r.is_tombstone for r in seg.records) == 100
    assert any(hv is None for r in seg.records for _, hv in r.headers)
    assert all(seg.scan.header(i).compression.label == "gzip" for i in range(len(seg.scan)))


def test_slow_path_agrees_with_index(partitions: dict[str, list[Segment]]) -> None:
    # RecordBatch.records() (per batch) must equal the whole-segment index
    for segments in partitions.values():
        for seg in segments:
            per_batch = [r for b in iter_batches(seg.data, path=str(seg.path)) for r in b.records()]
            assert per_batch == seg.records


# -- (b) expected.json: newest record per key and segment summaries -----------------------------


@pytest.mark.parametrize("name", PARTITIONS)
def test_newest_record_per_key(
    kafka_fixtures: Path, partitions: dict[str, list[Segment]], name: str
) -> None:
    expected = _expected(kafka_fixtures, name)
    newest: dict[str, dict[str, Any]] = {}
    for seg in partitions[name]:
        for rec in seg.records:
            assert rec.key is not None
            newest[rec.key.decode("utf-8")] = {
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "tombstone": rec.is_tombstone,
            }
    assert newest == expected["keys"]
    assert len(newest) == expected["keys_seen"]
    survivors = sum(not v["tombstone"] for v in newest.values())
    assert survivors == expected["expected_survivors_drop_tombstones"]


@pytest.mark.parametrize("name", PARTITIONS)
def test_segment_summaries(
    kafka_fixtures: Path, partitions: dict[str, list[Segment]], name: str
) -> None:
    expected = _expected(kafka_fixtures, name)
    segments = partitions[name]
    ours = [
        {
            "file": seg.path.name,
            "base_offset": int(seg.scan.batches[0, k.B_BASE_OFFSET]),
            "last_offset": int(seg.scan.batches[-1, k.B_LAST_OFFSET]),
            "bytes": len(seg.data),
            "batches": len(seg.scan),
            "records": len(seg.records),
        }
        for seg in segments
    ]
    assert ours == expected["segments"]
    for seg in segments:
        # a segment file is named after its base offset
        assert int(seg.path.stem) == int(seg.scan.batches[0, k.B_BASE_OFFSET])
        # the header's record count is what the index found
        assert int(seg.scan.batches[:, k.B_COUNT].sum()) == len(seg.records)
    all_records = [r for seg in segments for r in seg.records]
    assert len(all_records) == expected["data_records"]
    assert sum(len(seg.scan) for seg in segments) == expected["data_batches"]
    assert sum(r.is_tombstone for r in all_records) == expected["tombstones"]
    assert all_records[-1].offset + 1 == expected["next_offset"]
    # README: timestamps are 1700000000000 + offset, keys are key-%06d
    base_ts = expected["params"]["base_timestamp"]
    assert all(r.timestamp == base_ts + r.offset for r in all_records)
    assert all(r.key is not None and len(r.key) == 10 and r.key[:4] == b"key-" for r in all_records)
    offsets = np.array([r.offset for r in all_records])
    assert (np.diff(offsets) == 1).all()
    assert offsets[0] == 0


def test_fixture_codecs(partitions: dict[str, list[Segment]]) -> None:
    seg = partitions["multiseg-snappy-0"][0]
    assert seg.scan.header(0).compression.label == "snappy"
    pos = int(seg.scan.batches[0, k.B_POS])
    # Kafka's Java producer frames snappy the xerial way
    assert seg.data[pos + 61 : pos + 69] == b"\x82SNAPPY\x00"
    seg = partitions["small-gzip-hdr-tomb-0"][0]
    assert seg.data[61:63] == b"\x1f\x8b"


@pytest.mark.parametrize("name", PARTITIONS)
def test_rebuilt_batches_are_kafkas_bytes(kafka_fixtures: Path, name: str) -> None:
    """Every batch rebuilt from its decoded records, with its header fields, is the very batch
    Kafka wrote, compressed payload and CRC included (docs/kafka-format.md §2.5)."""
    rebuilt_batches = 0
    for log in sorted((kafka_fixtures / name).glob("*.log")):
        data = log.read_bytes()
        position = 0
        for batch in iter_batches(data, path=str(log)):
            h = batch.header
            rebuilt = build_batch(
                batch.records(),
                base_offset=h.base_offset,
                last_offset=h.last_offset,
                compression=h.compression,
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence,
                partition_leader_epoch=h.partition_leader_epoch,
                base_timestamp=h.base_timestamp,
                max_timestamp=h.max_timestamp,
            )
            where = f"{log.name} batch at {position} ({h.compression.label})"
            assert rebuilt == data[position : position + batch.size], where
            position += batch.size
            rebuilt_batches += 1
        assert position == len(data)
    assert rebuilt_batches == _expected(kafka_fixtures, name)["data_batches"]


# -- locating the fixtures ---------------------------------------------------------------------


def test_fixture_location_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLEANERD_FIXTURES", str(tmp_path))
    assert find_kafka_fixtures() == tmp_path
    monkeypatch.setenv("CLEANERD_FIXTURES", str(tmp_path / "missing"))
    with pytest.raises(pytest.fail.Exception, match="CLEANERD_FIXTURES"):
        find_kafka_fixtures()


def test_missing_fixtures_fail_not_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CLEANERD_FIXTURES", raising=False)
    monkeypatch.setattr("tests.support.kafka_fixtures._TESTS", tmp_path / "repo" / "tests")
    monkeypatch.setattr("tests.support.kafka_fixtures._REPO", tmp_path / "repo")
    with pytest.raises(pytest.fail.Exception, match="Kafka fixtures not found"):
        find_kafka_fixtures()
    (tmp_path / "shared" / "fixtures" / "kafka").mkdir(parents=True)
    assert find_kafka_fixtures() == tmp_path / "shared" / "fixtures" / "kafka"
