"""``cleanerd compact`` and the one-shot driver, as a user meets them.

Logs come from the workload generator (``cleanerd gen``), whose ``--expected`` file and
``expected_survivors`` say which record of each key a full clean keeps. The generator leaves its
last segment active, and the cleaner never touches the active segment, so each log is rolled
first: then everything is cleanable and the survivors must match exactly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from cleanerd.cli._compact import _print_table
from cleanerd.compaction import (
    CompactionProgress,
    _cleaner as cleaner_mod,
    cleaner_checkpoint,
    compact_partition,
)
from cleanerd.format import Record, kernels as k
from cleanerd.inspect import verify_path
from cleanerd.storage import PartitionLog
from cleanerd.topics import StrategyConfig, TopicCleanerConfig
from cleanerd.workload import WorkloadSpec, expected_survivors, generate
from tests.support.cli import ok, run
from tests.support.logs import tree_hash

NOW = 1_800_000_000_000
GEN: dict[str, Any] = {"records": 3000, "keys": 200, "records_per_batch": 20}
GEN["tombstone_ratio"] = 0.15
MIXED = {**GEN, "transactional_producers": 2, "idempotent_producers": 1, "segment_bytes": 30_000}


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def compact_json(*args: str | Path | int) -> list[dict[str, Any]]:
    """``compact ... --format json`` (which must succeed): one summary per partition."""
    return json_lines(ok("compact", *map(str, args), "--format", "json"))


ZERO = ("--now", NOW, "--delete-retention-ms", "0")  # every tombstone goes


def make_log(tmp_path: Path, name: str = "logs", **spec: Any) -> Path:
    """A generated log dir whose partitions are rolled (everything cleanable)."""
    logdir = tmp_path / name
    generate(logdir, WorkloadSpec(**{**MIXED, **spec}))
    for directory in sorted(logdir.glob("demo-*")):
        log = PartitionLog(directory)
        log.roll()
        log.close()
    return logdir


def survivors_of(
    logdir: Path, strategy: str = "offset", header: str | None = None
) -> dict[bytes, int]:
    log = PartitionLog(logdir / "demo-0")
    try:
        want = expected_survivors(log.read(), strategy=strategy, version_header=header)
    finally:
        log.close()
    return {key: s.offset for key, s in want.items() if not s.tombstone}


def data_records(directory: Path) -> dict[bytes, int]:
    """Key -> offset of every data record left; a key twice would be a compaction bug."""
    log = PartitionLog(directory)
    out: dict[bytes, int] = {}
    try:
        for batch in log.read():
            if batch.header.is_control:
                continue
            for r in batch.records():
                assert r.key is not None
                assert r.key not in out
                assert r.value is not None  # delete.retention.ms = 0: no tombstone is left
                out[r.key] = r.offset
    finally:
        log.close()
    return out


# --- the result --------------------------------------------------------------------------------
@pytest.mark.slow
def test_offset_strategy_keeps_exactly_the_expected_survivors(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    expected_file = tmp_path / "expected.json"
    args = ["--records", "3000", "--keys", "200", "--records-per-batch", "20"]
    args += ["--tombstone-ratio", "0.15", "--transactional-producers", "2", "--segment-bytes"]
    ok("gen", logdir, *args, "30000", "--expected", expected_file)
    log = PartitionLog(logdir / "demo-0")
    log.roll()
    log.close()
    (summary,) = compact_json(logdir, *ZERO)
    keys = json.loads(expected_file.read_text())["partitions"]["0"]["keys"]
    want = {key.encode(): v["offset"] for key, v in keys.items() if not v["tombstone"]}
    assert data_records(logdir / "demo-0") == want
    assert summary["tombstones_removed"] > 0
    # the winning tombstones expire (delete.retention.ms 0), the others were superseded
    assert summary["tombstones_expired"] == sum(v["tombstone"] for v in keys.values())
    assert summary["tombstones_superseded"] > 0
    assert (
        summary["tombstones_expired"] + summary["tombstones_superseded"]
        == summary["tombstones_removed"]
    )
    assert summary["aborted_records_removed"] > 0
    assert summary["records_out"] < summary["records_in"]
    end = summary["last_offset"] + 1  # the rolled log: everything was cleanable
    assert summary["checkpoint"] == summary["first_uncleanable_offset"] == end
    assert verify_path(logdir).ok
    assert ok("verify", logdir).exit_code == 0


@pytest.mark.slow
def test_a_tiny_map_takes_several_passes_to_the_same_result(tmp_path: Path) -> None:
    big = make_log(tmp_path, "big")
    small = make_log(tmp_path, "small")
    (a,) = compact_json(big, *ZERO)
    (b,) = compact_json(small, *ZERO, "--dedupe-buffer-bytes", "1000")
    assert b["passes"] - b["sweeps"] > 3 > a["passes"] - a["sweeps"]
    assert data_records(small / "demo-0") == data_records(big / "demo-0") == survivors_of(small)
    removed = ("records_out", "tombstones_removed", "markers_removed", "aborted_records_removed")
    assert [a[f] for f in removed] == [b[f] for f in removed]
    assert verify_path(small).ok


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "extra", "header"),
    [("timestamp", {"timestamps": "shuffled"}, None), ("header", {"version_header": "v"}, "v")],
)
@pytest.mark.parametrize("map_bytes", ["1000", str(128 << 20)])
def test_timestamp_and_header_strategies(
    tmp_path: Path, strategy: str, extra: dict[str, Any], header: str | None, map_bytes: str
) -> None:
    """With a tiny map too: a winning tombstone at a low offset must not be removed before the
    range holding the newer-offset losers is cleaned, or a loser would come back."""
    logdir = make_log(tmp_path, **extra)
    want = survivors_of(logdir, strategy, header)
    args: list[str | int] = ["--strategy", strategy, "--delete-retention-ms", "0", "--now", NOW]
    args += ["--dedupe-buffer-bytes", map_bytes, "--format", "json"]
    if header:
        args += ["--strategy-header", header]
    (summary,) = json_lines(ok("compact", logdir / "demo-0", *args))
    assert summary["strategy"] == strategy
    assert data_records(logdir / "demo-0") == want
    assert verify_path(logdir).ok


@pytest.mark.slow
@pytest.mark.parametrize("name", ["small-gzip-hdr-tomb-0", "multiseg-snappy-0"])
def test_kafka_fixtures_compact_to_their_expected_survivors(
    kafka_fixtures: Path, tmp_path: Path, name: str
) -> None:
    expected = json.loads((kafka_fixtures / f"{name}.expected.json").read_text())
    directory = tmp_path / "logs" / name
    shutil.copytree(kafka_fixtures / name, directory)
    log = PartitionLog(directory)
    log.roll()
    log.close()
    args: list[str | int] = ["--now", NOW, "--delete-retention-ms", "0"]
    args += ["--dedupe-buffer-bytes", "2000"]
    (summary,) = compact_json(directory, *args)
    want = {k.encode(): v["offset"] for k, v in expected["keys"].items() if not v["tombstone"]}
    assert len(want) == expected["expected_survivors_drop_tombstones"]
    assert data_records(directory) == want
    assert summary["checkpoint"] == expected["next_offset"]
    assert verify_path(directory).ok


def test_json_fields(tmp_path: Path) -> None:
    logdir = make_log(tmp_path, partitions=2)
    lines = compact_json(logdir, "--now", NOW)
    assert [line["partition"] for line in lines] == ["demo-0", "demo-1"]
    for line in lines:
        for field in ("records_in", "records_out", "bytes_in", "bytes_out", "passes", "seconds"):
            assert isinstance(line[field], int | float)
        for field in ("bytes_per_s", "tombstones_removed", "markers_removed", "first_offset"):
            assert field in line
        # numba's first-call compilation is reported apart from the cleaning time
        assert isinstance(line["compile_seconds"], float)
        assert isinstance(line["kernels_compiled"], int)
        # bytes and seconds in JSON: no MB figure
        assert not [name for name in line if "mb" in name.split("_")]
        assert line["dry_run"] is False
        assert line["strategy"] == "offset"
        assert line["records_in"] - line["records_out"] == line["records_removed"] > 0
        assert line["bytes_out"] < line["bytes_in"]
        assert line["directory"] == str(logdir / line["partition"])
    # Kafka's default delete.retention.ms (1 day): the newest tombstones are kept
    log = PartitionLog(logdir / "demo-0")
    tombstones = [r for b in log.read() if not b.header.is_control for r in b.records()]
    log.close()
    assert any(r.value is None for r in tombstones)


def test_text_output(tmp_path: Path) -> None:
    logdir = make_log(tmp_path)
    out = ok("compact", logdir, "--now", NOW).stdout
    assert "cleanerd compact" in out
    assert "demo-0" in out
    assert "tomb" in out
    assert "1 partitions" in out
    # sizes for people in IEC units only
    assert re.search(r"\d (KiB|MiB)", out)
    assert not re.search(r"\d ?(kB|MB|GB)\b", out)


@pytest.mark.slow
def test_dry_run_writes_nothing_and_reports_the_same(tmp_path: Path) -> None:
    logdir = make_log(tmp_path, partitions=2)
    before = tree_hash(logdir)
    args: list[str | int] = ["--now", NOW, "--delete-retention-ms", "0", "--format", "json"]
    dry = json_lines(ok("compact", logdir, *args, "--dry-run"))
    assert tree_hash(logdir) == before
    assert all(line["dry_run"] for line in dry)
    text = ok("compact", logdir, "--now", NOW, "--dry-run").stdout
    assert "nothing written" in text
    assert tree_hash(logdir) == before
    real = json_lines(ok("compact", logdir, *args))
    assert tree_hash(logdir) != before
    counts: tuple[str, ...] = ("records_in", "records_out", "bytes_in", "bytes_out")
    counts += ("tombstones_removed",)
    counts += ("markers_removed", "aborted_records_removed", "passes", "checkpoint")
    for d, r in zip(dry, real, strict=True):
        assert {c: d[c] for c in counts} == {c: r[c] for c in counts}
        assert d["directory"] == r["directory"]


def test_a_locked_log_dir_is_refused(tmp_path: Path) -> None:
    logdir = make_log(tmp_path)
    before = tree_hash(logdir / "demo-0")
    hold = "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.lockf(f, fcntl.LOCK_EX)"
    hold += "; print('held', flush=True); sys.stdin.read()"
    cmd = [sys.executable, "-c", hold, str(logdir / ".lock")]
    holder = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        result = run("compact", logdir, "--now", NOW, "--delete-retention-ms", "0")
        assert result.exit_code == 1
        assert f"locked by process {holder.pid}" in result.stderr
        assert tree_hash(logdir / "demo-0") == before
        # a dry run takes no lock: it only reads
        assert run("compact", logdir, "--now", NOW, "--dry-run").exit_code == 0
    finally:
        holder.kill()
        holder.wait()
    ok("compact", logdir, "--now", NOW)


def test_a_corrupt_segment_leaves_its_partition_as_it_was(tmp_path: Path) -> None:
    logdir = make_log(tmp_path, partitions=2)
    seg = sorted((logdir / "demo-0").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    log = PartitionLog(logdir / "demo-0")
    batches = log.segments[0].scan().batches
    log.close()
    position = int(batches[5, k.B_POS])
    data[position + 70] ^= 0xFF  # inside the records: the batch CRC no longer matches
    seg.write_bytes(bytes(data))
    before = tree_hash(logdir / "demo-0")
    result = run("compact", logdir, "--now", NOW, "--delete-retention-ms", "0", "--format", "json")
    assert result.exit_code == 1
    assert str(seg) in result.stderr
    assert f"at byte {position}" in result.stderr
    assert "partition left as it was" in result.stderr
    assert tree_hash(logdir / "demo-0") == before
    assert list((logdir / "demo-0").glob("*.cleaned")) == []
    failed, done = json_lines(result)
    assert failed["partition"] == "demo-0"
    assert "CRC" in failed["error"].upper()
    assert done["partition"] == "demo-1"
    assert done["records_out"] < done["records_in"]


def test_a_closed_segment_cut_inside_a_batch_is_refused_with_nothing_cleanable(
    tmp_path: Path,
) -> None:
    """A transaction open from offset 0 whose ABORT marker is cut off, in a segment below the
    active one: the LSO is 0, so nothing is cleanable, and the cut is still damage (a closed
    segment has no append in flight). It is refused, not a quiet exit 0 (the fuzz oracle)."""
    part = tmp_path / "t-0"
    log = PartitionLog.create(part)
    for i, value in enumerate((b"v", b"w")):
        if i:
            log.roll()
        log.append(
            [Record(0, 1_000 + i, b"k", value)],
            producer_id=9,
            producer_epoch=0,
            base_sequence=i,
            transactional=True,
        )
    log.append_marker(
        commit=False, producer_id=9, producer_epoch=0, timestamp=1_002, coordinator_epoch=0
    )
    closed = log.active_segment.log_path
    marker_at = int(log.active_segment.scan().batches[-1, k.B_POS])
    log.roll()
    log.close()
    closed.write_bytes(closed.read_bytes()[: marker_at + 20])
    before = tree_hash(part)
    result = run("compact", part, "--now", NOW, "--delete-retention-ms", "0")
    assert result.exit_code == 1, result.output
    assert f"{closed} at byte {marker_at}" in result.stderr
    assert "partition left as it was" in result.stderr
    assert tree_hash(part) == before


# --- choosing partitions and settings ---------------------------------------------------------
def test_config_file_selects_compacted_topics(tmp_path: Path) -> None:
    """The daemon's config format (``cleanerd run --config``): daemon settings, broker defaults
    of topic settings, then ``[topics."glob"]`` tables."""
    logdir = make_log(tmp_path)
    generate(logdir, WorkloadSpec(**{**GEN, "topic": "events"}))
    config = tmp_path / "cleanerd.toml"
    config.write_text(
        "log.cleaner.threads = 2\n"
        'cleanerd.http.listen = "off"\n'
        'log.cleanup.policy = "delete"\n'
        "log.cleaner.delete.retention.ms = 0\n\n"
        '[topics."de*"]\n"cleanup.policy" = "compact,delete"\n'
        "segment.bytes = 100000\nflush.ms = 5\n"
    )
    before = tree_hash(logdir / "events-0")
    result = ok("compact", logdir, "--now", NOW, "--config", config, "--format", "json")
    (line,) = json_lines(result)
    assert line["partition"] == "demo-0"
    assert line["tombstones_removed"] > 0  # log.cleaner.delete.retention.ms = 0
    assert "skipped events-0: cleanup.policy=delete" in result.stderr
    assert 'topics."de*".flush.ms' in result.stderr
    assert "not used by the cleaner" in result.stderr
    assert tree_hash(logdir / "events-0") == before
    # named partition dirs are compacted whatever their policy
    (named,) = compact_json(logdir / "events-0", "--now", NOW, "--config", config)
    assert named["partition"] == "events-0"
    assert named["records_out"] < named["records_in"]


@pytest.mark.slow
def test_command_line_options_beat_the_config(tmp_path: Path) -> None:
    config = tmp_path / "cleanerd.toml"
    config.write_text('log.cleanup.policy = "compact"\n[topics."demo"]\ndelete.retention.ms = 0\n')
    (from_file,) = compact_json(make_log(tmp_path, "a"), "--now", NOW, "--config", config)
    (default,) = compact_json(make_log(tmp_path, "b"), "--now", NOW)
    assert from_file["tombstones_removed"] > default["tombstones_removed"]
    assert from_file["records_out"] < default["records_out"]  # the latest tombstones went too
    # --delete-retention-ms beats the topic table: the latest tombstones stay
    long = "1000000000000"
    args = ("--now", NOW, "--config", config, "--delete-retention-ms", long)
    (line,) = compact_json(make_log(tmp_path, "c"), *args)
    assert line["records_out"] == default["records_out"]
    # --set beats the file too, and a PARTITION_DIR's topic still gets its table
    logdir = make_log(tmp_path, "d")
    args = ("--now", NOW, "--config", config, "--set", f'topics."demo".delete.retention.ms={long}')
    (line,) = compact_json(logdir / "demo-0", *args)
    assert line["records_out"] == default["records_out"]


@pytest.mark.slow
def test_environment_is_honoured_without_a_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (default,) = compact_json(make_log(tmp_path, "a"), "--now", NOW)
    monkeypatch.setenv("CLEANERD_LOG_CLEANER_DELETE_RETENTION_MS", "0")
    (line,) = compact_json(make_log(tmp_path, "b"), "--now", NOW)  # no file: no policy filter
    assert line["records_out"] < default["records_out"]  # the latest tombstones went too
    monkeypatch.setenv("CLEANERD_LOG_CLEANER_DELETE_RETENTION_MS", "-1")
    result = run("compact", make_log(tmp_path, "c"), "--now", NOW)
    assert result.exit_code == 2
    assert "(env CLEANERD_LOG_CLEANER_DELETE_RETENTION_MS)" in result.stderr


@pytest.mark.slow
def test_topic_and_partition_filters(tmp_path: Path) -> None:
    logdir = make_log(tmp_path, partitions=3)
    lines = compact_json(logdir, "--partition", "1", "--now", NOW)
    assert [line["partition"] for line in lines] == ["demo-1"]
    lines = compact_json(logdir, "--topic", "d?mo", "--now", NOW)
    assert len(lines) == 3
    result = run("compact", logdir, "--topic", "nope", "--now", NOW)
    assert result.exit_code == 2
    assert "no partition matches" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "header"], "--strategy-header"),
        (["--dedupe-buffer-bytes", "30"], "--dedupe-buffer-bytes"),
        (["--delete-retention-ms", "-1"], "--delete-retention-ms"),
        (["--strategy", "newest"], "--strategy"),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    logdir = make_log(tmp_path)
    before = tree_hash(logdir)
    result = run("compact", logdir, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert tree_hash(logdir) == before


def test_bad_config_file_is_a_usage_error(tmp_path: Path) -> None:
    logdir = make_log(tmp_path)
    before = tree_hash(logdir)
    config = tmp_path / "bad.toml"
    config.write_text(
        "log.cleaner.min.cleanable.ratio = 2\n"
        '[topics."demo"]\n"delete.retention.ms" = -5\nsegment.byte = 1\n'
    )
    result = run("compact", logdir, "--config", config)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert f"error: log.cleaner.min.cleanable.ratio = 2 (file {config}): " in lines[0]
    assert any(
        line.startswith(f'error: topics."demo".delete.retention.ms = -5 (file {config}): ')
        and "at least 0" in line
        for line in lines
    ), lines
    assert any("segment.byte" in line and "did you mean segment.bytes" in line for line in lines)
    assert "Traceback" not in result.output
    config.write_text("not toml [")
    result = run("compact", logdir, "--config", config)
    assert result.exit_code == 2
    assert f"(file {config})" in result.stderr
    # tables valid alone but conflicting for one topic: named with both tables
    config.write_text(
        '[topics."d*"]\nmin.compaction.lag.ms = 10\n[topics."*o"]\nmax.compaction.lag.ms = 5\n'
    )
    result = run("compact", logdir, "--config", config)
    assert result.exit_code == 2
    assert '[topics."d*"] + [topics."*o"]' in result.stderr
    assert tree_hash(logdir) == before


def test_min_compaction_lag_leaves_young_segments(tmp_path: Path) -> None:
    logdir = make_log(tmp_path)
    before = tree_hash(logdir / "demo-0")
    # every record is younger than a day at the generator's clock: nothing may be cleaned
    now = 1_700_000_100_000
    (line,) = compact_json(logdir, "--now", now, "--min-compaction-lag-ms", "86400000")
    assert line["passes"] == 0
    assert line["records_out"] == line["records_in"]
    assert tree_hash(logdir / "demo-0") == before


# --- the driver --------------------------------------------------------------------------------
@pytest.mark.slow
def test_compact_partition_api_progress_and_dry_run(tmp_path: Path) -> None:
    logdir = make_log(tmp_path)
    seen: list[CompactionProgress] = []
    config = TopicCleanerConfig(delete_retention_ms=0)  # cleanup.policy=delete: compacted anyway
    log = PartitionLog(logdir / "demo-0")
    try:
        before = tree_hash(logdir / "demo-0")
        dry = compact_partition(log, config, StrategyConfig(), NOW, map_bytes=2000, dry_run=True)
        assert tree_hash(logdir / "demo-0") == before
        assert dry.dry_run
        offset = StrategyConfig()
        summary = compact_partition(log, config, offset, NOW, map_bytes=2000, progress=seen.append)
        assert cleaner_checkpoint(log) == summary.checkpoint == log.active_segment.base_offset
    finally:
        log.close()
    assert summary.records_out == dry.records_out
    assert summary.passes == dry.passes > 2
    phases = [p.phase for p in seen]
    assert phases[0] == "clean"
    assert phases[-1] == "sweep"
    assert phases == sorted(phases)  # all cleaning passes, then the sweeps
    assert [p.io_bytes for p in seen] == sorted(p.io_bytes for p in seen)
    assert summary.io_bytes >= seen[-1].io_bytes > 0


@pytest.mark.slow
def test_real_process(tmp_path: Path) -> None:
    logdir = make_log(tmp_path)
    want = survivors_of(logdir)
    cmd = [sys.executable, "-m", "cleanerd", "compact", str(logdir), "--now", str(NOW)]
    started = time.monotonic()
    json_cmd = [*cmd, "--delete-retention-ms", "0", "--format", "json"]
    done = subprocess.run(json_cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started >= json.loads(done.stdout)["seconds"]
    assert done.stderr == ""  # no progress bar without a terminal
    assert data_records(logdir / "demo-0") == want
    text = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert text.returncode == 0
    assert "cleanerd compact" in text.stdout


@pytest.mark.slow
def test_table_reports_compile_time_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cold kernel cache: the compile time is taken out of the cleaning time and said apart."""
    logdir = make_log(tmp_path)
    config = TopicCleanerConfig(compact=True, delete=False)
    log = PartitionLog(logdir / "demo-0")
    try:
        summary = compact_partition(log, config, StrategyConfig(), NOW, dry_run=True)
    finally:
        log.close()
    slow = dataclasses.replace(summary, seconds=summary.seconds + 30.0)
    cold = slow.without_compile_time(30.0, 12)
    assert cold.seconds == pytest.approx(summary.seconds)
    assert (cold.compile_seconds, cold.kernels_compiled) == (30.0, 12)
    assert cold.to_json()["compile_seconds"] == 30.0
    _print_table([cold], [], dry_run=True)
    out = " ".join(capsys.readouterr().out.split())
    assert f"in {cold.seconds:.2f} s" in out  # the cleaning time, without the compile time
    assert "+ 30.00 s compiling 12 numba kernels (`cleanerd warmup` compiles them ahead)" in out
    _print_table([summary], [], dry_run=True)  # a warm cache: nothing to say
    assert "numba" not in capsys.readouterr().out


