"""``compact --roll-active`` and ``plan --roll-active``: offline log dirs compacted whole.

Kafka never cleans the active segment, so a partition of one segment (the Kafka-written fixture
``small-gzip-hdr-tomb-0``, or any log copied from a stopped broker) is never compacted unless its
active segment is rolled first.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cleanerd.compaction import Bound, LogMeta, as_rolled, plan
from cleanerd.format import Record
from cleanerd.inspect import verify_path
from cleanerd.storage import PartitionLog
from cleanerd.topics import TopicCleanerConfig
from tests.support.cli import run

NAME = "small-gzip-hdr-tomb-0"
NOW = 1_800_000_000_000
ZERO = ("--now", str(NOW), "--delete-retention-ms", "0")


def fixture_copy(kafka_fixtures: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A log dir holding a copy of the fixture, and the fixture's expected.json."""
    directory = tmp_path / "logs" / NAME
    shutil.copytree(kafka_fixtures / NAME, directory)
    return directory, json.loads((kafka_fixtures / f"{NAME}.expected.json").read_text())


def files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def data_records(directory: Path) -> dict[bytes, int]:
    """Key -> offset of every data record left (no tombstone may be left: retention 0)."""
    log = PartitionLog(directory)
    out: dict[bytes, int] = {}
    try:
        for batch in log.read():
            for r in batch.records():
                assert r.key is not None
                assert r.key not in out
                assert r.value is not None
                out[r.key] = r.offset
    finally:
        log.close()
    return out


def survivors(expected: dict[str, Any]) -> dict[bytes, int]:
    return {k.encode(): v["offset"] for k, v in expected["keys"].items() if not v["tombstone"]}


@pytest.mark.slow
def test_roll_active_compacts_a_single_segment_fixture_whole(
    kafka_fixtures: Path, tmp_path: Path
) -> None:
    directory, expected = fixture_copy(kafka_fixtures, tmp_path)
    cmd = [sys.executable, "-m", "cleanerd", "compact", str(directory.parent), *ZERO]
    done = subprocess.run(
        [*cmd, "--roll-active", "--format", "json"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["rolled_active"] is True
    assert summary["note"] is None
    assert data_records(directory) == survivors(expected)
    assert len(survivors(expected)) == expected["expected_survivors_drop_tombstones"]
    assert summary["first_uncleanable_offset"] == summary["checkpoint"] == expected["next_offset"]
    assert summary["records_out"] == len(survivors(expected))
    # the new active segment is empty and starts at the log end
    logs = sorted(p.name for p in directory.glob("*.log"))
    assert logs == ["00000000000000000000.log", f"{expected['next_offset']:020d}.log"]
    assert (directory / logs[1]).stat().st_size == 0
    assert verify_path(directory).ok


def test_without_roll_active_nothing_is_cleanable_and_the_note_says_why(
    kafka_fixtures: Path, tmp_path: Path
) -> None:
    directory, expected = fixture_copy(kafka_fixtures, tmp_path)
    log_before = (directory / "00000000000000000000.log").read_bytes()
    result = run("compact", directory, *ZERO, "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    records = expected["data_records"]
    assert summary["records_in"] == summary["records_out"] == records
    assert summary["passes"] == 0
    assert summary["rolled_active"] is False
    assert summary["bound"] == Bound.ACTIVE_SEGMENT.value
    assert summary["note"] == (
        f"nothing cleanable: all {records} records are in the active segment, which is never "
        "cleaned; --roll-active rolls it"
    )
    assert (directory / "00000000000000000000.log").read_bytes() == log_before
    text = run("compact", directory, *ZERO)
    assert text.exit_code == 0
    flat = " ".join(text.stdout.split())  # the console may wrap the note
    assert f"note: {NAME}: nothing cleanable: all {records} records are in the active" in flat
    assert "--roll-active rolls it" in flat


def test_dry_run_rolls_only_the_copy(kafka_fixtures: Path, tmp_path: Path) -> None:
    directory, expected = fixture_copy(kafka_fixtures, tmp_path)
    before = files(directory)
    result = run("compact", directory, *ZERO, "--roll-active", "--dry-run", "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["dry_run"]
    assert summary["rolled_active"]
    assert summary["records_out"] == expected["expected_survivors_drop_tombstones"]
    assert files(directory) == before
    assert not (tmp_path / "logs" / "cleaner-offset-checkpoint").exists()


def test_plan_roll_active_shows_the_added_range(kafka_fixtures: Path, tmp_path: Path) -> None:
    directory, expected = fixture_copy(kafka_fixtures, tmp_path)
    before = files(directory)
    end = expected["next_offset"]
    result = run("plan", directory, "--now", str(NOW), "--roll-active", "--format", "json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["cleanable_range"] == [0, 0]
    rolled = row["roll_active"]
    assert rolled["cleanable_range"] == rolled["added_range"] == [0, end]
    assert rolled["cleanable_bytes"] == expected["total_bytes"]
    assert rolled["first_uncleanable_offset"] == end
    assert rolled["is_cleanable"] is True
    text = run("plan", directory, "--now", str(NOW), "--roll-active")
    assert text.exit_code == 0
    assert f"[0, {end})" in text.stdout
    assert "+rolled" in text.stdout
    plain = run("plan", directory, "--now", str(NOW), "--format", "json")
    assert "roll_active" not in json.loads(plain.stdout)
    assert files(directory) == before  # read-only: not even indexes were written


def open_transaction_log(tmp_path: Path) -> Path:
    """One segment: 10 plain records, then a transaction left open at offset 10."""
    log = PartitionLog.create(tmp_path / "logs" / "t-0", clock=lambda: 0)
    log.append([Record(0, 1000, b"k%d" % (i % 3), b"v") for i in range(10)])
    txn: dict[str, Any] = {
        "producer_id": 3,
        "producer_epoch": 0,
        "base_sequence": 0,
        "transactional": True,
    }
    log.append([Record(0, 1000, b"k0", b"w")], **txn)
    log.close()
    return log.directory


def test_roll_active_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    """Rolling adds nothing when an open transaction starts inside the segment: the bound
    rounds down to that segment's base, as Kafka's does; compact says so."""
    directory = open_transaction_log(tmp_path)
    now = ("--now", "5000")
    row = json.loads(run("plan", directory, *now, "--roll-active", "--format", "json").stdout)
    assert row["last_stable_offset"] == 10
    assert row["roll_active"]["added_range"] == [0, 0]
    result = run("compact", directory, *now, "--roll-active", "--format", "json")
    summary = json.loads(result.stdout)
    assert summary["rolled_active"]
    assert summary["records_out"] == summary["records_in"] == 11
    assert summary["bound"] == Bound.LAST_STABLE_OFFSET.value
    assert summary["note"].startswith("nothing cleanable: the last stable offset is 10")


@pytest.mark.parametrize("lag", [0, 10**9])
def test_as_rolled_plan_obeys_min_compaction_lag(tmp_path: Path, lag: int) -> None:
    directory = open_transaction_log(tmp_path)
    log = PartitionLog(directory)
    log.append_marker(commit=True, producer_id=3, producer_epoch=0, timestamp=2000)
    meta = LogMeta.from_log(log, None)
    log.close()
    rolled = as_rolled(meta)
    assert [s.base_offset for s in rolled.segments] == [0, 12]
    assert as_rolled(rolled) is rolled  # an empty active segment is not rolled again
    config = TopicCleanerConfig(compact=True, min_compaction_lag_ms=lag)
    assert plan(meta, config, 10_000).first_uncleanable_offset == 0
    assert plan(rolled, config, 10_000).first_uncleanable_offset == (12 if lag == 0 else 0)
