"""``cleanerd plan``: each partition's cleaning plan, and that making it writes nothing.

The plan is read without opening the log (opening may recover a swap or rebuild indexes), so its
metadata is checked against ``LogMeta.from_log`` on the same files.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cleanerd.cli._plan import read_log_meta
from cleanerd.compaction import LogMeta, cleaner_checkpoint
from cleanerd.storage import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    PartitionLog,
    TopicPartition,
    write_offset_checkpoint,
)
from cleanerd.workload import WorkloadSpec, generate
from tests.support.cli import ok, run
from tests.support.logs import tree_hash

NOW = 1_800_000_000_000
SPEC: dict[str, Any] = {"records": 2000, "keys": 100, "records_per_batch": 20}
SPEC["segment_bytes"] = 30_000
FIELDS: tuple[str, ...] = (
    "partition",
    "dirty_ratio",
    "must_clean_ratio",
    "compaction_delay_ms",
    "clean_bytes",
)
FIELDS += ("cleanable_bytes", "cleanable_range", "is_cleanable", "first_dirty_offset")
FIELDS += ("first_uncleanable_offset", "log_start_offset", "log_end_offset", "checkpoint")


def plans(*args: str | Path | int) -> list[dict[str, Any]]:
    result = ok("plan", *args, "--format", "json")
    return [json.loads(line) for line in result.stdout.splitlines()]


def make_logs(tmp_path: Path, **spec: Any) -> Path:
    logdir = tmp_path / "logs"
    generate(logdir, WorkloadSpec(**{**SPEC, **spec}))
    return logdir


def opened_meta(directory: Path) -> LogMeta:
    """The metadata of the opened log, but the active segment's largest timestamp as ``plan``
    reads it: the opened log takes its file mtime (its time index is empty until it rolls),
    ``plan`` its newest batch; planning never looks at it (the active segment is uncleanable)."""
    log = PartitionLog(directory)
    try:
        meta = LogMeta.from_log(log, cleaner_checkpoint(log))
    finally:
        log.close()
    tp = meta.topic_partition
    active = read_log_meta(directory, tp)[0].active_segment
    stamp = dataclasses.replace(meta.active_segment, largest_timestamp=active.largest_timestamp)
    return dataclasses.replace(meta, segments=(*meta.segments[:-1], stamp))


def test_fields_of_a_fresh_log(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path, partitions=2)
    rows = plans(logdir, "--now", NOW)
    assert [r["partition"] for r in rows] == ["demo-0", "demo-1"]
    for row in rows:
        assert set(FIELDS) <= set(row)
        meta = opened_meta(logdir / row["partition"])
        active = meta.active_segment.base_offset
        assert row["cleanable_range"] == [0, active]
        assert row["first_dirty_offset"] == 0
        assert row["first_uncleanable_offset"] == active
        assert row["checkpoint"] is None
        assert row["dirty_ratio"] == 1.0
        assert row["clean_bytes"] == 0
        assert row["cleanable_bytes"] == sum(s.size_bytes for s in meta.segments[:-1])
        assert row["is_cleanable"] is True
        assert row["must_clean_ratio"] == 0.0  # max.compaction.lag.ms: Kafka's default, never
        assert row["now_ms"] == NOW
        assert row["notes"] == []


def test_after_compact_nothing_is_cleanable(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    ok("compact", logdir, "--now", NOW)
    (row,) = plans(logdir, "--now", NOW)
    assert row["checkpoint"] == row["first_dirty_offset"] == row["first_uncleanable_offset"]
    assert row["cleanable_bytes"] == 0
    assert row["dirty_ratio"] == 0.0
    assert row["is_cleanable"] is False
    assert row["clean_bytes"] > 0


def test_must_clean_ratio_delay_and_thresholds(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    (row,) = plans(logdir, "--now", NOW, "--max-compaction-lag-ms", "1000")
    assert row["must_clean_ratio"] == 1.0
    assert row["compaction_delay_ms"] > 0
    assert row["need_compaction_now"] is True
    (row,) = plans(logdir, "--now", NOW, "--min-cleanable-ratio", "1")
    assert row["is_cleanable"] is False  # Kafka needs the ratio strictly above the minimum
    assert row["min_cleanable_dirty_ratio"] == 1.0
    # every segment younger than the minimum lag: nothing cleanable at that clock
    (row,) = plans(logdir, "--now", "1700000000000", "--min-compaction-lag-ms", "86400000")
    assert row["cleanable_range"] == [0, 0]
    assert row["cleanable_bytes"] == 0


@pytest.mark.parametrize("extra", [{}, {"transactional_producers": 2, "leave_open": True}])
def test_metadata_equals_the_opened_log(tmp_path: Path, extra: dict[str, Any]) -> None:
    logdir = make_logs(tmp_path, **extra)
    tp = TopicPartition("demo", 0)
    end = opened_meta(logdir / "demo-0").log_end_offset
    write_offset_checkpoint(logdir / LOG_START_OFFSET_CHECKPOINT, {tp: 40})
    write_offset_checkpoint(logdir / REPLICATION_OFFSET_CHECKPOINT, {tp: end - 30})
    meta, notes = read_log_meta(logdir / "demo-0", tp)
    assert notes == []
    assert meta == opened_meta(logdir / "demo-0")
    assert meta.log_start_offset == 40
    assert meta.last_stable_offset <= end - 30
    ok("compact", logdir, "--now", NOW)
    assert read_log_meta(logdir / "demo-0", tp)[0] == opened_meta(logdir / "demo-0")


def test_read_only_on_kafka_fixtures_and_swap_leftovers(
    kafka_fixtures: Path, tmp_path: Path
) -> None:
    """The fixtures have no index files and one has a leftover: opening would write both."""
    logdir = tmp_path / "logs"
    shutil.copytree(kafka_fixtures / "multiseg-snappy-0", logdir / "multiseg-snappy-0")
    shutil.copytree(kafka_fixtures / "small-gzip-hdr-tomb-0", logdir / "small-gzip-hdr-tomb-0")
    leftover = logdir / "small-gzip-hdr-tomb-0" / "00000000000000000000.log.cleaned"
    leftover.write_bytes(b"")
    before = tree_hash(logdir)
    rows = plans(logdir, "--now", NOW)
    text = ok("plan", logdir, "--now", NOW).stdout
    assert tree_hash(logdir) == before
    multi, small = rows
    assert multi["cleanable_bytes"] > 0
    assert small["notes"] == [f"{leftover.name}: left by an interrupted swap"]
    assert "left by an interrupted swap" in text
    leftover.unlink()
    expected = opened_meta(logdir / "small-gzip-hdr-tomb-0")
    tp = TopicPartition("small-gzip-hdr-tomb", 0)
    assert read_log_meta(logdir / "small-gzip-hdr-tomb-0", tp)[0] == expected


def test_text_table(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    out = ok("plan", logdir, "--now", NOW).stdout
    for word in ("cleanerd plan", "dirty", "must-clean", "delay", "range", "cleanable", "demo-0"):
        assert word in out
    assert "yes" in out


def test_config_file_and_named_partitions(tmp_path: Path) -> None:
    """The daemon's config format: broker defaults of topic settings, then topic tables."""
    logdir = make_logs(tmp_path)
    generate(logdir, WorkloadSpec(**{**SPEC, "topic": "events"}))
    config = tmp_path / "cleanerd.toml"
    config.write_text(
        'log.dirs = ["./elsewhere"]\nlog.cleaner.threads = 2\n'
        'log.cleanup.policy = "compact"\nlog.cleaner.min.cleanable.ratio = 0.3\n'
        "log.cleaner.max.compaction.lag.ms = 1000\n\n"
        '[topics."*"]\nmin.compaction.lag.ms = 0\n\n'
        '[topics."ev*"]\ncleanup.policy = "delete"\n\n'
        '[topics."de*"]\nmin.cleanable.dirty.ratio = 1\n'
    )
    result = ok("plan", logdir, "--now", NOW, "--config", config, "--format", "json")
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["partition"] == "demo-0"
    assert row["min_cleanable_dirty_ratio"] == 1.0  # [topics."de*"] over the broker default
    assert row["must_clean_ratio"] == 1.0  # log.cleaner.max.compaction.lag.ms
    assert "skipped events-0: cleanup.policy=delete" in result.stderr
    (named,) = plans(logdir / "events-0", "--now", NOW, "--config", config)
    assert named["partition"] == "events-0"
    assert named["min_cleanable_dirty_ratio"] == 0.3  # log.cleaner.min.cleanable.ratio
    # without a config file every partition is planned with Kafka's defaults
    rows = plans(logdir, "--now", NOW)
    assert [(r["partition"], r["min_cleanable_dirty_ratio"]) for r in rows] == [
        ("demo-0", 0.5),
        ("events-0", 0.5),
    ]


