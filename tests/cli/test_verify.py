"""``cleanerd verify``: clean logs pass, every kind of damage is reported, nothing is modified.

Each damage test corrupts a private copy of a ``PartitionLog``-written log dir in one way and
checks the exit status and that the report names the right file and check.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cleanerd.cli._verify import verify
from cleanerd.format import Compression, Record, kernels as k, scan_batches
from cleanerd.format._builder import finish_crc
from cleanerd.inspect import _segment_checks as segment_checks
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

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=150)
NOW = 1_700_000_000_000
PID = 9


def build(root: Path, name: str = "events-0") -> Path:
    """Several segments with index entries, every codec, and an aborted transaction."""
    partition = root / name
    log = PartitionLog.create(partition, CONFIG, clock=lambda: NOW)
    for i in range(30):
        records = [
            Record(0, NOW + 10 * i + j, f"k{(i + j) % 7}".encode(), None if j == 2 else b"v" * 40)
            for j in range(3)
        ]
        log.append(records, compression=list(Compression)[i % 5])
    for commit in (True, False):
        info = log.append(
            [Record(0, NOW + 900, b"t", b"x")],
            producer_id=PID,
            producer_epoch=0,
            base_sequence=0 if commit else 1,
            transactional=True,
        )
        marker = log.append_marker(
            commit=commit, producer_id=PID, producer_epoch=0, timestamp=NOW + 901
        )
    seg = log.segments[log.segment_for(marker.first_offset)]
    log.close()
    with TransactionIndex(seg.txn_index.path, seg.base_offset) as txns:
        if not txns.all_aborted():  # PartitionLog versions that do not index aborts
            txns.append(AbortedTxn(PID, info.first_offset, marker.first_offset, info.first_offset))
    write_partition_metadata(partition / "partition.metadata", "AAAAAAAAAAAAAAAAAAAAAQ")
    write_offset_checkpoint(root / "cleaner-offset-checkpoint", {TopicPartition("events", 0): 30})
    write_offset_checkpoint(root / "recovery-point-offset-checkpoint", {})
    return partition


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logdir")
    build(root)
    build(root, "other.topic-3")
    return root


@pytest.fixture
def logdir(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "logdir"
    shutil.copytree(pristine, root)
    return root


@pytest.fixture
def part(logdir: Path) -> Path:
    return logdir / "events-0"


def run(*args: object) -> Result:
    return CliRunner().invoke(verify, [str(a) for a in args], catch_exceptions=False)


def report(path: Path) -> dict[str, Any]:
    result = run("--format", "json", path)
    data: dict[str, Any] = json.loads(result.stdout)
    assert result.exit_code == (0 if data["ok"] else 1)
    return data


def problems(path: Path) -> list[dict[str, str]]:
    """Every problem of a JSON report (log-dir level and all partitions)."""
    data = report(path)
    found = list(data["problems"])
    for p in data["partitions"]:
        found += p["problems"]
    assert data["problem_count"] == len(found)
    return found


def only(path: Path, check: str, file: Path) -> dict[str, str]:
    """Exactly the problems of one check, all about ``file``; returns the first."""
    found = problems(path)
    assert found, "expected a problem"
    assert {p["check"] for p in found} == {check}, found
    assert {p["file"] for p in found} == {str(file)}, found
    return found[0]


def segments(partition: Path) -> list[Path]:
    return sorted(partition.glob("*.log"))


def batches(log: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) per batch."""
    scan = scan_batches(log.read_bytes())
    cols = (k.B_POS, k.B_SIZE, k.B_BASE_OFFSET, k.B_LAST_OFFSET)
    return [tuple(int(row[c]) for c in cols) for row in scan.batches]  # type: ignore[misc]


def fingerprint(root: Path) -> dict[str, tuple[str, int, int]]:
    """Hash, size and mtime of every file and dir (a dir's mtime moves on any create/rename)."""
    out = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = p.stat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns)
    return out


# --- clean logs ---------------------------------------------------------------------------------
def test_clean_log_dir(pristine: Path) -> None:
    segs = segments(pristine / "events-0")
    assert len(segs) >= 3
    assert OffsetIndex(segs[0].with_suffix(".index"), 0).entries >= 3
    assert list((pristine / "events-0").glob("*.txnindex"))
    result = run(pristine)
    assert result.exit_code == 0, result.stdout
    assert "events-0: OK: " in result.stdout
    assert "other.topic-3: OK: " in result.stdout
    assert result.stdout.rstrip().endswith("OK (2 partition(s))")
    data = report(pristine)
    assert (data["kind"], data["ok"], data["problem_count"]) == ("log_dir", True, 0)
    events = data["partitions"][0]
    assert events["name"] == "events-0"
    assert events["records"] == 30 * 3 + 4
    assert (events["first_offset"], events["last_offset"]) == (0, 93)
    assert events["segments"] == len(segs)


