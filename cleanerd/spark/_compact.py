"""``cleanerd spark compact``'s driver: a plan per partition, the Spark jobs, the summaries.

Each partition gets plan A or B from its dirty record count: the offset map that one pass over
its dirty range needs (``slot_bytes`` per record, at the map's load factor) against the task
budget. Both plans end in ``compaction._one_shot``'s summary, the one ``cleanerd compact``
prints, and both leave exactly the files ``cleanerd compact`` leaves (same ``--now``, same
settings, a dedupe buffer that holds the dirty range in one pass):

* A (fits a task): one Spark task per partition runs the local engine on it
  (``compact_directory``, which opens the log on the executor); no shuffle. Only partitions
  whose range fits are given to A, so A cleans each in one pass.
* B (too big for a task): ``plan_b.SparkPass`` runs every pass of the one-shot sequence as a
  distributed job, the driver opening the log.

Either plan holds the partition's writer lock only as the local cleaner does, for each swap
and brief reads: writers (the writer contract) append and roll while the job runs. A partition
that fails is left as ``cleanerd compact`` leaves it: the index repairs its open made are
undone when no ``.log`` changed (``storage._repairs``, on the executor for A, on the driver for
B), and the error says whether the partition is as it was. The log dirs' ``.lock`` is the
caller's (the CLI takes it as ``cleanerd compact`` does).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from cleanerd.compaction import (
    DEFAULT_DEDUPE_BUFFER_BYTES,
    DEFAULT_LOAD_FACTOR,
    ENGINE_SPARK,
    CompactionError,
    CompactionSummary,
    Throttler,
    compact_directory,
    compact_partition,
    slot_bytes,
    walk_segment,
)
from cleanerd.format import CorruptRecordError
from cleanerd.inspect import segment_logs
from cleanerd.spark._distributed_pass import PassTimes, PlanBError, SparkPass
from cleanerd.spark._staging import default_staging_root
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    PartitionLog,
    Repairs,
    StorageError,
    parse_partition_dir_name,
    read_offset_checkpoint,
)
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TASK_BUDGET_BYTES = DEFAULT_DEDUPE_BUFFER_BYTES
"""A task's offset map memory; the local default dedupe buffer, so plan A cleans like
``cleanerd compact`` with its defaults."""

FAILURES = (CorruptRecordError, StorageError, CompactionError, PlanBError, OSError)
"""What fails one partition (reported, the others go on), as ``cleanerd compact`` has it."""


class Plan(StrEnum):
    A = "A"
    B = "B"


@dataclass(frozen=True)
class PartitionJob:
    """One partition dir and its settings (``cli._targets.select`` resolves them)."""

    directory: Path
    log: LogConfig
    cleaner: TopicCleanerConfig
    strategy: StrategyConfig


@dataclass(frozen=True)
class Options:
    now_ms: int
    task_budget_bytes: int = DEFAULT_TASK_BUDGET_BYTES
    dry_run: bool = False
    roll_active: bool = False
    staging_dir: Path | None = None  # default: beside each log dir (``staging``)
    plan: Plan | None = None  # force a plan (tests and benchmarks); None: by the budget


@dataclass
class Outcome:
    """What became of one partition."""

    partition: str
    plan: Plan
    dirty_records: int
    summary: CompactionSummary | None = None
    error: str | None = None
    times: list[PassTimes] = field(default_factory=list)  # plan B: one entry per pass


def dirty_records(directory: Path, roll_active: bool) -> int:
    """Records a first pass would read into its map: those of the segments past the cleaner
    checkpoint (batch header counts; the active segment only when it is rolled first)."""
    tp = parse_partition_dir_name(directory.name)
    checkpoint_file = directory.parent / CLEANER_OFFSET_CHECKPOINT
    first_dirty = -1
    if tp is not None and checkpoint_file.is_file():
        first_dirty = read_offset_checkpoint(checkpoint_file).get(tp, -1)
    logs = segment_logs(directory)
    if not roll_active:
        logs = logs[:-1]
    total = 0
    for base, path in logs:
        walk = walk_segment(base, path).walk
        if walk.meta.next_offset > first_dirty:
            total += walk.records
    return total


def map_bytes_needed(records: int, strategy: StrategyConfig) -> int:
    """The dedupe buffer under which ``records`` keys never fill the map (its load factor)."""
    return math.ceil((records + 2) * slot_bytes(strategy) / DEFAULT_LOAD_FACTOR)


def choose(job: PartitionJob, options: Options) -> tuple[Plan, int]:
    """The partition's plan and its dirty record count."""
    records = dirty_records(job.directory, options.roll_active)
    if options.plan is not None:
        return options.plan, records
    needed = map_bytes_needed(records, job.strategy)
    return (Plan.A if needed <= options.task_budget_bytes else Plan.B), records


