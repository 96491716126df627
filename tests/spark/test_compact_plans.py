"""``cleanerd spark compact``: plans A and B leave exactly the files ``cleanerd compact`` leaves.

Every comparison is of whole partition dirs and their log dir's checkpoints, byte for byte,
against a copy compacted by the local one-shot driver (what ``cleanerd compact`` runs) at the
same ``--now`` with a dedupe buffer that holds the dirty range in one pass. Plan B is forced by
a task budget too small for any partition. All tests share the session's ``local[2]`` Spark.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.cli import cli
from cleanerd.compaction import compact_directory
from cleanerd.compaction._cleaned import _writer as writer_mod
from cleanerd.format import INT_MAX, Record
from cleanerd.snapshot import create_snapshot
from cleanerd.spark._compact import Options, PartitionJob, Plan, compact_on_spark
from cleanerd.spark._distributed_pass import BEFORE_WRITE_CONF, SMALL_PASS_CONF
from cleanerd.spark._staging import default_staging_root, group_dir, job_dir
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LEDGER_FILE,
    PartitionLog,
    read_ledger,
    update_offset_checkpoint,
)
from cleanerd.topics import LogConfig, Strategy, StrategyConfig, TopicCleanerConfig
from cleanerd.workload import WorkloadSpec, generate
from tests.support.cleaning import write_segment
from tests.support.legacy import legacy_set, read_back, v2_batch
from tests.support.logs import ledger_counts
from tests.support.spark_hooks import ship

NOW = 1_800_000_000_000
HEADER = "v"
LOCAL_MAP = 64 << 20  # one pass for every log here
TINY = 1 << 10  # no partition fits: plan B


def tree(logdir: Path) -> dict[str, str]:
    """Every file under the log dir (partition dirs and checkpoints): name -> content hash. The
    erasure ledgers say when and by which engine: ``ledger_counts`` compares what else they say."""
    return {
        str(p.relative_to(logdir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(logdir.rglob("*"))
        if p.is_file() and p.name not in (".lock", LEDGER_FILE)
    }


def make_log(root: Path, name: str = "logs", **spec: Any) -> Path:
    """A generated log dir, each partition rolled so that all of it is cleanable."""
    logdir = root / name
    generate(logdir, WorkloadSpec(**spec))
    for directory in sorted(p for p in logdir.iterdir() if p.is_dir()):
        log = PartitionLog(directory, LogConfig(segment_bytes=spec.get("segment_bytes", 1 << 30)))
        log.roll()
        log.close()
    return logdir


def strategy_config(strategy: str) -> StrategyConfig:
    return StrategyConfig(Strategy(strategy), HEADER if strategy == "header" else "")


def jobs_of(
    logdir: Path, strategy: str, retention_ms: int, segment_bytes: int
) -> list[PartitionJob]:
    cleaner = dataclasses.replace(TopicCleanerConfig(), delete_retention_ms=retention_ms)
    config = LogConfig(segment_bytes=segment_bytes)
    return [
        PartitionJob(d, config, cleaner, strategy_config(strategy))
        for d in sorted(p for p in logdir.iterdir() if p.is_dir() and not p.name.startswith("."))
    ]


def compact_locally(logdir: Path, jobs: list[PartitionJob]) -> list[dict[str, Any]]:
    out = []
    for job in jobs:
        summary = compact_directory(
            logdir / job.directory.name,
            job.log,
            job.cleaner,
            job.strategy,
            NOW,
            map_bytes=LOCAL_MAP,
        )
        out.append(summary.to_json())
    return out


def on_copy(source: Path, name: str) -> Path:
    target = source.parent / name
    shutil.copytree(source, target, copy_function=shutil.copy2)
    return target


def relocated(jobs: list[PartitionJob], logdir: Path) -> list[PartitionJob]:
    return [dataclasses.replace(j, directory=logdir / j.directory.name) for j in jobs]


# --- plans A and B against the local engine, on random logs -----------------------------------
log_specs = st.fixed_dictionaries(
    {
        "records": st.integers(200, 1500),
        "keys": st.integers(5, 150),
        "records_per_batch": st.integers(1, 40),
        "tombstone_ratio": st.sampled_from([0.0, 0.1, 0.3]),
        "transactional_producers": st.integers(0, 2),
        "idempotent_producers": st.integers(0, 1),
        "abort_ratio": st.sampled_from([0.0, 0.3]),
        "codec": st.sampled_from(["none", "lz4", "zstd"]),
        "segment_bytes": st.sampled_from([8_000, 20_000]),
        "seed": st.integers(0, 2**16),
    }
)


@pytest.mark.parametrize("strategy", [s.value for s in Strategy])
@settings(
    max_examples=2,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=log_specs, retention=st.sampled_from([0, 60_000]))
def test_plans_a_and_b_match_the_local_engine_byte_for_byte(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    strategy: str,
    spec: dict[str, Any],
    retention: int,
) -> None:
    root = tmp_path_factory.mktemp("random")
    extra = {"version_header": HEADER, "timestamps": "shuffled"} if strategy != "offset" else {}
    local = make_log(root, **spec, **extra)
    plan_a, plan_b = on_copy(local, "plan-a"), on_copy(local, "plan-b")
    jobs = jobs_of(local, strategy, retention, spec["segment_bytes"])
    want = compact_locally(local, jobs)

    got_a = compact_on_spark(spark, relocated(jobs, plan_a), Options(NOW, LOCAL_MAP))
    # the settling pass through the shuffle, the sweeps (one dirty record) without one
    spark.conf.set(SMALL_PASS_CONF, "1")
    try:
        got_b = compact_on_spark(spark, relocated(jobs, plan_b), Options(NOW, TINY))
    finally:
        spark.conf.unset(SMALL_PASS_CONF)

    assert [o.plan for o in got_a] == [Plan.A] * len(jobs)
    assert [o.plan for o in got_b] == [Plan.B] * len(jobs)
    assert [o.error for o in got_a + got_b] == [None] * (2 * len(jobs))
    assert tree(plan_a) == tree(local)
    assert tree(plan_b) == tree(local)
    assert ledger_counts(plan_a) == ledger_counts(plan_b) == ledger_counts(local)
    assert {e.engine for p in plan_a.glob("*-*") for e in read_ledger(p).entries} == {"spark"}
    for outcome, summary in zip(got_a + got_b, want + want, strict=True):
        assert outcome.summary is not None
        mine = outcome.summary.to_json()
        for key in ("records_out", "bytes_out", "passes", "sweeps", "tombstones_removed"):
            assert mine[key] == summary[key], key
        assert mine["markers_removed"] == summary["markers_removed"]
        assert mine["aborted_records_removed"] == summary["aborted_records_removed"]


# --- a group's output that rolls into several segments (KAFKA-20036) ----------------------------
@pytest.mark.parametrize("small", ["1", "4096"])  # winners by a shuffle, or collected
def test_plan_b_rolls_a_groups_output_where_the_local_engine_does(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: str
) -> None:
    """Plan B's write tasks roll at the driver's roll size (shipped in the job), stage every
    segment of a group and swap them in together: the files are the local engine's. (Plan A
    runs the local cleaner itself on an executor, at the executor's roll size: the limit this
    test lowers in the driver does not reach it.)"""
    spec: dict[str, Any] = {"records": 3000, "keys": 2000, "records_per_batch": 10}
    spec |= {"tombstone_ratio": 0.1, "transactional_producers": 1, "abort_ratio": 0.3}
    spec |= {"codec": "zstd", "segment_bytes": 20_000}
    logdir = make_log(tmp_path, **spec)
    local, plan_b = on_copy(logdir, "local"), on_copy(logdir, "plan-b")
    jobs = jobs_of(logdir, "offset", 0, spec["segment_bytes"])
    monkeypatch.setattr(writer_mod, "MAX_SEGMENT_BYTES", 4_000)
    compact_locally(local, relocated(jobs, local))
    (part,) = [p for p in local.iterdir() if p.is_dir()]
    unrolled = on_copy(logdir, "unrolled")
    spark.conf.set(SMALL_PASS_CONF, small)
    try:
        (got,) = compact_on_spark(spark, relocated(jobs, plan_b), Options(NOW, TINY))
    finally:
        spark.conf.unset(SMALL_PASS_CONF)
    assert got.plan is Plan.B
    assert got.error is None, got.error
    assert tree(plan_b) == tree(local)
    monkeypatch.setattr(writer_mod, "MAX_SEGMENT_BYTES", INT_MAX)
    compact_locally(unrolled, relocated(jobs, unrolled))
    rolled_logs = len(list(part.glob("*.log")))
    plain_logs = len(list((unrolled / part.name).glob("*.log")))
    assert rolled_logs > plain_logs  # the groups' outputs did roll


# --- a failed plan B job changes nothing -------------------------------------------------------
@pytest.mark.parametrize("small", ["1", "4096"])  # winners by a shuffle, or collected
def test_a_failed_write_task_leaves_the_log_as_it_was_and_a_rerun_succeeds(
    spark: Any, tmp_path: Path, small: str
) -> None:
    spec: dict[str, Any] = {
        "records": 2000,
        "keys": 100,
        "records_per_batch": 10,
        "segment_bytes": 8_000,
    }
    spec |= {"tombstone_ratio": 0.2, "transactional_producers": 1}
    logdir = make_log(tmp_path, **spec)
    local = on_copy(logdir, "local")
    jobs = jobs_of(logdir, "offset", 0, spec["segment_bytes"])
    compact_locally(local, relocated(jobs, local))
    before = tree(logdir)

    ship(spark)
    spark.conf.set(BEFORE_WRITE_CONF, "spark_hooks:fail_group_1")
    spark.conf.set(SMALL_PASS_CONF, small)
    try:
        (failed,) = compact_on_spark(spark, jobs, Options(NOW, TINY))
    finally:
        spark.conf.unset(BEFORE_WRITE_CONF)
        spark.conf.unset(SMALL_PASS_CONF)
    assert failed.plan is Plan.B
    assert failed.summary is None
    assert failed.error is not None
    assert "write stage" in failed.error
    assert "nothing was swapped in" in failed.error
    assert "injected failure writing group 1" in failed.error
    assert tree(logdir) == before
    assert not (tmp_path / ".logs.cleanerd-staging").exists()  # the job's staging dir is gone

    (again,) = compact_on_spark(spark, jobs, Options(NOW, TINY))
    assert again.error is None
    assert again.summary is not None
    assert tree(logdir) == tree(local)


def test_a_write_task_that_outlives_its_failed_job_cannot_recreate_the_staging_dir(
    tmp_path: Path,
) -> None:
    """Spark fails a job at its first failed task and lets the others run on: a write task that
    starts after the driver removed the job's staging dir fails instead of recreating it."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    root = default_staging_root(logdir)
    with job_dir(root, logdir, "t-0") as job:
        assert (group_dir(job, 0) / ".").is_dir()
    assert not root.exists()  # removed with the job: nothing left beside the log dir
    with pytest.raises(FileNotFoundError):
        group_dir(job, 1)
    assert not root.exists()