def test_clean_partition_dir(pristine: Path) -> None:
    data = report(pristine / "events-0")
    assert (data["kind"], data["ok"]) == ("partition_dir", True)
    assert [p["name"] for p in data["partitions"]] == ["events-0"]


@pytest.mark.parametrize("name", ["small-gzip-hdr-tomb-0", "multiseg-snappy-0"])
def test_kafka_fixtures_pass(kafka_fixtures: Path, name: str) -> None:
    result = run(kafka_fixtures / name)
    assert result.exit_code == 0, result.stdout
    data = report(kafka_fixtures / name)
    expected = json.loads((kafka_fixtures / f"{name}.expected.json").read_text())
    (part,) = data["partitions"]
    assert part["records"] == sum(s["records"] for s in expected["segments"])
    assert part["segments"] == len(expected["segments"])
    # Kafka's fixtures have no index files: worth a note, not a problem
    assert part["notes"]
    assert all("missing" in n["message"] for n in part["notes"])


def test_missing_path(tmp_path: Path) -> None:
    result = run(tmp_path / "nope")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


# --- damage, one kind at a time -----------------------------------------------------------------
def test_crc_mismatch(part: Path) -> None:
    seg = segments(part)[1]
    pos, size, _, _ = batches(seg)[2]
    data = bytearray(seg.read_bytes())
    data[pos + size - 2] ^= 0x01
    seg.write_bytes(data)
    problem = problems(part)[0]
    assert (problem["check"], problem["file"]) == ("crc", str(seg))
    assert f"at byte {pos}" in problem["message"]
    assert "CRC mismatch" in problem["message"]
    assert f"last good offset {batches(seg)[1][3]}" in problem["message"]
    text = run(part)
    assert text.exit_code == 1
    assert f"{seg}: crc: at byte {pos}: CRC mismatch" in text.stdout
    assert "events-0: " in text.stdout
    assert "problem(s)" in text.stdout


def test_truncated_tail(part: Path) -> None:
    seg = segments(part)[-1]
    pos = batches(seg)[-1][0]
    seg.write_bytes(seg.read_bytes()[:-5])
    # the txn index entry of the cut-off ABORT marker now points at nothing: report both
    found = problems(part)
    assert found[0]["check"] == "truncated"
    assert found[0]["file"] == str(seg)
    assert f"at byte {pos}" in found[0]["message"]
    assert {p["check"] for p in found} <= {"truncated", "txn-index"}


def test_index_entry_not_at_a_batch_start(part: Path) -> None:
    seg = segments(part)[0]
    index = seg.with_suffix(".index")
    data = bytearray(index.read_bytes())
    rel, position = struct.unpack_from(">ii", data, 8)
    struct.pack_into(">ii", data, 8, rel, position + 1)
    index.write_bytes(data)
    problem = only(part, "offset-index", index)
    assert f"entry 1 (offset {rel}, position {position + 1})" in problem["message"]
    assert "not the start of a batch" in problem["message"]


def test_index_offset_below_the_batch_there(part: Path) -> None:
    seg = segments(part)[0]
    index = seg.with_suffix(".index")
    data = bytearray(index.read_bytes())
    _, position = struct.unpack_from(">ii", data, 8)
    base = next(b for p, _, b, _ in batches(seg) if p == position)
    prev_rel, _ = struct.unpack_from(">ii", data, 0)
    assert base - 1 > prev_rel  # still strictly increasing: only the layout rule catches it
    struct.pack_into(">ii", data, 8, base - 1, position)
    index.write_bytes(data)
    problem = only(part, "offset-index", index)
    assert f"below base offset {base}" in problem["message"]


def test_index_length_not_a_multiple_of_entries(part: Path) -> None:
    index = segments(part)[0].with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\x00\x00\x00")
    problem = only(part, "offset-index", index)
    assert "not a multiple of 8" in problem["message"]


def test_time_index_not_monotonic(part: Path) -> None:
    timeindex = segments(part)[0].with_suffix(".timeindex")
    data = bytearray(timeindex.read_bytes())
    assert len(data) >= 24
    first, second = data[0:8], data[12:20]
    data[0:8], data[12:20] = second, first  # swap the first two timestamps
    timeindex.write_bytes(data)
    problem = only(part, "time-index", timeindex)
    assert "timestamp" in problem["message"]
    assert "below" in problem["message"]