@pytest.mark.parametrize(("cores", "helpers"), [(2, 1), (1, 0)])
def test_compact_decompresses_on_a_core_left_beside_the_cleaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, helpers: int
) -> None:
    """With a second core, pass 1 of a compressed log decompresses part of each chunk there
    (the daemon's rule for one cleaning), and the log written is the one a single thread
    writes; the pool's thread is gone when the command returns."""
    one = make_log(tmp_path, "one", codec="zstd")
    two = make_log(tmp_path, "two", codec="zstd")
    compact_json(one, *ZERO)  # whatever this machine has
    pools: list[Any] = []
    original = cleaner_mod.Cleaner.__init__

    def spy(self: Any, *args: Any, **kw: Any) -> None:
        pools.append(kw.get("decompression_pool"))
        original(self, *args, **kw)

    monkeypatch.setattr(cleaner_mod.Cleaner, "__init__", spy)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    threads_before = {t.name for t in threading.enumerate()}
    compact_json(two, *ZERO)
    assert pools
    for pool in pools:
        assert (pool._max_workers if pool is not None else 0) == helpers
    assert {t.name for t in threading.enumerate()} <= threads_before
    segments = ("*.log", "*.index", "*.timeindex", "*.txnindex")
    for pattern in segments:
        mine = {p.name: p.read_bytes() for p in (two / "demo-0").glob(pattern)}
        assert mine == {p.name: p.read_bytes() for p in (one / "demo-0").glob(pattern)}
