"""``cleanerd dump``: exact JSON fields, text lines, every file kind, and corruption handling.

Logs are written with ``PartitionLog`` (small segments and index interval, so there are several
segments and index entries), then dumped through ``CliRunner`` and once through a real process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cleanerd.cli._dump import dump
from cleanerd.format import Compression, Record, kernels as k, scan_batches
from cleanerd.format._builder import build_batch, finish_crc
from cleanerd.storage import (
    AbortedTxn,
    OffsetIndex,
    PartitionLog,
    TimeIndex,
    TopicPartition,
    TransactionIndex,
)
from cleanerd.storage._checkpoints import write_offset_checkpoint, write_partition_metadata
from cleanerd.topics import LogConfig

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=200)
NOW = 1_700_000_000_000
PID = 42
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
HORIZON = NOW + 86_400_000
_RECORD = "type offset timestamp key key_hex value_len value_sha256 tombstone headers control batch"
_BATCH = (
    "position size count base_offset last_offset magic compression timestamp_type transactional"
    " control producer_id producer_epoch base_sequence partition_leader_epoch delete_horizon_ms"
    " max_timestamp crc"
)
RECORD_KEYS, BATCH_KEYS = set(_RECORD.split()), set(_BATCH.split())
CODECS = {"none", "gzip", "snappy", "lz4", "zstd"}


@dataclass
class Built:
    root: Path
    partition: Path
    records: dict[int, tuple[Record, str]] = field(default_factory=dict)  # offset -> (r, codec)
    commit: int = -1
    abort: int = -1
    log_append: int = -1  # a LogAppendTime batch
    horizon: int = -1  # a batch with a KIP-534 delete horizon


def _round(i: int) -> list[Record]:
    ts, headers = NOW + 10 * i, (("trace", b"t%d" % i), ("empty", None))
    return [
        Record(0, ts, b"key-%d" % i, b"value-%d " % i * 8, headers),
        Record(0, ts + 1, None, b"no key"),
        Record(0, ts + 2, f"gone-{i}".encode(), None),
        Record(0, ts + 3, b"\xff\xfebin", b"\x00\xff\x80"),
    ]


def build(root: Path) -> Built:
    """Every codec, null keys, tombstones, null header values, binary keys, COMMIT and ABORT."""
    built = Built(root, root / "orders-0")
    log = PartitionLog.create(built.partition, CONFIG, clock=lambda: NOW)

    def append(records: list[Record], codec: Compression = Compression.NONE, **kw: Any) -> int:
        first = log.append(records, compression=codec, **kw).first_offset
        for n, r in enumerate(records, start=first):
            ts = NOW if kw.get("log_append_time") else r.timestamp  # LogAppendTime: the clock
            built.records[n] = (dataclasses.replace(r, offset=n, timestamp=ts), codec.label)
        return first

    for i in range(20):
        append(_round(i), list(Compression)[i % 5])
    producer: dict[str, Any] = {"producer_id": PID, "producer_epoch": 1}
    for commit, epoch in ((True, 5), (False, 6)):
        append(
            [Record(0, NOW + 500, b"txn", b"data")], base_sequence=0, transactional=True, **producer
        )
        marker = log.append_marker(
            commit=commit, timestamp=NOW + 501, coordinator_epoch=epoch, **producer
        )
        if commit:
            built.commit = marker.first_offset
        else:
            built.abort = marker.first_offset
    built.log_append = append([Record(0, 5, b"lat", b"x")], log_append_time=True)
    batch = build_batch([Record(0, NOW, b"dh", b"y")], delete_horizon_ms=HORIZON)
    built.horizon = log.append_batches(batch).first_offset
    built.records[built.horizon] = (Record(built.horizon, NOW, b"dh", b"y"), "none")
    log.close()  # PartitionLog wrote the ABORT's .txnindex entry
    write_offset_checkpoint(root / "cleaner-offset-checkpoint", {TopicPartition("orders", 0): 17})
    write_partition_metadata(built.partition / "partition.metadata", TOPIC_ID)
    return built


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("logdir"))


@pytest.fixture
def copy(built: Built, tmp_path: Path) -> Built:
    """A private copy to corrupt."""
    root = tmp_path / "logdir"
    shutil.copytree(built.root, root)
    return dataclasses.replace(built, root=root, partition=root / "orders-0")


def run(*args: object) -> Result:
    return CliRunner().invoke(dump, [str(a) for a in args], catch_exceptions=False)


def lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def by_offset(*args: object) -> dict[int, dict[str, Any]]:
    return {r["offset"]: r for r in lines(run("--format", "json", *args))}


def segments(partition: Path) -> list[Path]:
    return sorted(partition.glob("*.log"))


# --- JSON ---------------------------------------------------------------------------------------
def test_json_records_are_exactly_what_was_appended(built: Built) -> None:
    segs = segments(built.partition)
    assert len(segs) >= 3
    assert OffsetIndex(segs[0].with_suffix(".index"), 0).entries >= 2
    result = run("--format", "json", built.partition)
    assert result.exit_code == 0, result.stderr
    out = lines(result)
    assert [r["offset"] for r in out] == sorted([*built.records, built.commit, built.abort])
    data = [r for r in out if r["control"] is None]
    assert {r["batch"]["compression"] for r in data} == CODECS
    for r in data:
        want, codec = built.records[r["offset"]]
        key, value, batch = want.key, want.value, r.pop("batch")
        assert (set(batch), batch["compression"]) == (BATCH_KEYS, codec)
        assert r == {
            "type": "record",
            "offset": want.offset,
            "timestamp": want.timestamp,
            "key": None if key is None or key[:1] == b"\xff" else key.decode(),
            "key_hex": None if key is None else key.hex(),
            "value_len": -1 if value is None else len(value),
            "value_sha256": None if value is None else hashlib.sha256(value).hexdigest(),
            "tombstone": value is None,
            "headers": [
                {"key": hk, "value_hex": None if hv is None else hv.hex()}
                for hk, hv in want.headers
            ],
            "control": None,
        }


def test_json_batch_lines(built: Built) -> None:
    stdout = run("--format", "json", "--batches", "--values", built.partition).stdout
    for line in stdout.splitlines():  # compact, exactly as json.dumps writes it
        assert json.dumps(json.loads(line), separators=(",", ":")) == line
    out = [json.loads(line) for line in stdout.splitlines()]
    batches = [b for b in out if b.pop("type") == "batch"]
    assert all(set(b) == BATCH_KEYS and b["magic"] == 2 for b in batches)
    assert {b["compression"] for b in batches} == CODECS
    assert sum(b["count"] for b in batches) == len(out) - len(batches)
    starts = {int(p.stem) for p in segments(built.partition)}
    position = 0
    for line in out:
        if "batch" not in line:  # a batch line: positions run on, from 0 in each segment file
            position = 0 if line["base_offset"] in starts else position
            assert line["position"] == position
            position, current = position + line["size"], line
        else:  # its records follow it
            assert line["batch"] == current
            assert current["base_offset"] <= line["offset"] <= current["last_offset"]


def test_log_append_time_and_delete_horizon(built: Built) -> None:
    out = by_offset(built.partition)
    stamped, horizon = out[built.log_append], out[built.horizon]
    # LogAppendTime: the append clock, not the record's own 5; a horizon keeps timestamps right
    assert (stamped["batch"]["timestamp_type"], stamped["timestamp"]) == ("LogAppendTime", NOW)
    assert (horizon["batch"]["delete_horizon_ms"], horizon["timestamp"]) == (HORIZON, NOW)
    text = run("--batches", built.partition).stdout
    assert f"| offset: {built.log_append} LogAppendTime: {NOW} " in text
    assert f"deleteHorizonMs: OptionalLong[{HORIZON}]" in text


def test_json_control_records(built: Built) -> None:
    out = by_offset(built.partition)
    for offset, kind, epoch in ((built.commit, "COMMIT", 5), (built.abort, "ABORT", 6)):
        m, batch, data = out[offset], out[offset]["batch"], out[offset - 1]
        assert set(m) == RECORD_KEYS | {"coordinator_epoch"}
        assert (m["control"], m["coordinator_epoch"], m["value_len"]) == (kind, epoch, 6)
        assert m["key_hex"] == ("00000001" if kind == "COMMIT" else "00000000")
        assert (batch["control"], batch["transactional"], batch["producer_id"]) == (True, True, PID)
        assert (batch["producer_epoch"], batch["base_sequence"]) == (1, -1)
        assert (data["control"], data["batch"]["transactional"]) == (None, True)  # its data


def test_values_flag(built: Built) -> None:
    assert not any("value" in r for r in by_offset(built.partition).values())
    out = by_offset("--values", built.partition)
    assert out[0]["headers"] == [
        {"key": "trace", "value_hex": "7430"},
        {"key": "empty", "value_hex": None},
    ]
    assert (out[0]["value"], "value_hex" in out[0]) == ("value-0 " * 8, False)
    assert (out[2]["value"], "value_hex" in out[2], out[2]["tombstone"]) == (None, False, True)
    assert (out[3]["value"], out[3]["value_hex"], out[3]["key"]) == (None, "00ff80", None)


# --- text ---------------------------------------------------------------------------------------
def test_text_output(built: Built) -> None:
    result = run("--batches", "--values", built.partition)
    assert result.exit_code == 0
    text = result.stdout
    for seg in segments(built.partition):
        assert f"Dumping {seg}\nLog starting offset: {int(seg.stem)}\n" in text
    assert "baseOffset: 0 lastOffset: 3 count: 4 baseSequence: -1 lastSequence: -1" in text
    assert "position: 0 CreateTime: 1700000000003" in text
    assert re.search(r"compresscodec: zstd crc: \d+ isvalid: true\n", text)
    assert (
        "| offset: 0 CreateTime: 1700000000000 keySize: 5 valueSize: 64 sequence: -1"
        " headerKeys: [trace,empty] key: key-0 payload: value-0 " in text
    )
    assert "| offset: 1 CreateTime: 1700000000001 keySize: -1 valueSize: 6" in text
    assert "key: null payload: no key" in text
    assert "valueSize: -1 sequence: -1 headerKeys: [] key: gone-0 payload: null" in text
    assert "key: hex:fffe62696e payload: hex:00ff80" in text
    for offset, kind, epoch in ((built.commit, "COMMIT", 5), (built.abort, "ABORT", 6)):
        line = f"| offset: {offset} CreateTime: {NOW + 501} keySize: 4 valueSize: 6 sequence: -1"
        assert f"{line} headerKeys: [] endTxnMarker: {kind} coordinatorEpoch: {epoch}\n" in text
    assert "isTransactional: true isControl: true" in text


def test_text_without_batches_and_several_paths(built: Built) -> None:
    segs = segments(built.partition)
    text = run(segs[1], segs[0]).stdout
    assert text.index(f"Dumping {segs[1]}") < text.index(f"Dumping {segs[0]}")  # in given order
    assert "| offset: 0 " in text
    assert not re.search("baseOffset:|payload:", text)


# --- other file kinds ---------------------------------------------------------------------------
INDEXES = {
    ".index": ("offset_index", "offset", "position"),
    ".timeindex": ("time_index", "timestamp", "offset"),
}


@pytest.mark.parametrize("suffix", list(INDEXES))
def test_offset_and_time_index(copy: Built, suffix: str) -> None:
    kind, *fields = INDEXES[suffix]
    path = segments(copy.partition)[0].with_suffix(suffix)
    index = (OffsetIndex if suffix == ".index" else TimeIndex)(path, 0)
    entries = [dict(zip(fields, index.entry(i), strict=True)) for i in range(index.entries)]
    assert len(entries) >= 2
    assert lines(run("--format", "json", path)) == [{"type": kind, **e} for e in entries]
    first = entries[0]
    assert f"{fields[0]}: {first[fields[0]]} {fields[1]}: {first[fields[1]]}\n" in run(path).stdout
    path.write_bytes(path.read_bytes() + b"\x00\x01\x02")  # whole entries print, then the error
    result = run("--format", "json", path)
    assert (result.exit_code, len(lines(result))) == (1, len(entries))
    assert f"{path} at byte {len(entries) * index.ENTRY_SIZE}: 3 trailing bytes" in result.stderr


@pytest.mark.slow
def test_an_index_past_segment_index_bytes_is_still_dumped_whole(copy: Built) -> None:
    """``dump`` streams an index (the loaders stop at ``segment.index.bytes``, 10 MiB here)."""
    path = segments(copy.partition)[0].with_suffix(".index")
    entry = path.read_bytes()[:8]
    count = (10 << 20) // 8 + 3
    path.write_bytes(entry * count)
    out = lines(run("--format", "json", path))
    assert len(out) == count
    assert out[-1] == out[0]


def test_txn_index(built: Built) -> None:
    (path,) = built.partition.glob("*.txnindex")
    (txn,) = TransactionIndex(path, int(path.stem)).all_aborted()
    assert txn == AbortedTxn(PID, built.abort - 1, built.abort, txn.last_stable_offset)
    assert lines(run("--format", "json", path)) == [
        {"type": "txn_index", **dataclasses.asdict(txn)}
    ]
    text = run(path).stdout
    assert f"producerId: {PID} firstOffset: {built.abort - 1} lastOffset: {built.abort}" in text


def test_checkpoints(copy: Built) -> None:
    cleaner = copy.root / "cleaner-offset-checkpoint"
    out = lines(run("--format", "json", cleaner))
    assert out == [{"type": "checkpoint", "topic": "orders", "partition": 0, "offset": 17}]
    assert "topic: orders partition: 0 offset: 17" in run(cleaner).stdout
    out = lines(run("--format", "json", copy.partition / "leader-epoch-checkpoint"))
    assert out == [{"type": "checkpoint", "epoch": 0, "start_offset": 0}]
    out = lines(run("--format", "json", copy.partition / "partition.metadata"))
    assert out == [{"type": "checkpoint", "version": 0, "topic_id": TOPIC_ID}]
    cleaner.write_text("0\n1\norders zero 5\n")
    result = run(cleaner)
    assert result.exit_code == 1
    assert f"{cleaner} line 3" in result.stderr


# --- errors -------------------------------------------------------------------------------------
def _batches(path: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of every batch in a segment."""
    scan = scan_batches(path.read_bytes())
    cols = (k.B_POS, k.B_SIZE, k.B_BASE_OFFSET, k.B_LAST_OFFSET)
    return [tuple(int(row[c]) for c in cols) for row in scan.batches]  # type: ignore[misc]