def test_time_index_offset_outside_segment(part: Path) -> None:
    seg = segments(part)[0]
    timeindex = seg.with_suffix(".timeindex")
    last = batches(seg)[-1][3]
    data = bytearray(timeindex.read_bytes())
    ts, _ = struct.unpack_from(">qi", data, len(data) - 12)
    struct.pack_into(">qi", data, len(data) - 12, ts, last + 50)
    timeindex.write_bytes(data)
    problem = only(part, "time-index", timeindex)
    assert f"offset {last + 50}" in problem["message"]
    assert "outside" in problem["message"]


def test_txn_index_without_abort_marker(part: Path) -> None:
    (path,) = part.glob("*.txnindex")
    base = int(path.stem)
    with TransactionIndex(path, base) as txns:
        (entry,) = txns.all_aborted()
        txns.append(AbortedTxn(PID, entry.last_offset, entry.last_offset + 1, 0))
    problem = only(part, "txn-index", path)
    want = f"no ABORT marker of producer {PID} at offset {entry.last_offset + 1}"
    assert want in problem["message"]


def test_bad_checkpoints(logdir: Path, part: Path) -> None:
    cleaner = logdir / "cleaner-offset-checkpoint"
    cleaner.write_text("0\n2\nevents 0 30\n")  # count says 2, one entry
    epochs = part / "leader-epoch-checkpoint"
    epochs.write_text("0\n1\nzero 0\n")
    found = problems(logdir)
    assert {(p["check"], p["file"]) for p in found} == {
        ("checkpoint", str(cleaner)),
        ("checkpoint", str(epochs)),
    }
    assert only(part, "checkpoint", epochs)  # a partition dir checks only its own files


@pytest.mark.parametrize("suffix", [".swap", ".cleaned", ".deleted"])
def test_leftovers_of_an_interrupted_swap(part: Path, suffix: str) -> None:
    seg = segments(part)[0]
    leftover = seg.with_name(seg.name + suffix)
    shutil.copy(seg, leftover)
    problem = only(part, "interrupted-swap", leftover)
    assert problem["message"] == "interrupted swap; opening the log will recover it"


@pytest.mark.parametrize(
    ("row", "reason"),
    [(5, "bad record"), (3, "does not decompress")],  # batch 5 is uncompressed, 3 is lz4
)
def test_records_that_do_not_decode(part: Path, row: int, reason: str) -> None:
    """The CRC is right (recomputed) but the record bytes are not."""
    seg = segments(part)[0]
    assert len(batches(seg)) > 5
    pos, size, base, _ = batches(seg)[row]
    data = bytearray(seg.read_bytes())
    batch = bytearray(data[pos : pos + size])
    batch[-1] = 0x7F  # uncompressed: the last record's header count becomes 63 missing headers
    data[pos : pos + size] = finish_crc(batch)
    seg.write_bytes(data)
    problem = only(part, "records", seg)
    assert problem["message"].startswith(f"at byte {pos}: ")
    assert f"last good offset {base - 1}" in problem["message"]
    if reason == "bad record":
        assert f"batch base offset {base}" in problem["message"]
    else:
        assert reason in problem["message"]