def test_the_example_config_works(tmp_path: Path) -> None:
    """``config/cleanerd.toml``, as given to ``cleanerd run``, is accepted as it is and, naming
    no topic, plans none (tests/config/test_shipped_selection.py tries its examples)."""
    example = Path(__file__).resolve().parents[2] / "config" / "cleanerd.toml"
    logdir = make_logs(tmp_path)
    result = ok("plan", logdir, "--now", NOW, "--config", example, "--format", "json")
    assert result.stdout == ""
    assert "skipped demo-0: cleanup.policy=delete" in result.stderr


def test_command_line_beats_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logdir = make_logs(tmp_path)
    config = tmp_path / "cleanerd.toml"
    config.write_text(
        'log.cleanup.policy = "compact"\n[topics."demo"]\nmin.cleanable.dirty.ratio = 1\n'
    )
    args = ("--now", NOW, "--config", config)
    (row,) = plans(logdir, *args, "--min-cleanable-ratio", "0.1")
    assert row["min_cleanable_dirty_ratio"] == 0.1
    (row,) = plans(logdir, *args, "--set", 'topics."demo".min.cleanable.dirty.ratio=0.7')
    assert row["min_cleanable_dirty_ratio"] == 0.7
    # CLEANERD_* sets the broker default: the topic's table still wins over it
    monkeypatch.setenv("CLEANERD_LOG_CLEANER_MIN_CLEANABLE_RATIO", "0.4")
    (row,) = plans(logdir, *args)
    assert row["min_cleanable_dirty_ratio"] == 1.0
    (row,) = plans(logdir, "--now", NOW)
    assert row["min_cleanable_dirty_ratio"] == 0.4
    # an option that conflicts with the file's settings: a usage error naming the partition
    config.write_text('[topics."demo"]\nmax.compaction.lag.ms = 1000\n')
    result = run("plan", logdir, "--config", config, "--min-compaction-lag-ms", "5000")
    assert result.exit_code == 2
    assert "demo-0" in result.stderr
    assert "max.compaction.lag.ms" in result.stderr