REASONS = {"flip": "CRC mismatch", "first": "CRC mismatch", "cut": "past the end", "count": "count"}


@pytest.mark.parametrize("damage", list(REASONS))
def test_corruption_prints_the_valid_part_then_the_error(copy: Built, damage: str) -> None:
    """A flipped record byte (in batch 2 or 0), a cut tail, a record count off (CRC redone)."""
    seg = segments(copy.partition)[0]
    batches = _batches(seg)
    row = {"flip": 2, "first": 0, "cut": len(batches) - 1, "count": 1}[damage]
    pos, size, _, _ = batches[row]
    data = bytearray(seg.read_bytes())
    if damage == "cut":
        del data[-7:]
    elif damage == "count":
        batch = bytearray(data[pos : pos + size])
        struct.pack_into(">i", batch, 57, struct.unpack_from(">i", batch, 57)[0] + 1)
        data[pos : pos + size] = finish_crc(batch)
    else:
        data[pos + size - 3] ^= 0x55  # inside the CRC-covered record bytes
    seg.write_bytes(data)
    good = batches[row - 1][3] if row else -1  # segment 0 holds offsets 0, 1, 2, ...
    for args in (["--format", "json"], []):
        result = run(*args, seg)
        assert result.exit_code == 1
        assert f"{seg} at byte {pos}: " in result.stderr
        assert REASONS[damage] in result.stderr
        assert (f"last good offset {good}" if row else "no valid batch before it") in result.stderr
    assert [r["offset"] for r in lines(run("--format", "json", seg))] == list(range(good + 1))
    assert f"| offset: {good + 1} " not in result.stdout
    assert row == 0 or f"| offset: {good} " in result.stdout