def test_records_checked_in_chunks(part: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunking (bounded memory) neither hides a bad batch nor miscounts the good ones."""
    monkeypatch.setattr(segment_checks, "_CHUNK_RECORDS", 4)  # about one batch per chunk
    clean = report(part)["partitions"][0]["records"]
    seg = segments(part)[0]
    pos, size, base, _ = batches(seg)[5]
    data = bytearray(seg.read_bytes())
    batch = bytearray(data[pos : pos + size])
    batch[-1] = 0x7F
    data[pos : pos + size] = finish_crc(batch)
    seg.write_bytes(data)
    problem = only(part, "records", seg)
    assert problem["message"].startswith(f"at byte {pos}: ")
    assert f"batch base offset {base}" in problem["message"]
    assert report(part)["partitions"][0]["records"] == clean - 3


def test_overlapping_segments(part: Path) -> None:
    first, second = segments(part)[:2]
    last = batches(first)[-1][3]
    for p in part.glob(f"{second.stem}.*"):
        p.rename(p.with_name(f"{last:020d}{p.suffix}"))
    found = problems(part)
    assert any(
        p["check"] == "offsets"
        and p["file"] == str(first)
        and f"last batch ends at offset {last}" in p["message"]
        for p in found
    )


def test_orphan_index(part: Path) -> None:
    orphan = part / f"{10**9:020d}.index"
    orphan.write_bytes(b"")
    only(part, "orphan-index", orphan)


# --- read-only ----------------------------------------------------------------------------------
def test_verify_never_modifies_anything(logdir: Path, part: Path) -> None:
    """Damage that PartitionLog would repair on open (swap leftovers, bad index, torn tail)."""
    segs = segments(part)
    shutil.copy(segs[0], segs[0].with_name(segs[0].name + ".swap"))
    segs[-1].write_bytes(segs[-1].read_bytes()[:-3])
    index = segs[1].with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\x01")
    (logdir / "log-start-offset-checkpoint").write_text("garbage")
    before = fingerprint(logdir)
    for args in ([logdir], ["--format", "json", logdir], [part]):
        assert run(*args).exit_code == 1
    assert fingerprint(logdir) == before
    assert TimeIndex(segs[0].with_suffix(".timeindex"), 0).entries > 0


@pytest.mark.slow
def test_real_process(logdir: Path, part: Path) -> None:
    cmd = [sys.executable, "-m", "cleanerd", "verify", "--format", "json"]
    done = subprocess.run([*cmd, str(logdir)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True
    shutil.copy(segments(part)[0], part / (segments(part)[0].name + ".cleaned"))
    done = subprocess.run([*cmd, str(part)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert json.loads(done.stdout)["problem_count"] == 1
    done = subprocess.run([*cmd, str(logdir / "nope")], capture_output=True, text=True, check=False)
    assert done.returncode == 2


# --- a segment named by one of its files --------------------------------------------------------
def test_a_segment_file_checks_that_segment_only(part: Path) -> None:
    """Damage in another segment is not this segment's; this one's is found, whichever of its
    files names it."""
    segs = segments(part)
    first, second = segs[0], segs[1]
    index = second.with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\x01")  # the second segment's damage
    data = report(first)
    assert (data["kind"], data["ok"], data["problem_count"]) == ("segment", True, 0)
    (only_part,) = data["partitions"]
    assert (only_part["name"], only_part["segments"]) == ("events-0", 1)
    assert only_part["first_offset"] == batches(first)[0][2]
    assert only_part["last_offset"] == batches(first)[-1][3]
    result = run(first)
    assert result.exit_code == 0, result.stdout
    assert result.stdout.rstrip().endswith(f"verify {first}: OK (1 segment of events-0)")

    for named in (second, index, second.with_suffix(".timeindex")):
        problem = only(named, "offset-index", index)
        assert f"length {len(index.read_bytes())}" in problem["message"], problem
        assert run(named).exit_code == 1


def test_a_txnindex_file_is_checked_against_the_markers_before_it(part: Path) -> None:
    (path,) = part.glob("*.txnindex")
    assert path.stem != segments(part)[0].stem  # a later segment: the log before it is read too
    assert report(path)["ok"] is True
    with TransactionIndex(path, int(path.stem)) as txns:
        (entry,) = txns.all_aborted()
        txns.append(AbortedTxn(PID, entry.last_offset, entry.last_offset + 1, 0))
    problem = only(path, "txn-index", path)
    want = f"no ABORT marker of producer {PID} at offset {entry.last_offset + 1}"
    assert want in problem["message"]
    assert report(path.with_suffix(".log"))["ok"] is False


def test_a_segment_overlapping_the_next_one(part: Path) -> None:
    first, second = segments(part)[:2]
    last = batches(first)[-1][3]
    for p in part.glob(f"{second.stem}.*"):
        p.rename(p.with_name(f"{last:020d}{p.suffix}"))
    problem = only(first, "offsets", first)
    assert f"last batch ends at offset {last}" in problem["message"]


def test_an_index_whose_log_is_gone(part: Path) -> None:
    orphan = part / f"{10**9:020d}.timeindex"
    orphan.write_bytes(b"")
    only(orphan, "orphan-index", orphan)


def test_a_missing_segment_file(part: Path) -> None:
    for name in (f"{10**9:020d}.log", f"{10**9:020d}.index"):
        result = run(part / name)
        assert result.exit_code == 2
        assert f"'{part / name}' does not exist" in result.stderr


@pytest.mark.parametrize("name", ["leader-epoch-checkpoint", "notes.txt", "0.log.swap"])
def test_files_verify_does_not_check_are_usage_errors(part: Path, name: str) -> None:
    path = part / name
    if not path.exists():
        path.write_bytes(b"")
    result = run(path)
    assert result.exit_code == 2, result.output
    assert "verify takes a log dir, a partition dir, or a segment's .log" in result.stderr
    assert str(path) in result.stderr


def test_a_segment_file_of_the_current_dir(part: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cleanerd verify 00000000000000000000.log`` from inside the partition dir."""
    monkeypatch.chdir(part)
    name = segments(part)[0].name
    result = run(name)
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith(f"verify {name}: OK (1 segment of events-0)")