def test_bad_config_file_names_setting_and_source(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    config = tmp_path / "bad.toml"
    config.write_text('[topics."demo"]\nmin.cleanable.dirty.ratio = 3\n')
    result = run("plan", logdir, "--config", config)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f'error: topics."demo".min.cleanable.dirty.ratio = 3 (file {config}): '
        "must be between 0 and 1"
    ]
    config.write_text("log.cleaner.threads = -1\nlog.cleaner.min.cleanable.ratio = 'x'\n")
    result = run("plan", logdir, "--config", config)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    assert all(line.startswith("error: ") and f"(file {config})" in line for line in lines)
    assert "Traceback" not in result.output


def test_unreadable_checkpoint_exits_1(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path, partitions=2)
    (logdir / "cleaner-offset-checkpoint").write_text("not a checkpoint\n")
    result = run("plan", logdir, "--now", NOW)
    assert result.exit_code == 1
    assert "cleaner-offset-checkpoint" in result.stderr


def test_usage_errors(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    assert run("plan", tmp_path / "missing").exit_code == 2
    assert run("plan", logdir, "--min-cleanable-ratio", "2").exit_code == 2
    assert run("plan", logdir, "--partition", "7").exit_code == 2


@pytest.mark.slow
def test_real_process(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    before = tree_hash(logdir)
    cmd = [sys.executable, "-m", "cleanerd", "plan", str(logdir), "--now", str(NOW)]
    done = subprocess.run([*cmd, "--format", "json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partition"] == "demo-0"
    assert tree_hash(logdir) == before


def _table_rows(text: str) -> dict[str, list[str]]:
    """partition -> its cells, from the text table (cells are split at runs of blanks)."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and cells[0].startswith("demo-"):
            rows[cells[0]] = cells
    return rows


def test_table_now_is_need_compaction_now_and_pick_is_is_cleanable(tmp_path: Path) -> None:
    """A dirty log within its lag: the cleaner picks it (ratio) but it is not overdue. The
    ``now`` column used to show ``is_cleanable``, saying yes where the JSON said false."""
    logdir = make_logs(tmp_path)
    (row,) = plans(logdir, "--now", NOW)
    assert row["need_compaction_now"] is False
    assert row["is_cleanable"] is True
    text = ok("plan", logdir, "--now", NOW).stdout
    header = next(line.split() for line in text.splitlines() if "must-clean" in line)
    cells = _table_rows(text)["demo-0"]
    # the range cell "[0, 123)" holds a blank: count columns from the end of the row
    assert header[-2:] == ["now", "pick"]
    assert cells[-2:] == ["no", "yes"]
    (overdue,) = plans(logdir, "--now", NOW, "--max-compaction-lag-ms", "1000")
    assert overdue["need_compaction_now"] is True
    text = ok("plan", logdir, "--now", NOW, "--max-compaction-lag-ms", "1000").stdout
    assert _table_rows(text)["demo-0"][-2:] == ["yes", "yes"]


def test_table_sizes_are_iec_and_json_sizes_are_bytes(tmp_path: Path) -> None:
    logdir = make_logs(tmp_path)
    (row,) = plans(logdir, "--now", NOW)
    assert isinstance(row["cleanable_bytes"], int)
    text = ok("plan", logdir, "--now", NOW).stdout
    cells = _table_rows(text)["demo-0"]
    kib = f"{row['cleanable_bytes'] / 1024:.1f}"
    assert [kib, "KiB"] == cells[-4:-2]
    assert " kB" not in text
    assert " MB" not in text