def compact_on_spark(
    spark: SparkSession, jobs: Sequence[PartitionJob], options: Options
) -> list[Outcome]:
    """Compact every partition (plan A ones in one job, then each plan B one); in job order.

    A partition whose plan cannot be chosen (its dir gone, a corrupt checkpoint or segment) gets
    that error as its outcome, with the plan it was forced to or A, and is left alone."""
    return run_planned(spark, jobs, [_chosen(job, options) for job in jobs], options)


def run_planned(
    spark: SparkSession, jobs: Sequence[PartitionJob], outcomes: list[Outcome], options: Options
) -> list[Outcome]:
    """Run each job by the plan its outcome already holds (``choose``'s), filling the outcomes
    in; an outcome that holds an error is left as it is."""
    a = [i for i, o in enumerate(outcomes) if o.error is None and o.plan is Plan.A]
    if a:
        sc = spark.sparkContext
        specs = [(jobs[i], options) for i in a]
        results = sc.parallelize(specs, len(specs)).map(run_plan_a).collect()
        for i, (summary, error) in zip(a, results, strict=True):
            outcomes[i].summary, outcomes[i].error = summary, error
    for i, o in enumerate(outcomes):
        if o.error is None and o.plan is Plan.B:
            run_plan_b(spark, jobs[i], options, o)
    return outcomes


def _chosen(job: PartitionJob, options: Options) -> Outcome:
    """The partition's outcome so far: its plan, or the error that kept ``choose`` from one
    (nothing was opened or written: the partition is as it was)."""
    try:
        plan, records = choose(job, options)
    except FAILURES as e:
        plan = options.plan or Plan.A
        return Outcome(job.directory.name, plan, 0, error=f"{e} (partition left as it was)")
    return Outcome(job.directory.name, plan, records)


def run_plan_a(spec: tuple[PartitionJob, Options]) -> tuple[CompactionSummary | None, str | None]:
    """A plan A task (on an executor): the local engine on one partition; on a failure the
    repairs its open made are undone, as ``cleanerd compact`` undoes them."""
    job, options = spec
    repairs = None if options.dry_run else Repairs(job.directory)
    try:
        summary = compact_directory(
            job.directory,
            job.log,
            job.cleaner,
            job.strategy,
            options.now_ms,
            map_bytes=max(options.task_budget_bytes, map_bytes_needed(2, job.strategy)),
            dry_run=options.dry_run,
            roll_active=options.roll_active,
            engine=ENGINE_SPARK,  # the local engine, in a Spark task: the ledger says Spark
        )
    except FAILURES as e:
        return None, _failed(e, repairs)
    return summary, None


def _failed(e: BaseException, repairs: Repairs | None) -> str:
    """A partition's error, with what its dir holds now (``cleanerd compact``'s words)."""
    return f"{e} ({repairs.undo() if repairs is not None else 'nothing written'})"


def run_plan_b(spark: SparkSession, job: PartitionJob, options: Options, out: Outcome) -> None:
    """Plan B on the driver: the one-shot sequence with every pass a Spark job. The writer
    lock is taken as the local cleaner takes it (each swap, brief reads), not for the job."""
    root = options.staging_dir or default_staging_root(job.directory.parent)
    passes: list[SparkPass] = []
    repairs: Repairs | None = None

    def factory(io: Throttler) -> SparkPass:
        p = SparkPass(spark, root, io)
        passes.append(p)
        return p

    try:
        if options.dry_run:
            root.mkdir(parents=True, exist_ok=True)
            out.summary = compact_directory(
                job.directory,
                job.log,
                job.cleaner,
                job.strategy,
                options.now_ms,
                dry_run=True,
                roll_active=options.roll_active,
                temp_root=root,  # executors read the copy: it must be where they see it
                passes=factory,
            )
        else:
            repairs = Repairs(job.directory)
            log = PartitionLog(job.directory, job.log)
            try:
                out.summary = compact_partition(
                    log,
                    job.cleaner,
                    job.strategy,
                    options.now_ms,
                    roll_active=options.roll_active,
                    passes=factory,
                )
            finally:
                log.close()
    except FAILURES as e:
        out.error = _failed(e, repairs)
    finally:
        if options.dry_run:
            with contextlib.suppress(OSError):
                root.rmdir()  # only when empty: another job may use it
    out.times = [t for p in passes for t in p.times]