def test_partition_dir_goes_on_after_a_corrupt_segment(copy: Built) -> None:
    segs = segments(copy.partition)
    segs[0].write_bytes(segs[0].read_bytes()[:-7])
    result = run("--format", "json", copy.partition)
    assert result.exit_code == 1
    offsets = [r["offset"] for r in lines(result)]
    assert copy.abort in offsets  # the last segment was still dumped
    assert str(segs[0]) in result.stderr


def test_usage_errors_exit_2_before_any_output(built: Built, tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    for bad, message in ((tmp_path / "nope.log", "does not exist"), (other, "unknown file kind")):
        result = run(segments(built.partition)[0], bad)
        assert (result.exit_code, result.stdout) == (2, "")
        assert message in result.stderr
    assert run(tmp_path).exit_code == 2  # a dir without segments, not named <topic>-<n>


# --- Kafka's own segments and a real process ----------------------------------------------------
def test_matches_kafkas_dump(kafka_fixtures: Path) -> None:
    """Kafka's own reading of its segment; its value_len is null for a tombstone, ours -1."""
    result = run("--format", "json", "--batches", kafka_fixtures / "small-gzip-hdr-tomb-0")
    assert result.exit_code == 0
    ours = lines(result)
    theirs = (kafka_fixtures / "small-gzip-hdr-tomb-0.dump.jsonl").read_text().splitlines()
    assert len(ours) == len(theirs) == 1100
    for mine, kafka in zip(ours, map(json.loads, theirs), strict=True):
        if kafka.get("type") != "batch":
            assert kafka.pop("key_enc") == "utf8"
            kafka["value_len"] = -1 if kafka["value_len"] is None else kafka["value_len"]
            kafka["batch"] = {**mine["batch"], **kafka["batch"]}  # ours has a few more fields
        assert {key: mine[key] for key in kafka} == kafka


@pytest.mark.slow
def test_real_process(built: Built, tmp_path: Path) -> None:
    seg = segments(built.partition)[0]
    cmd = [sys.executable, "-m", "cleanerd", "dump", "--format", "json", "--batches"]
    done = subprocess.run([*cmd, str(seg)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert (out[0]["type"], out[1]["type"], out[1]["offset"]) == ("batch", "record", 0)
    broken = tmp_path / seg.name
    broken.write_bytes(seg.read_bytes()[:-1])
    done = subprocess.run([*cmd, str(broken)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert re.search(
        rf"{re.escape(str(broken))} at byte \d+: .* \(last good offset \d+\)", done.stderr
    )
    records = [x for x in out if x["type"] == "record"]
    assert done.stdout.count('"type":"record"') == len(records) - out[-1]["batch"]["count"]


@pytest.mark.parametrize("damage", ["overlap", "below"])
def test_offsets_must_rise_across_segments(copy: Built, built: Built, damage: str) -> None:
    """Base offsets are not CRC-covered: segment 1's last batch moved onto segment 2's base
    offset, or segment 2's first batch moved below it. The dump stops before that batch (as
    for a corrupt one), names the file and the offsets, goes on with the next segment, exits 1."""
    segs = segments(copy.partition)
    bases = [int(p.stem) for p in segs]
    target = segs[1] if damage == "overlap" else segs[2]
    rows = _batches(target)
    pos, _, base, last = rows[-1] if damage == "overlap" else rows[0]
    value = bases[2] if damage == "overlap" else bases[2] - 1
    data = bytearray(target.read_bytes())
    struct.pack_into(">q", data, pos, value)
    target.write_bytes(data)
    for fmt in ("json", "text"):
        result = run("--format", fmt, copy.partition)
        assert result.exit_code == 1
        where = f"{target} at byte {pos}: "
        if damage == "overlap":  # storage's check_offsets_across words it
            assert (
                f"{where}the segment's last batch ends at offset {value + last - base}, not below "
                f"the base offset {bases[2]} of the next segment {segs[2].name} "
                f"(last good offset {rows[-2][3]})"
            ) in result.stderr
        else:  # LogSegment.scan: offsets rise from the base offset in the file name
            assert (
                f"{where}offsets not increasing: batch base offset {value} follows offset "
                f"{bases[2] - 1} (the segment's base offset is {bases[2]})"
            ) in result.stderr
            assert "(no valid batch before it)" in result.stderr
    everything = [r["offset"] for r in lines(run("--format", "json", built.partition))]
    skipped = range(base, last + 1) if damage == "overlap" else range(bases[2], bases[3])
    offsets = [r["offset"] for r in lines(run("--format", "json", copy.partition))]
    assert offsets == [o for o in everything if o not in skipped]
    assert run(target).exit_code == 1  # the segment alone is checked against its neighbours
