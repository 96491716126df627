"""``cleanerd dump`` with kafka-dump-log.sh's options, in Kafka's layout, and producer-state
``.snapshot`` files read as Kafka's tool reads them.

The snapshot files are built here with ``struct.pack`` from the documented layout (reference
1.7), not with cleanerd's encoder, so a shared misreading cannot pass unnoticed.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import crc32c
import pytest
from click.testing import CliRunner, Result

from cleanerd.cli._dump import dump
from cleanerd.format import Record, build_batch
from cleanerd.storage import PartitionLog
from cleanerd.storage._producer_snapshot import SnapshotEntry, encode, read_snapshot
from cleanerd.topics import LogConfig

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=100_000, index_interval_bytes=1)  # an index entry per batch


def run(*args: object) -> Result:
    return CliRunner().invoke(dump, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def partition(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five batches: keyed values, a null key, a tombstone, then a committed transaction."""
    directory = tmp_path_factory.mktemp("logs") / "orders-0"
    log = PartitionLog.create(directory, CONFIG, clock=lambda: NOW)
    for i in range(3):
        log.append([Record(0, NOW + i, b"k%d" % i, b"v%d" % i), Record(0, NOW + i, b"x", b"y")])
    log.append([Record(0, NOW + 3, None, b"no key"), Record(0, NOW + 3, b"gone", None)])
    txn: dict[str, Any] = {"producer_id": 7, "producer_epoch": 1}
    log.append([Record(0, NOW + 4, b"t", b"d")], base_sequence=0, transactional=True, **txn)
    log.append_marker(commit=True, timestamp=NOW + 5, coordinator_epoch=3, **txn)
    log.close()
    return directory


def _log(partition: Path) -> Path:
    return partition / "00000000000000000000.log"


def test_files_is_shallow_by_default_in_kafkas_layout(partition: Path) -> None:
    log, index = _log(partition), partition / "00000000000000000000.index"
    result = run("--files", f"{log},{index}")
    assert result.exit_code == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    batches = [x for x in out if x.startswith("baseOffset: ")]
    assert len(batches) == 6
    assert batches[0].startswith("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1")
    assert " position: 0 CreateTime: " in batches[0]
    assert not [x for x in out if x.startswith("| offset:")]  # shallow: no records
    assert f"Dumping {index}" in out
    entries = out[out.index(f"Dumping {index}") + 1 :]  # the index's entries follow its line
    assert entries[:2] == ["offset: 3 position: 81", "offset: 5 position: 162"]
    assert len(entries) == 5


def test_deep_iteration_and_print_data_log(partition: Path, tmp_path: Path) -> None:
    deep = run("--files", _log(partition), "--deep-iteration").stdout.splitlines()
    records = [x for x in deep if x.startswith("| offset:")]
    assert len(records) == 10
    assert not [x for x in records if " key: " in x or " payload: " in x]
    copy = tmp_path / "orders-0"
    copy.mkdir()
    (copy / _log(partition).name).write_bytes(_log(partition).read_bytes())
    assert run("--files", _log(copy), "--deep-iteration").stderr == ""  # offsets 0..9 in order
    data = run("--files", _log(partition), "--print-data-log").stdout.splitlines()
    records = [x for x in data if x.startswith("| offset:")]
    assert records[0].startswith(f"| offset: 0 CreateTime: {NOW} keySize: 2 valueSize: 2")
    assert records[0].endswith(" key: k0 payload: v0")
    # Kafka leaves out a null key and a null payload; a control record shows its marker
    assert records[6].endswith("headerKeys: [] payload: no key")
    assert records[7].endswith("valueSize: -1 sequence: -1 headerKeys: [] key: gone")
    assert records[9].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")
    # the batch line comes before its records, as in Kafka's output
    assert data.index(records[0]) == data.index(next(x for x in data if "baseOffset: 0" in x)) + 1


