"""``cleanerd gen`` and ``cleanerd.workload``: reproducible logs that say what they hold.

Everything is checked by reading the written partition back through ``PartitionLog`` (the same
reader the cleaner uses), never by trusting the generator's own counters.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cleanerd.cli._gen import gen
from cleanerd.format import Compression, ControlType, Record, RecordBatch, kernels as k
from cleanerd.storage import PartitionLog
from cleanerd.workload import (
    DEFAULT_START_TIMESTAMP,
    Survivor,
    SurvivorTracker,
    WorkloadError,
    WorkloadSpec,
    expected_survivors,
)

SMALL = ["--records", "2000", "--keys", "50", "--records-per-batch", "20"]


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(gen, [str(a) for a in args], catch_exceptions=False)


def ok(*args: str | Path) -> Result:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


def summary(*args: str | Path) -> Any:
    """The JSON document of a successful run (JSON-shaped, so typed loosely)."""
    return json.loads(ok(*args, "--format", "json").output)


def batches(directory: Path) -> Iterator[RecordBatch]:
    log = PartitionLog(directory)
    try:
        yield from log.read()
    finally:
        log.close()


def data_records(directory: Path) -> list[Record]:
    return [r for b in batches(directory) if not b.header.is_control for r in b.records()]


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# -- determinism ------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_seed_writes_identical_bytes(tmp_path: Path) -> None:
    args = [*SMALL, "--partitions", "2", "--codec", "gzip", "--headers", "2"]
    args += ["--transactional-producers", "2", "--idempotent-producers", "2"]
    args += ["--version-header", "v", "--timestamps", "shuffled", "--segment-bytes", "20000"]
    ok(tmp_path / "a", *args, "--expected", tmp_path / "a.json")
    ok(tmp_path / "b", *args, "--expected", tmp_path / "b.json")
    ok(tmp_path / "c", *args, "--seed", "7")
    for part in ("demo-0", "demo-1"):
        a = files(tmp_path / "a" / part)
        assert len([n for n in a if n.endswith(".log")]) > 1
        assert any(n.endswith(".txnindex") for n in a)
        assert a == files(tmp_path / "b" / part)
        assert a != files(tmp_path / "c" / part)
    assert files(tmp_path / "a" / "demo-0") != files(tmp_path / "a" / "demo-1")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


# -- counts -----------------------------------------------------------------------------------


def test_counts_match_options_and_summary(tmp_path: Path) -> None:
    doc = summary(tmp_path, *SMALL, "--tombstone-ratio", "0.25", "--value-bytes", "33")
    records = data_records(tmp_path / "demo-0")
    assert len(records) == 2000
    assert [r.offset for r in records] == list(range(2000))
    keys = Counter(r.key for r in records)
    assert len(keys) == 50
    assert all(k is not None and k.startswith(b"key-") for k in keys)
    tombstones = sum(r.value is None for r in records)
    assert 350 < tombstones < 650  # 25% of 2000, seeded
    assert {len(r.value) for r in records if r.value is not None} == {33}
    (part,) = doc["partitions"]
    assert part["records"] == 2000
    assert part["batches"] == 100
    assert part["tombstones"] == tombstones
    assert part["distinct_keys"] == 50
    assert (part["first_offset"], part["last_offset"]) == (0, 1999)


def test_zipf_keys_are_skewed(tmp_path: Path) -> None:
    ok(tmp_path, "--records", "5000", "--keys", "100", "--key-distribution", "zipf")
    ok(tmp_path / "u", "--records", "5000", "--keys", "100")
    zipf = Counter(r.key for r in data_records(tmp_path / "demo-0"))
    uniform = Counter(r.key for r in data_records(tmp_path / "u" / "demo-0"))
    assert zipf.most_common(1)[0][0] == b"key-000000"
    assert zipf[b"key-000000"] > 3 * max(uniform.values())
    assert zipf[b"key-000000"] > zipf[b"key-000010"] > zipf[b"key-000090"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_reads_back(tmp_path: Path, codec: str) -> None:
    ok(tmp_path, *SMALL, "--codec", codec, "--headers", "3", "--transactional-producers", "1")
    found = list(batches(tmp_path / "demo-0"))
    data = [b for b in found if not b.header.is_control]
    assert {b.header.compression for b in data} == {Compression.from_label(codec)}
    log = PartitionLog(tmp_path / "demo-0")
    records = [r for r in log.records() if r.key is not None and r.key.startswith(b"key-")]
    log.close()
    assert len(records) == 2000
    assert all(len(r.headers) == 3 for r in records)
    assert any(v is None for r in records for _, v in r.headers)
    assert any(v is not None for r in records for _, v in r.headers)


# -- producers and transactions ---------------------------------------------------------------


def test_transactions_markers_and_expected(tmp_path: Path) -> None:
    args = [*SMALL, "--transactional-producers", "3", "--abort-ratio", "0.4"]
    doc = summary(tmp_path, *args, "--segment-bytes", "30000")
    part = doc["partitions"][0]
    found = list(batches(tmp_path / "demo-0"))
    markers = [(b.header.producer_id, b.control_type()) for b in found if b.header.is_control]
    commits = sum(kind == ControlType.COMMIT for _, kind in markers)
    aborts = sum(kind == ControlType.ABORT for _, kind in markers)
    assert commits == part["commits"] > 0
    assert aborts == part["aborts"] > 0
    # Replay: every transactional data batch is decided by its producer's next marker.
    open_txn: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for b in found:
        h = b.header
        if h.is_control:
            offsets = open_txn.pop(h.producer_id)  # every marker closes a real transaction
            if b.control_type() == ControlType.ABORT:
                aborted.update(offsets)
        elif h.is_transactional:
            open_txn.setdefault(h.producer_id, []).extend(r.offset for r in b.records())
    assert open_txn == {}  # all closed without --leave-open
    assert len(aborted) == part["aborted_records"] > 0
    keys = part["expected"]["keys"]
    assert keys
    assert not any(s["offset"] in aborted for s in keys.values())
    # Independent oracle: the newest non-aborted record per key.
    newest: dict[str, Record] = {}
    for r in data_records(tmp_path / "demo-0"):
        if r.offset not in aborted and r.key is not None:
            newest[r.key.decode()] = r
    assert {k: v["offset"] for k, v in keys.items()} == {k: r.offset for k, r in newest.items()}
    assert {k for k, v in keys.items() if v["tombstone"]} == {
        k for k, r in newest.items() if r.value is None
    }
    # Kafka indexes every aborted transaction in the .txnindex of its marker's segment.
    log = PartitionLog(tmp_path / "demo-0")
    indexed = [t for s in log.segments for t in s.txn_index.all_aborted()]
    assert indexed == log.producer_state().aborted
    log.close()
    assert len(indexed) == aborts
    assert all(t.first_offset in aborted for t in indexed)


def test_leave_open_keeps_transactions_undecided(tmp_path: Path) -> None:
    doc = summary(tmp_path, *SMALL, "--transactional-producers", "4", "--leave-open")
    part = doc["partitions"][0]
    open_txn: dict[int, list[int]] = {}
    for b in batches(tmp_path / "demo-0"):
        if b.header.is_control:
            open_txn.pop(b.header.producer_id)
        elif b.header.is_transactional:
            open_txn.setdefault(b.header.producer_id, []).extend(r.offset for r in b.records())
    assert part["open_transactions"] == len(open_txn) > 0
    pending = {o for offsets in open_txn.values() for o in offsets}
    assert not any(s["offset"] in pending for s in part["expected"]["keys"].values())
    log = PartitionLog(tmp_path / "demo-0")
    assert log.last_stable_offset() == min(min(v) for v in open_txn.values())
    log.close()


def test_idempotent_sequences_run_per_producer(tmp_path: Path) -> None:
    ok(tmp_path, *SMALL, "--idempotent-producers", "3", "--transactional-producers", "2")
    next_seq: dict[int, int] = {}
    epochs: set[int] = set()
    for b in batches(tmp_path / "demo-0"):
        h = b.header
        assert h.producer_id >= 0
        epochs.add(h.producer_epoch)
        if h.is_control:
            assert h.base_sequence == -1
            continue
        assert h.base_sequence == next_seq.get(h.producer_id, 0)
        assert h.last_sequence == h.base_sequence + h.records_count - 1
        next_seq[h.producer_id] = h.last_sequence + 1
    assert len(next_seq) == 5
    assert sum(next_seq.values()) == 2000
    assert epochs == {0}


# -- headers and timestamps -------------------------------------------------------------------


def test_version_header_is_an_8_byte_long(tmp_path: Path) -> None:
    ok(tmp_path, *SMALL, "--version-header", "ver", "--version-skew", "0.3", "--headers", "1")
    records = data_records(tmp_path / "demo-0")
    last: dict[bytes | None, int] = {}
    ups = downs = 0
    for r in records:
        assert [h for h, _ in r.headers] == ["h0", "ver"]
        raw = r.headers[-1][1]
        assert raw is not None
        assert len(raw) == 8
        (version,) = struct.unpack(">q", raw)
        if r.key in last:
            ups += version > last[r.key]
            downs += version < last[r.key]
        last[r.key] = version
    assert ups > downs > 0
    # Under the header strategy a key keeps its highest version; skewed records lose.
    by_header = expected_survivors(
        batches(tmp_path / "demo-0"), strategy="header", version_header="ver"
    )
    by_offset = expected_survivors(batches(tmp_path / "demo-0"))
    for key, s in by_header.items():
        versions = [
            struct.unpack(">q", r.headers[-1][1] or b"")[0] for r in records if r.key == key
        ]
        assert s.version == max(versions)
    assert any(by_header[k].offset < by_offset[k].offset for k in by_header)


@pytest.mark.slow
def test_shuffled_timestamps_stay_in_window(tmp_path: Path) -> None:
    window = 500
    ok(tmp_path, *SMALL, "--timestamps", "shuffled", "--timestamp-window-ms", str(window))
    stamps = [r.timestamp for r in data_records(tmp_path / "demo-0")]
    assert all(0 <= ts - (DEFAULT_START_TIMESTAMP + i) < window for i, ts in enumerate(stamps))
    assert stamps != sorted(stamps)
    ok(tmp_path / "o", *SMALL, "--start-timestamp", "1000")
    ordered = [r.timestamp for r in data_records(tmp_path / "o" / "demo-0")]
    assert ordered == list(range(1000, 3000))
    by_ts = expected_survivors(batches(tmp_path / "demo-0"), strategy="timestamp")
    for key, s in by_ts.items():
        mine = [r for r in data_records(tmp_path / "demo-0") if r.key == key]
        assert s.timestamp == max(r.timestamp for r in mine)


# -- segments and existing data ---------------------------------------------------------------


def test_segments_roll_at_segment_bytes(tmp_path: Path) -> None:
    doc = summary(tmp_path, *SMALL, "--segment-bytes", "16384", "--index-interval-bytes", "1024")
    logs = sorted((tmp_path / "demo-0").glob("*.log"))
    sizes = [p.stat().st_size for p in logs]
    assert len(logs) > 3
    assert all(size <= 16384 for size in sizes)
    # Kafka's rule: roll exactly when the next batch would not fit.
    log = PartitionLog(tmp_path / "demo-0")
    first_batch = [int(seg.scan().batches[0, k.B_SIZE]) for seg in log.segments]
    log.close()
    assert all(size + nxt > 16384 for size, nxt in zip(sizes, first_batch[1:], strict=False))
    assert doc["partitions"][0]["segments"] == len(logs)
    assert doc["partitions"][0]["bytes"] == sum(sizes)
    bases = [int(p.name.split(".")[0]) for p in logs]
    assert bases[0] == 0
    assert bases == sorted(bases)
    assert all((tmp_path / "demo-0" / f"{p.stem}.index").stat().st_size > 0 for p in logs[:-1])


def test_refuses_existing_partition_unless_append(tmp_path: Path) -> None:
    args = [*SMALL, "--idempotent-producers", "2", "--transactional-producers", "1"]
    first = summary(tmp_path, *args, "--leave-open")
    assert first["partitions"][0]["open_transactions"] == 1
    before = files(tmp_path / "demo-0")
    result = run(tmp_path, *args)
    assert result.exit_code != 0
    assert "--append" in result.output
    assert "demo-0" in result.output
    assert files(tmp_path / "demo-0") == before
    doc = summary(tmp_path, *args, "--append")
    part = doc["partitions"][0]
    assert part["appended_to_existing"] is True
    assert part["first_offset"] == 0
    assert part["last_offset"] > 4000
    records = data_records(tmp_path / "demo-0")
    assert len(records) == 4000
    assert records[2000].timestamp > max(r.timestamp for r in records[:2000])
    # Sequences continue across runs.
    next_seq: dict[int, int] = {}
    for b in batches(tmp_path / "demo-0"):
        if not b.header.is_control:
            assert b.header.base_sequence == next_seq.get(b.header.producer_id, 0)
            next_seq[b.header.producer_id] = b.header.last_sequence + 1
    assert part["expected"]["keys"] == {
        k.decode(): s.to_json() for k, s in expected_survivors(batches(tmp_path / "demo-0")).items()
    }
    # The transaction left open by the first run was ended (and indexed) by the second.
    log = PartitionLog(tmp_path / "demo-0")
    state = log.producer_state()
    assert state.first_unstable_offset is None
    assert [t for s in log.segments for t in s.txn_index.all_aborted()] == state.aborted
    log.close()


def test_empty_partition_dir_is_not_refused(tmp_path: Path) -> None:
    (tmp_path / "demo-0").mkdir()
    ok(tmp_path, *SMALL)
    assert len(data_records(tmp_path / "demo-0")) == 2000


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--abort-ratio", "1.5"], "--abort-ratio"),
        (["--tombstone-ratio", "-0.1"], "--tombstone-ratio"),
        (["--version-skew", "2"], "--version-skew"),
        (["--keys", "0"], "--keys"),
        (["--records", "-1"], "--records"),
        (["--partitions", "0"], "--partitions"),
        (["--records-per-batch", "0"], "--records-per-batch"),
        (["--segment-bytes", "10"], "--segment-bytes"),
        (["--zipf-s", "0"], "--zipf-s"),
        (["--timestamp-window-ms", "0"], "--timestamp-window-ms"),
        (["--topic", "bad/name"], "--topic"),
        (["--version-header", ""], "--version-header"),
        (["--codec", "brotli"], "--codec"),
        (["--format", "xml"], "--format"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_invalid_options_exit_2_naming_the_option(
    tmp_path: Path, args: list[str], option: str
) -> None:
    result = run(tmp_path / "x", *args)
    assert result.exit_code == 2, result.output
    assert option in result.output
    assert not (tmp_path / "x").exists()


def test_cleanup_policy_is_not_an_option(tmp_path: Path) -> None:
    """It only ever reached the summary: cleanerd, like Kafka, keeps topic settings out of the
    log dir, so what the daemon compacts is its config's to say, not gen's."""
    result = run(tmp_path / "x", *SMALL, "--cleanup-policy", "compact")
    assert result.exit_code == 2
    assert "No such option '--cleanup-policy'" in result.output
    assert not (tmp_path / "x").exists()
    assert "cleanup" not in ok("--help").output
    assert "cleanup_policy" not in summary(tmp_path / "y", *SMALL)


def test_spec_errors_name_the_option() -> None:
    with pytest.raises(WorkloadError) as err:
        WorkloadSpec(abort_ratio=3.0)
    assert err.value.flag == "--abort-ratio"


# -- summary documents ------------------------------------------------------------------------


def test_json_summary_and_expected_file(tmp_path: Path) -> None:
    expected_file = tmp_path / "expected.json"
    args = [*SMALL, "--partitions", "2"]
    doc = summary(tmp_path / "log", *args, "--expected", expected_file)
    assert doc["topic"] == "demo"
    assert doc["records"] == 4000
    assert doc["batches"] == 200
    assert doc["ended"] == "done"
    assert doc["beside_daemon"] is False
    assert isinstance(doc["params"], dict)
    assert doc["params"]["records"] == 2000
    parts = doc["partitions"]
    assert isinstance(parts, list)
    assert [p["partition"] for p in parts] == [0, 1]
    fields = {"records", "batches", "segments", "bytes", "distinct_keys", "tombstones"}
    fields |= {"commits", "aborts", "aborted_records", "first_offset", "last_offset", "expected"}
    assert fields <= set(parts[0])
    saved = json.loads(expected_file.read_text())
    for p in parts:
        directory = tmp_path / "log" / p["directory"]
        oracle = expected_survivors(batches(directory))
        keys = {k.decode(): s.to_json() for k, s in oracle.items()}
        assert p["expected"]["keys"] == keys
        survivors = sum(not s.tombstone for s in oracle.values())
        assert p["expected"]["expected_survivors_drop_tombstones"] == survivors
        fixture_like = saved["partitions"][str(p["partition"])]
        assert fixture_like["keys"] == keys
        assert fixture_like["data_records"] == 2000
        assert fixture_like["next_offset"] == p["last_offset"] + 1
        assert sum(s["bytes"] for s in fixture_like["segments"]) == p["bytes"]


def test_text_output_is_a_table(tmp_path: Path) -> None:
    out = ok(tmp_path, *SMALL, "--transactional-producers", "1").output
    for word in ("demo-0", "records", "tombstones", "aborts", "expected survivors"):
        assert word in out
    assert "2,000 records in 100 batches to 1 partition in" in out


def test_tracker_strategies_and_transactions() -> None:
    t = SurvivorTracker("header")
    t.add(b"k", Survivor(0, 10, False, 5))
    t.add(b"k", Survivor(1, 11, False, 3))  # lower version loses
    t.add(b"k", Survivor(2, 12, False, None))  # no header loses to a header
    t.add(b"j", Survivor(3, 13, False, None), producer_id=9, txn=True)
    t.add(b"m", Survivor(4, 14, False, None), producer_id=8, txn=True)
    assert t.end_transaction(9, commit=False) == 1
    assert t.open_producers == [8]
    assert t.survivors() == {b"k": Survivor(0, 10, False, 5)}
    assert t.aborted_records == 1
    assert t.open_records == 1
    t.end_transaction(8, commit=True)
    assert set(t.survivors()) == {b"k", b"m"}


# -- a real process ---------------------------------------------------------------------------


@pytest.mark.slow
def test_real_process(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "cleanerd", "gen", str(tmp_path), *SMALL, "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["partitions"][0]["records"] == 2000
    assert len(data_records(tmp_path / "demo-0")) == 2000
    # Another process (another hash seed) writes the same bytes as this one.
    ok(tmp_path / "here", *SMALL)
    assert files(tmp_path / "demo-0") == files(tmp_path / "here" / "demo-0")
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, timeout=120, check=False)
    assert again.returncode == 1
    assert "--append" in again.stderr