# --- a failed partition is left byte-identical, open-time repairs included -------------------
@pytest.mark.parametrize(("plan", "budget"), [(Plan.A, LOCAL_MAP), (Plan.B, TINY)])
def test_a_failed_partition_is_left_as_it_was_with_the_repairs_of_its_open_undone(
    spark: Any, tmp_path: Path, plan: Plan, budget: int
) -> None:
    """The first segment lost its indexes (opening the log rebuilds them, the ``.txnindex``
    too), a dirty segment is cut short (the cleaning fails): the rebuilt indexes must not stay,
    every file is as it was, as ``cleanerd compact`` leaves it (``storage._repairs``)."""
    spec: dict[str, Any] = {"records": 1500, "keys": 100, "records_per_batch": 10}
    spec |= {"segment_bytes": 8_000, "transactional_producers": 2, "abort_ratio": 0.5, "seed": 4}
    logdir = make_log(tmp_path, **spec)
    (part,) = [p for p in logdir.iterdir() if p.is_dir()]
    logs = sorted(part.glob("*.log"))
    assert len(logs) > 4
    for suffix in (".index", ".timeindex", ".txnindex"):
        logs[0].with_suffix(suffix).unlink(missing_ok=True)
    logs[3].write_bytes(logs[3].read_bytes()[:-7])
    before = tree(logdir)
    jobs = jobs_of(logdir, "offset", 0, spec["segment_bytes"])

    (failed,) = compact_on_spark(spark, jobs, Options(NOW, budget))

    assert failed.plan is plan
    assert failed.summary is None
    assert tree(logdir) == before
    assert failed.error is not None
    assert failed.error.endswith("(partition left as it was)"), failed.error