def test_max_bytes_reads_only_the_batches_within_it(partition: Path) -> None:
    full = run("--format", "json", "--batches", _log(partition)).stdout.splitlines()
    sizes = [json.loads(x)["size"] for x in full if json.loads(x)["type"] == "batch"]
    limit = sizes[0] + sizes[1] + 5  # the third batch does not end within the limit
    result = run("--files", _log(partition), "--max-bytes", limit, "--deep-iteration")
    assert result.exit_code == 0, result.stderr
    assert len([x for x in result.stdout.splitlines() if x.startswith("baseOffset")]) == 2
    assert len([x for x in result.stdout.splitlines() if x.startswith("| offset:")]) == 4
    assert run("--files", _log(partition), "--max-bytes", 0).stdout.count("baseOffset") == 0


def test_json_keeps_working_with_kafkas_options(partition: Path) -> None:
    result = run("--format", "json", "--files", _log(partition), "--print-data-log")
    out = [json.loads(x) for x in result.stdout.splitlines()]
    assert [x["type"] for x in out[:3]] == ["batch", "record", "record"]
    assert (out[1]["key"], out[1]["value"]) == ("k0", "v0")
    shallow = run("--format", "json", "--files", _log(partition)).stdout.splitlines()
    assert {json.loads(x)["type"] for x in shallow} == {"batch"}


def test_index_sanity_check(partition: Path, tmp_path: Path) -> None:
    index = partition / "00000000000000000000.index"
    result = run("--files", index, "--index-sanity-check")
    assert result.stdout.splitlines() == [f"Dumping {index}", f"{index} passed sanity check."]
    bad = tmp_path / index.name
    data = bytearray(index.read_bytes())
    struct.pack_into(">i", data, 8, 3)  # entry 1's relative offset back to entry 0's
    bad.write_bytes(bytes(data))
    result = run("--files", bad, "--index-sanity-check")
    assert result.exit_code == 1
    assert str(bad) in result.stderr
    assert "passed" not in result.stdout
    time_index = partition / "00000000000000000000.timeindex"
    assert "passed sanity check" in run("--index-sanity-check", "--files", time_index).stdout


def test_verify_index_only(partition: Path, tmp_path: Path) -> None:
    index = partition / "00000000000000000000.index"
    result = run("--files", index, "--verify-index-only")
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"Dumping {index}\n", "")
    copy = tmp_path / "orders-0"
    copy.mkdir()
    for p in partition.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    data = bytearray((copy / index.name).read_bytes())
    struct.pack_into(">i", data, 12, 3)  # entry 1 points inside a batch, not at its start
    (copy / index.name).write_bytes(bytes(data))
    result = run("--files", copy / index.name, "--verify-index-only")
    assert result.exit_code == 1
    assert "offset:" not in result.stdout  # entries are not printed
    assert f"Mismatches in :{copy / index.name}" in result.stderr
    assert "entry 1 (offset 5, position 3): position is not the start of a batch" in result.stderr
    # without --verify-index-only the entries print, and the mismatch is still reported
    result = run("--files", copy / index.name)
    assert "offset: 5 position: 3" in result.stdout
    assert (result.exit_code, "Mismatches in :" in result.stderr) == (1, True)


# --- producer-state snapshots -------------------------------------------------------------------
ENTRY = ">qhiqiqiq"  # producer id, epoch, last seq, last offset, offset delta, ts, coord, txn


