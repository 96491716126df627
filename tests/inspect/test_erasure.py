"""``cleanerd erasure check``: a key's newest record, its older values still on disk (segments,
swap leftovers, snapshots) and the ledger's cleanings; exit 1 when any older value is found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from cleanerd.format import Record
from cleanerd.inspect import parse_key, read_key_file
from cleanerd.storage import LEDGER_FILE, PartitionLog
from cleanerd.topics import LogConfig
from cleanerd.workload import WorkloadSpec, expected_survivors, generate
from tests.support.cleaning import Producer
from tests.support.cli import run

NOW = 1_800_000_000_000
ZERO = ("--now", NOW, "--delete-retention-ms", 0)


def check(*args: str | Path | int) -> tuple[int, dict[str, Any]]:
    """``erasure check ... --format json``: exit code and document."""
    result = run("erasure", "check", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def found(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    [entry] = [k for k in doc["keys"] if k["key"] == key]
    return list(entry["partitions"])


def names(copies: list[dict[str, Any]]) -> set[str]:
    return {Path(c["file"]).name for c in copies}


def small_log(root: Path, *, name: str = "t-0") -> Path:
    """k0..k4 three times each over two segments (offsets 0-14, k0 at 0, 5, 10), rolled."""
    directory = root / name
    log = PartitionLog.create(directory, LogConfig())
    try:
        for n in range(15):
            log.append([Record(0, 1_000 + n, f"k{n % 5}".encode(), b"v%d" % n)])
            if n == 7:
                log.roll()
        log.roll()
    finally:
        log.close()
    return directory


def append(directory: Path, *records: Record, roll: bool = True) -> None:
    log = PartitionLog(directory, LogConfig())
    try:
        for r in records:
            log.append([r])
        if roll:
            log.roll()
    finally:
        log.close()


def compact(path: Path) -> None:
    result = run("compact", path, *ZERO)
    assert result.exit_code == 0, result.output


# --- a generated, compacted log ------------------------------------------------------------------
@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes, int]:
    """A generated log dir (tombstones, transactions) before compaction, and a key deleted by
    its last record and a live key with its last offset."""
    logdir = tmp_path_factory.mktemp("gen") / "logs"
    spec = WorkloadSpec(
        records=3000, keys=200, records_per_batch=20, segment_bytes=30_000, tombstone_ratio=0.15
    )
    generate(logdir, spec)
    log = PartitionLog(logdir / "demo-0")
    try:
        want = expected_survivors(log.read())
    finally:
        log.close()
    deleted = next(key for key, s in sorted(want.items()) if s.tombstone)
    live, last = next((key, s.offset) for key, s in sorted(want.items()) if not s.tombstone)
    return logdir, deleted, live, last


def test_an_uncleaned_log_holds_older_values(generated: tuple[Path, bytes, bytes, int]) -> None:
    logdir, deleted, live, last = generated
    code, doc = check(logdir, "--key", deleted.decode(), "--key", live.decode())
    assert code == 1
    assert doc["ok"] is False
    [part] = found(doc, live.decode())
    assert part["newest"]["offset"] == last
    assert part["older_count"] == len(part["older"]) > 0
    assert all(c["kind"] == "segment" and c["offset"] < last for c in part["older"])
    assert names(part["older"]) <= {p.name for p in (logdir / "demo-0").glob("*.log")}
    assert part["removed_by_ledger"] == []


def test_a_compacted_log_holds_no_older_value(
    generated: tuple[Path, bytes, bytes, int], tmp_path: Path
) -> None:
    source, deleted, live, last = generated
    logdir = tmp_path / "logs"
    shutil.copytree(source, logdir)
    compact_cli = run("compact", logdir, "--roll-active", *ZERO)
    assert compact_cli.exit_code == 0, compact_cli.output
    code, doc = check(logdir, "--key", deleted.decode(), "--key", live.decode())
    assert code == 0, doc
    assert doc["ok"] is True
    assert found(doc, deleted.decode()) == []  # the tombstone went too: not on disk at all
    [part] = found(doc, live.decode())
    assert part["newest"]["offset"] == last
    assert (part["older"], part["older_count"]) == ([], 0)
    [entry] = part["removed_by_ledger"]  # the compaction that covered the newest record
    assert entry["first_dirty"] <= last < entry["end"]
    assert entry["engine"] == "local"
    text = run("erasure", "check", logdir, "--key", live.decode())
    assert text.exit_code == 0
    assert "none" in text.stdout
    assert entry["time"] in text.stdout


# --- (a) a segment not cleaned yet, (b) a snapshot, (c) a swap leftover --------------------------
def test_a_new_value_leaves_the_old_one_in_the_cleaned_segment(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    compact(directory)
    code, doc = check(directory, "--key", "k1")
    assert code == 0
    [part] = found(doc, "k1")
    old = part["newest"]
    append(directory, Record(0, 5_000, b"k1", b"new"), roll=False)  # in the active segment
    code, doc = check(directory, "--key", "k1")
    assert code == 1
    [part] = found(doc, "k1")
    assert part["newest"]["offset"] == 15
    assert part["older"] == [old]  # the cleaned segment still holds it, named
    assert Path(old["file"]).parent == directory


def test_a_snapshot_taken_before_a_delete_holds_the_value(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    made = run("snapshot", "create", directory, "--format", "json")
    assert made.exit_code == 0, made.output
    snapshot = Path(json.loads(made.stdout)["path"])
    append(directory, Record(0, 5_000, b"k1", None))  # delete k1 after the snapshot
    compact(directory)
    code, doc = check(directory, "--key", "k1", "--key", "k2")
    assert code == 1
    [k1] = found(doc, "k1")
    assert k1["newest"]["tombstone"] is True  # kept: the snapshot's readers need it
    [older] = k1["older"]
    assert older == {
        "file": str(snapshot),
        "kind": "snapshot",
        "offset": None,
        "timestamp": 1_011,
        "tombstone": False,
        "snapshot_end": 15,
    }
    [k2] = found(doc, "k2")
    assert k2["older_count"] == 0  # the snapshot's copy of k2 is its newest value
    assert k2["newest"]["kind"] == "segment"
    result = run("erasure", "check", directory, "--key", "k1")
    assert result.exit_code == 1
    assert snapshot.name in result.stdout


def test_a_deleted_segment_left_behind_holds_the_values(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    first = directory / "00000000000000000000.log"
    saved = first.read_bytes()
    compact(directory)
    leftover = directory / "00000000000000000000.log.deleted"
    leftover.write_bytes(saved)  # a swap's .deleted file a crash left behind
    code, doc = check(directory, "--key", "k0")
    assert code == 1
    [part] = found(doc, "k0")
    assert part["newest"]["offset"] == 10
    assert {(Path(c["file"]).name, c["offset"], c["kind"]) for c in part["older"]} == {
        (leftover.name, 0, "leftover"),
        (leftover.name, 5, "leftover"),
    }
    result = run("erasure", "check", directory, "--key", "k0")
    assert result.exit_code == 1
    assert leftover.name in result.stdout


def test_a_leftover_copy_of_the_newest_record_is_not_an_older_value(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    compact(directory)
    segment = next(iter(sorted(directory.glob("*.log"))))
    shutil.copy(segment, segment.with_name(segment.name + ".swap"))
    code, doc = check(directory, "--key", "k3")
    assert code == 0, doc


# --- keys, strategies, transactions --------------------------------------------------------------
def test_hex_keys_and_key_files(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    binary = b"\x00\xff\xfe"
    append(directory, Record(0, 1, binary, b"a"), Record(0, 2, binary, b"b"))
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"hex:00FFFE\r\nk4\n\ntext:hex:not-hex\n")
    assert read_key_file(keys) == [binary, b"k4", b"hex:not-hex"]
    code, doc = check(directory, "--key-file", keys)
    assert code == 1
    [entry] = [k for k in doc["keys"] if k["key_hex"] == "00fffe"]
    assert entry["key"] is None
    assert entry["older_on_disk"] is True
    [part] = entry["partitions"]
    assert (part["newest"]["offset"], [c["offset"] for c in part["older"]]) == (16, [15])
    assert found(doc, "hex:not-hex") == []
    text = run("erasure", "check", directory, "--key", "hex:00fffe")
    assert "hex:00fffe" in text.stdout


def test_the_newest_record_follows_the_strategy(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.create(directory, LogConfig())
    try:
        log.append([Record(0, 9_000, b"k", b"late clock")])  # offset 0, the highest timestamp
        log.append([Record(0, 1_000, b"k", b"early clock")])  # offset 1
    finally:
        log.close()
    _, by_offset = check(directory, "--key", "k")
    _, by_time = check(directory, "--key", "k", "--strategy", "timestamp")
    assert [p["newest"]["offset"] for p in found(by_offset, "k")] == [1]
    assert [p["newest"]["offset"] for p in found(by_time, "k")] == [0]
    assert [c["offset"] for c in found(by_time, "k")[0]["older"]] == [1]


def test_an_aborted_record_is_never_the_newest(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.create(directory, LogConfig())
    try:
        log.append([Record(0, 1, b"9", b"committed")])
        producer = Producer(log, 7)
        producer(9, 9)  # key "9" twice more, in a transaction that aborts
        producer.abort()
    finally:
        log.close()
    code, doc = check(directory, "--key", "9")
    assert code == 1
    [part] = found(doc, "9")
    assert part["newest"]["offset"] == 0
    assert [(c["offset"], c.get("aborted")) for c in part["older"]] == [(1, True), (2, True)]
    log = PartitionLog(directory, LogConfig())
    try:
        later = Producer(log, 8)
        later(9)  # offset 4, committed in the next segment
        log.roll()
        later.commit()
    finally:
        log.close()
    _, doc = check(directory, "--key", "9")
    [part] = found(doc, "9")
    assert part["newest"]["offset"] == 4
    assert [c["offset"] for c in part["older"]] == [0, 1, 2]


def test_a_partition_dir_kafka_is_deleting_is_read_too(tmp_path: Path) -> None:
    live = small_log(tmp_path / "logs", name="t-0")
    gone = live.with_name("t-0.0123456789abcdef0123456789abcdef-delete")
    shutil.copytree(live, gone)
    compact(live)
    code, doc = check(tmp_path / "logs", "--key", "k0", "--topic", "t")
    assert code == 1
    by_dir = {p["partition"]: p["older_count"] for p in found(doc, "k0")}
    assert by_dir == {gone.name: 2, "t-0": 0}


# --- bad input -----------------------------------------------------------------------------------
def test_a_corrupt_segment_is_named_with_its_position(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    first = directory / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch's record: its CRC no longer matches
    first.write_bytes(bytes(data))
    result = run("erasure", "check", directory, "--key", "k0", "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    [bad] = doc["unreadable"]
    assert bad["file"] == str(first)
    assert isinstance(bad["position"], int)
    assert f"at byte {bad['position']}" in bad["error"]
    assert f"error: cannot read: {first} at byte {bad['position']}" in result.stderr
    assert "Traceback" not in result.output
    # what came before the bad batch was still read
    assert [c["offset"] for c in found(doc, "k0")[0]["older"]] == [0, 5]


def test_a_hostile_ledger_is_reported_not_fatal(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    compact(directory)
    with (directory / LEDGER_FILE).open("ab") as f:
        f.write(b'{"v":1,"end":"x"}\n' + b"\x00" * 10 + b"\n")
    result = run("erasure", "check", directory, "--key", "k0", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["ledger_problems"]) == 2
    assert f"warning: {directory / LEDGER_FILE}: line 2: not a ledger entry" in result.stderr
    assert len(found(doc, "k0")[0]["removed_by_ledger"]) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no key to check"),
        (("--key", "hex:xyz"), "not hex digits"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    directory = small_log(tmp_path)
    result: Result = run("erasure", "check", directory, *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_dir_without_partitions_is_a_usage_error(tmp_path: Path) -> None:
    result = run("erasure", "check", tmp_path, "--key", "k")
    assert result.exit_code == 2
    assert "holds no segment and no partition dir" in result.stderr


def test_a_key_file_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match=f"{keys}: line 2: not UTF-8"):
        read_key_file(keys)
    assert parse_key("text:text:x") == b"text:x"