# --- writers append while plan B runs ------------------------------------------------------------
def test_a_writer_appends_while_a_plan_b_job_runs_and_the_result_is_the_local_engines(
    spark: Any, tmp_path: Path
) -> None:
    """Plan B holds the writer lock as the local cleaner does (swaps, brief reads), not for the
    job: another thread's append through storage's appender completes while the job's write
    tasks are held (``spark_hooks.hold``), and the records that were there are compacted byte for
    byte as ``cleanerd compact`` compacts them, the appended batch after them."""
    spec: dict[str, Any] = {"records": 2000, "keys": 100, "records_per_batch": 10}
    spec |= {"tombstone_ratio": 0.2, "transactional_producers": 1, "segment_bytes": 8_000}
    logdir = make_log(tmp_path, **spec)
    local = on_copy(logdir, "local")
    jobs = jobs_of(logdir, "offset", 0, spec["segment_bytes"])
    compact_locally(local, relocated(jobs, local))
    (part,) = [j.directory for j in jobs]
    active = sorted(part.glob("*.log"))[-1].name.split(".")[0]  # the empty active segment
    gate = tmp_path / "gate"
    gate.mkdir()
    late = Record(0, NOW, b"late key", b"late value")
    seen: dict[str, Any] = {}

    def writer() -> None:
        if not _wait_for(lambda: any(gate.glob("writing-*")), seen):
            return
        log = PartitionLog(part, LogConfig(segment_bytes=spec["segment_bytes"]))
        try:
            appended = log.append([late])
            # before "append" is published: release() lets the tasks go only after it
            seen["go_before_append"] = (gate / "go").exists()
            seen["append"] = appended
        finally:
            log.close()

    def release() -> None:
        _wait_for(lambda: "append" in seen, seen)  # a writer blocked by the job: time out
        (gate / "go").touch()

    threads = [threading.Thread(target=f, daemon=True) for f in (writer, release)]
    for t in threads:
        t.start()
    ship(spark)
    spark.conf.set(BEFORE_WRITE_CONF, "spark_hooks:hold")
    try:
        (result,) = compact_on_spark(spark, jobs, Options(NOW, TINY))
    finally:
        spark.conf.unset(BEFORE_WRITE_CONF)
        (gate / "go").touch()
        for t in threads:
            t.join(timeout=120)
    assert result.plan is Plan.B
    assert result.error is None, result.error
    assert "timed out" not in seen, "no write task started, or the append waited for the job"
    assert seen["go_before_append"] is False  # appended while the write tasks were held
    mine, theirs = tree(logdir), tree(local)
    in_active = {name for name in mine | theirs if Path(name).name.startswith(active)}
    assert {n: h for n, h in mine.items() if n not in in_active} == {
        n: h for n, h in theirs.items() if n not in in_active
    }
    log = PartitionLog(part)
    got = [(r.offset, r.key, r.value) for r in log.records()]
    log.close()
    want_log = PartitionLog(local / part.name)
    want = [(r.offset, r.key, r.value) for r in want_log.records()]
    end = want_log.log_end_offset
    want_log.close()
    assert seen["append"].first_offset == end
    assert got == [*want, (end, late.key, late.value)]