def _snapshot_bytes(entries: Sequence[tuple[int, ...]]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(ENTRY, *e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


ENTRIES = [
    (7, 3, 14, 44, 4, NOW, 2, 40),  # an open transaction from offset 40
    (8, 0, 2, 60, 5, NOW + 1, -1, -1),  # sequence wrapped: first = 2**31 - 3
    (9, 1, -1, -1, 0, NOW + 2, 5, -1),  # only markers seen: no batch kept
]


def test_snapshot_is_dumped_as_kafkas_tool_prints_it(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000061.snapshot"
    path.write_bytes(_snapshot_bytes(ENTRIES))
    result = run("--files", path)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Dumping {path}",
        "producerId: 7 producerEpoch: 3 coordinatorEpoch: 2 currentTxnFirstOffset: "
        f"OptionalLong[40] lastTimestamp: {NOW} firstSequence: 10 lastSequence: 14 "
        f"lastOffset: 44 offsetDelta: 4 timestamp: {NOW}",
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {NOW + 1} firstSequence: {2**31 - 3} "
        f"lastSequence: 2 lastOffset: 60 offsetDelta: 5 timestamp: {NOW + 1}",
        "producerId: 9 producerEpoch: 1 coordinatorEpoch: 5 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {NOW + 2}",
    ]
    (first, _, last) = [json.loads(x) for x in run("--format", "json", path).stdout.splitlines()]
    assert first["current_txn_first_offset"] == 40
    assert first["batch"]["first_sequence"] == 10
    assert (last["batch"], last["current_txn_first_offset"]) == (None, None)
    assert encode(list(read_snapshot(path))) == path.read_bytes()  # our encoder: Kafka's bytes
    assert next(read_snapshot(path)) == SnapshotEntry(*ENTRIES[0])


def test_empty_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.snapshot"
    path.write_bytes(_snapshot_bytes([]))
    assert run(path).stdout.splitlines() == [f"Dumping {path}"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("crc", "at byte 2: CRC mismatch"),
        ("cut", "at byte 56: the file ends inside entry 1 of 3"),
        ("header", "at byte 7: the file ends inside the 10-byte header"),
        ("version", "at byte 0: unknown producer snapshot version 2"),
        ("tail", "at byte 148: 1 bytes after the 3 entries"),
    ],
)
def test_bad_snapshot_names_file_and_byte(tmp_path: Path, damage: str, message: str) -> None:
    data = bytearray(_snapshot_bytes(ENTRIES))
    if damage == "crc":
        data[20] ^= 1
    elif damage == "cut":
        del data[80:]
    elif damage == "header":
        del data[7:]
    elif damage == "version":
        struct.pack_into(">h", data, 0, 2)
    else:
        data += b"\0"
        struct.pack_into(">I", data, 2, crc32c.crc32c(bytes(data[6:])))
    path = tmp_path / "00000000000000000061.snapshot"
    path.write_bytes(bytes(data))
    for args in ((), ("--format", "json"), ("--print-data-log",)):
        result = run(*args, path)
        assert result.exit_code == 1
        assert f"{path} {message}" in result.stderr


def test_usage_errors(tmp_path: Path) -> None:
    assert run().exit_code == 2
    missing = run("--files", f"{tmp_path / 'nope.log'}")
    assert (missing.exit_code, missing.stdout) == (2, "")
    assert "does not exist" in missing.stderr


def test_deep_iteration_reports_offset_gaps_as_kafka_does(tmp_path: Path) -> None:
    """A compacted log has gaps (records 1, 2 and 6 gone here); Kafka's tool lists them on
    stderr after the file."""
    batches = [
        build_batch([Record(0, NOW, b"a", b"0")], base_offset=0),
        build_batch([Record(3, NOW, b"b", b"3"), Record(5, NOW, b"c", b"5")], base_offset=3),
        build_batch([Record(7, NOW, b"d", b"7")], base_offset=7),
    ]
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"".join(batches))
    result = run("--files", log, "--deep-iteration")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"Non-consecutive offsets in {log}",
        "  0 is followed by 3",
        "  3 is followed by 5",
        "  5 is followed by 7",
    ]
    assert run("--format", "json", "--files", log, "--deep-iteration").stderr == ""


def test_an_index_past_segment_index_bytes_fails_its_sanity_check(
    partition: Path, tmp_path: Path
) -> None:
    """Not "is empty": the loader does not read a file past the setting, and says so."""
    long = tmp_path / "00000000000000000000.index"
    with open(long, "wb") as f:
        f.truncate(16 << 20)  # sparse, past the default segment.index.bytes (10 MiB)
    result = run("--files", long, "--index-sanity-check")
    assert result.exit_code == 1
    assert "longer than segment.index.bytes" in result.stderr
    assert "is empty" not in result.stdout