def _wait_for(condition: Any, seen: dict[str, Any], seconds: float = 60.0) -> bool:
    """Poll ``condition`` for at most ``seconds`` (a liveness bound, not a speed check)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            seen["timed out"] = True
            return False
        time.sleep(0.05)
    return True


# --- the command -------------------------------------------------------------------------------
def test_the_command_picks_a_plan_per_partition_and_prints_compacts_json(
    spark: Any, tmp_path: Path
) -> None:
    spec: dict[str, Any] = {
        "records_per_batch": 20,
        "tombstone_ratio": 0.2,
        "segment_bytes": 10_000,
    }
    logdir = make_log(tmp_path, topic="small", records=200, keys=50, **spec)
    generate(logdir, WorkloadSpec(topic="big", records=3000, keys=400, **spec))
    log = PartitionLog(logdir / "big-0", LogConfig(segment_bytes=10_000))
    log.roll()
    log.close()
    local = on_copy(logdir, "local")
    args = ["--now", str(NOW), "--delete-retention-ms", "0", "--format", "json"]
    runner = CliRunner()
    want = runner.invoke(cli, ["compact", str(local), *args], catch_exceptions=False)
    assert want.exit_code == 0, want.output
    budget = ["--task-budget-bytes", "20000", "--master", "local[2]"]
    got = runner.invoke(cli, ["spark", "compact", str(logdir), *args, *budget])
    assert got.exit_code == 0, got.output
    assert "small-0: plan A" in got.stderr
    assert "big-0: plan B" in got.stderr
    mine = [json.loads(line) for line in got.stdout.splitlines()]
    theirs = [json.loads(line) for line in want.stdout.splitlines()]
    assert [sorted(m) for m in mine] == [sorted(t) for t in theirs]
    for m, t in zip(mine, theirs, strict=True):
        assert (m["partition"], m["records_out"], m["bytes_out"]) == (
            t["partition"],
            t["records_out"],
            t["bytes_out"],
        )
    assert tree(logdir) == tree(local)


def test_without_pyspark_the_command_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir = make_log(tmp_path, records=100, keys=10)
    before = tree(logdir)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark now fails
    result = CliRunner().invoke(cli, ["spark", "compact", str(logdir), "--now", str(NOW)])
    assert result.exit_code == 1
    assert "pip install 'cleanerd[spark]'" in result.output
    assert tree(logdir) == before


def test_plan_b_keeps_the_tombstones_a_snapshot_needs_as_the_local_engine_does(
    spark: Any, tmp_path: Path
) -> None:
    """A snapshot ends halfway: with tombstone retention 0 both engines remove the tombstones
    below its end and keep the ones past it (a replay from it needs them), byte for byte."""
    spec: dict[str, Any] = {"records": 1500, "keys": 60, "records_per_batch": 10}
    spec |= {"tombstone_ratio": 0.3, "segment_bytes": 8_000, "seed": 7}
    logdir = make_log(tmp_path, **spec)
    (part,) = [p for p in logdir.iterdir() if p.is_dir()]
    log = PartitionLog(part, LogConfig(segment_bytes=spec["segment_bytes"]))
    half = create_snapshot(log, strategy_config("offset"), upto=log.log_end_offset // 2)
    log.close()
    assert half.sid is not None
    local = on_copy(logdir, "local")
    jobs = jobs_of(logdir, "offset", 0, spec["segment_bytes"])
    compact_locally(local, relocated(jobs, local))
    (result,) = compact_on_spark(spark, jobs, Options(NOW, TINY))
    assert result.plan is Plan.B
    assert result.error is None
    assert tree(logdir) == tree(local)
    kept = PartitionLog(local / part.name)
    tombstones = [r.offset for r in kept.records() if r.value is None]
    kept.close()
    assert tombstones  # some stayed: all of them at or past the snapshot's end
    assert min(tombstones) >= half.sid.end_offset


# --- a partition whose plan cannot be chosen fails alone ---------------------------------------
def test_a_partition_whose_plan_cannot_be_chosen_fails_alone_and_the_others_are_compacted(
    spark: Any, tmp_path: Path
) -> None:
    """``choose`` fails for a partition dir that is gone and for the partitions of a log dir
    whose ``cleaner-offset-checkpoint`` is corrupt: those get the error as their outcome and are
    left as they were; the partitions of another log dir are compacted as ``cleanerd compact``
    compacts them."""
    spec: dict[str, Any] = {"records": 600, "keys": 40, "records_per_batch": 10}
    spec |= {"tombstone_ratio": 0.2, "segment_bytes": 8_000}
    good = make_log(tmp_path, "good", partitions=2, **spec)
    bad = make_log(tmp_path, "bad", partitions=1, **spec)
    (bad / "cleaner-offset-checkpoint").write_text("0\n1\nnot a checkpoint line\n")
    local = on_copy(good, "local")
    good_jobs = jobs_of(good, "offset", 0, spec["segment_bytes"])
    compact_locally(local, relocated(good_jobs, local))
    bad_before = tree(bad)
    gone = dataclasses.replace(good_jobs[0], directory=good / "gone-0")
    jobs = [gone, *jobs_of(bad, "offset", 0, spec["segment_bytes"]), *good_jobs]

    pristine = on_copy(good, "pristine")

    for budget, plan in ((LOCAL_MAP, Plan.A), (TINY, Plan.B)):
        shutil.rmtree(good)
        shutil.copytree(pristine, good, copy_function=shutil.copy2)
        outcomes = compact_on_spark(spark, jobs, Options(NOW, budget))
        assert [o.partition for o in outcomes] == [j.directory.name for j in jobs]
        missing, corrupt, *fine = outcomes
        for o in (missing, corrupt):
            assert o.summary is None
            assert o.error is not None
            assert o.error.endswith("(partition left as it was)"), o.error
        assert "gone-0" in str(missing.error)
        assert "cleaner-offset-checkpoint" in str(corrupt.error)
        assert [(o.plan, o.error) for o in fine] == [(plan, None)] * len(good_jobs)
        assert all(o.summary is not None for o in fine)
        assert tree(good) == tree(local)
        assert tree(bad) == bad_before
        assert not (good / "gone-0").exists()


# --- legacy message sets (magic 0 and 1) --------------------------------------------------------
def test_plan_b_cleans_legacy_message_sets_as_the_local_engine_does(
    spark: Any, tmp_path: Path
) -> None:
    """A log begun before Kafka 0.11 (kafka-python's v0 and v1 sets, then v2), cleaned before up
    to its v2 part: both engines apply the legacy tombstone rule (the segments older than the
    last clean one's mtime less delete.retention.ms lose theirs), byte for byte."""
    day = 86_400_000
    part = tmp_path / "logs" / "old-0"
    sets = [
        (0, [legacy_set(0, "gzip", [(0, 0, b"t0", None), (1, 0, b"a", b"1"), (2, 0, b"b", None)])]),
        (3, [legacy_set(1, "none", [(3, 5, b"t1", None)]),
             legacy_set(1, "none", [(4, 5, b"a", b"2")])]),
        (5, [legacy_set(1, "lz4", [(5, 6, b"t2", None), (6, 7, b"b", b"3")])]),
        (7, [v2_batch(7, "none", [(7 + i, 8, b"c%d" % i, b"4") for i in range(200)])]),
        (207, [v2_batch(207, "none", [(207, 9, b"d", b"6")])]),
    ]  # fmt: skip
    for i, (base, data) in enumerate(sets):
        write_segment(part, base, data)
        mtime_ns = (NOW - (40 - 10 * i) * day) * 10**6
        os.utime(part / f"{base:020d}.log", ns=(mtime_ns, mtime_ns))
    log = PartitionLog(part)
    update_offset_checkpoint(part.parent / CLEANER_OFFSET_CHECKPOINT, {log.topic_partition: 7})
    log.close()
    logdir = part.parent
    local = on_copy(logdir, "local")
    jobs = jobs_of(logdir, "offset", day, 1 << 30)
    compact_locally(local, relocated(jobs, local))
    (result,) = compact_on_spark(spark, jobs, Options(NOW, TINY))
    assert result.plan is Plan.B
    assert result.error is None
    assert tree(logdir) == tree(local)
    kept = [r.offset for log in sorted(part.glob("*.log")) for r in read_back(log)[0]]
    # the map holds the v2 keys only: the legacy values stay; the tombstones at 0, 2 (v0) and 3
    # (v1) are in segments older than the horizon and go; t2's segment (5) is young
    assert kept[:4] == [1, 4, 5, 6]
    assert len(kept) == 4 + 201
