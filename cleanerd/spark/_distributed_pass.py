"""Plan B: one cleaning pass of one big partition, distributed: scan, shuffle, write, swap.

``SparkPass.clean`` has ``Cleaner.clean``'s contract, so the one-shot driver runs it for every
pass it would run locally (the settling pass, then the sweeps) and builds the same summary
(``compaction._one_shot``, through its ``passes`` hook). One pass:

1. driver: the ``.txnindex`` check, pass 2's segment groups, the producers whose last batch
   must survive, and the transaction state at each group's start (``compaction._external``);
2. one Spark job (``stages``): scan tasks (a run of source segments each) reduce their
   records to one row per key and cut them into buckets by key hash; a shuffle brings each
   bucket to one task, which picks every dirty key's winner and routes it to each group holding
   the key (``winners``); a second shuffle brings each group's winners to its write task.
   A pass with few dirty records (every sweep: one) skips both shuffles: the few dirty keys'
   winners are collected and given to every write task (``stages.run_small``);
3. write (one task per group): the group's winners fill a small ``OffsetMap`` exactly as pass 1
   would have left those entries, and the local filter and writer write the group's
   ``.cleaned`` segment, with its indexes, to the job's staging dir;
4. driver, only after every task succeeded: each staged segment is renamed into the partition
   dir and swapped in by the swap protocol, in group order, then the cleaner checkpoint moves.

A failed task fails the job before anything is swapped: the log is as it was (the driver undoes
the index repairs its open made, ``storage._repairs``).

The partition's writer lock is held as ``Cleaner.clean`` holds it: for the ``.txnindex`` check
and for each group's move into the partition dir and swap, not across the Spark stages. Writers
append to the active segment and roll meanwhile (the writer contract); a pass reads only the
inactive segments below its first uncleanable offset, which no writer changes, and the one-shot
driver's target keeps its appends out of the passes, as for the local engine.

One fault-injection seam, for tests: ``BEFORE_WRITE_CONF`` names a function, as
``module:function``, that every write task imports and calls with its group number and staging
dir before it writes its ``.cleaned`` segments there (``BeforeWrite``). Write tasks
run in Spark's Python workers, separate processes, so the hook travels as a name rather than an
object; the module must be importable there (``SparkContext.addPyFile`` ships a file). A hook
that raises fails the task as a write error would; one that blocks holds the task. Unset, the
write tasks call nothing. ``SMALL_PASS_CONF`` (a tuning knob the tests use to take either way)
bounds the small path.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cleanerd.compaction import (
    CleanedOutput,
    CleanerStats,
    CleaningPlan,
    CleanResult,
    LastRecord,
    Throttler,
    TxnState,
    last_records,
    legacy_delete_horizon,
    max_segment_bytes,
    pass_context,
    pass_groups,
    restore_state,
    swap_group,
    tombstone_floor,
    transaction_states,
    trust_txn_indexes,
    winner_map,
    write_group,
)
from cleanerd.format import LONG_MAX, limit_decompression
from cleanerd.spark._staging import group_dir, job_dir, move_into
from cleanerd.spark._winners import ScanJob, SegmentSet
from cleanerd.storage import (
    CLEANED_SUFFIX,
    CLEANER_OFFSET_CHECKPOINT,
    LogSegment,
    PartitionLog,
    update_offset_checkpoint,
)
from cleanerd.topics import StrategyConfig, TopicCleanerConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BEFORE_WRITE_CONF = "spark.cleanerd.planB.beforeWrite"
"""``module:function`` of a ``BeforeWrite`` hook every write task calls (tests inject faults)."""
BeforeWrite = Callable[[int, Path], None]
"""A write task's hook: its group number and its staging dir, the ``.cleaned`` segment in it."""
STATS_FILE = "stats.json"
BUCKET_SOURCE_BYTES = 512 << 20
"""Source segment bytes per bucket of the winners' shuffle (whole waves: a multiple of the
cores, at least one bucket each)."""
SCAN_TASK_BYTES = 512 << 20
"""Source segment bytes per scan task (whole waves as for the buckets, no more tasks than
segments): fewer, larger tasks pay Spark's per-task costs less often and reduce more keys."""
SMALL_PASS_CONF = "spark.cleanerd.planB.smallPassRecords"
SMALL_PASS_RECORDS = 4096
"""A pass with at most this many dirty records (a sweep has one) finds its winners without a
shuffle (``stages.run_small``); ``SMALL_PASS_CONF`` sets another bound (0: never)."""
COUNTERS = tuple(
    f.name
    for f in dataclasses.fields(CleanerStats)
    if f.type in ("int", int) and f.name != "passes"
)
"""The per-task counters summed into the pass's stats."""


class PlanBError(Exception):
    """A plan B job failed; nothing was swapped in, the partition is as it was."""


@dataclass(frozen=True)
class WriteJob:
    """What a write task needs besides its group's winners."""

    segments: SegmentSet
    staging: str
    config: TopicCleanerConfig
    strategy: StrategyConfig
    now_ms: int
    high_watermark: int  # the log's, read once for the pass (KAFKA-20452)
    latest_offset: int
    producers: dict[int, LastRecord]
    states: tuple[TxnState, ...]
    created_ms: int
    tombstones_kept_from: int = LONG_MAX  # the oldest snapshot's end (external.tombstone_floor)
    legacy_delete_horizon_ms: int = 0  # for magic 0/1 tombstones (legacy_delete_horizon)
    before_write: str | None = None  # BEFORE_WRITE_CONF's ``module:function``
    max_segment_bytes: int | None = None  # the driver's roll size (compaction.max_segment_bytes)

    def write(self, group: int, hashes: Any, offsets: Any, versions: Any, has: Any) -> None:
        """Filter group ``group`` into its staging dir, with its counters (``STATS_FILE``)."""
        segments = self.segments.open()
        members = [segments[i] for i in self.segments.groups[group]]
        omap = winner_map(self.strategy, hashes, offsets, versions, has, self.latest_offset)
        ctx = pass_context(
            omap,
            self.config,
            self.strategy,
            self.now_ms,
            self.high_watermark,
            self.producers,
            self.tombstones_kept_from,
            self.legacy_delete_horizon_ms,
        )
        stats = CleanerStats()
        where = group_dir(Path(self.staging), group)
        output = CleanedOutput(
            lambda base: LogSegment.create(
                where,
                base,
                self.segments.config,
                temp_suffix=CLEANED_SUFFIX,
                created_ms=self.created_ms,
            )
        )
        try:
            if self.before_write is not None:
                load_hook(self.before_write)(group, where)
            with limit_decompression(self.segments.config.max_decompressed_message_bytes):
                write_group(
                    segments,
                    members,
                    output,
                    ctx,
                    restore_state(self.states[group]),
                    stats,
                    max_bytes=self.max_segment_bytes,
                )
        finally:
            output.close()
        counters = {name: getattr(stats, name) for name in COUNTERS}
        (where / STATS_FILE).write_text(json.dumps(counters))


@dataclass
class PassTimes:
    """Where one pass's time went (seconds): the parts that scale out, and the driver's."""

    prepare: float = 0.0
    scan: float = 0.0
    shuffle: float = 0.0
    write: float = 0.0
    swap: float = 0.0


class SparkPass:
    """``Cleaner.clean`` on Spark (see the module doc); ``times`` has one entry per pass."""

    def __init__(
        self, spark: SparkSession, staging_root: Path, io: Throttler | None = None
    ) -> None:
        self.spark = spark
        self.staging_root = staging_root
        self.io = io
        self.times: list[PassTimes] = []

    def clean(
        self,
        log: PartitionLog,
        plan: CleaningPlan,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        abort_check: Callable[[], bool] = lambda: False,
    ) -> CleanResult:
        stats = CleanerStats()
        start, upper = plan.first_dirty_offset, plan.first_uncleanable_offset
        if start >= upper:
            stats.index_done()
            stats.all_done()
            return CleanResult(start, stats)
        return self._clean(log, start, upper, config, strategy, now_ms, stats)

    def _clean(
        self,
        log: PartitionLog,
        start: int,
        upper: int,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        stats: CleanerStats,
    ) -> CleanResult:
        times = PassTimes()
        self.times.append(times)
        t0 = time.monotonic()
        trust_txn_indexes(log, stats)
        segments = list(log.segments)
        groups = pass_groups(log, upper, upper)  # the map never fills: the pass ends at upper
        index = {id(s): i for i, s in enumerate(segments)}
        seg_set = SegmentSet(
            directory=str(log.directory),
            config=log.config,
            bases=tuple(s.base_offset for s in segments),
            groups=tuple(tuple(index[id(s)] for s in g) for g in groups),
        )
        states = tuple(transaction_states(segments, groups))
        producers = last_records(log, config, now_ms)
        before_write = self.spark.conf.get(BEFORE_WRITE_CONF, None)
        name = f"{log.topic_partition}"
        with job_dir(self.staging_root, log.directory.parent, name) as staging:
            job = WriteJob(
                segments=seg_set,
                staging=str(staging),
                config=config,
                strategy=strategy,
                now_ms=now_ms,
                high_watermark=log.high_watermark,
                latest_offset=upper - 1,
                producers=producers,
                states=states,
                created_ms=log.clock(),
                tombstones_kept_from=tombstone_floor(log),
                legacy_delete_horizon_ms=legacy_delete_horizon(
                    segments, start, config.delete_retention_ms
                ),
                before_write=before_write or None,
                max_segment_bytes=max_segment_bytes(),
            )
            times.prepare = time.monotonic() - t0
            scan = ScanJob(seg_set, start, upper, strategy)
            sizes = [s.size for g in groups for s in g]  # in the order of seg_set.sources()
            results = self._run(scan, job, len(groups), sizes, stats, times)
            t0 = time.monotonic()
            for g, group in enumerate(groups):
                staged = staging / f"group-{g:06d}"
                # one segment, or several when the group's output rolled (KAFKA-20036)
                bases = sorted(int(p.name[:20]) for p in staged.glob(f"*.log{CLEANED_SUFFIX}"))
                # as the local cleaner's swap: a writer opening the log meanwhile would take a
                # .cleaned file for a crashed cleaning's and remove it
                with log.writer_lock:
                    cleaned = []
                    for base in bases:
                        move_into(staged, log.directory, base, CLEANED_SUFFIX)
                        cleaned.append(
                            LogSegment(
                                log.directory,
                                base,
                                log.config,
                                temp_suffix=CLEANED_SUFFIX,
                                created_ms=job.created_ms,
                            )
                        )
                    swap_group(log, cleaned, group)
            update_offset_checkpoint(
                log.directory.parent / CLEANER_OFFSET_CHECKPOINT, {log.topic_partition: upper}
            )
            times.swap = time.monotonic() - t0
        for counters in results:
            for key, value in counters.items():
                if hasattr(stats, key):  # a counter an executor's cleanerd knows, and we do
                    setattr(stats, key, getattr(stats, key) + value)
        if self.io is not None:
            self.io.maybe_throttle(stats.bytes_read + stats.bytes_written + stats.map_bytes_read)
        stats.all_done()
        return CleanResult(upper, stats)

    def _run(
        self,
        scan: ScanJob,
        job: WriteJob,
        groups: int,
        sizes: list[int],
        stats: CleanerStats,
        times: PassTimes,
    ) -> list[dict[str, int]]:
        """The Spark job (``stages``); any failure becomes a ``PlanBError`` (nothing swapped)."""
        from cleanerd.spark._stages import (  # noqa: PLC0415 (pyspark)
            failed_stage,
            one_job_group,
            run_small,
            run_stages,
            scan_tasks,
        )

        name = Path(job.segments.directory).name
        sc = self.spark.sparkContext
        cores = max(sc.defaultParallelism, 1)
        count = _waves(sum(sizes), BUCKET_SOURCE_BYTES, cores)
        tasks = scan_tasks(sizes, _waves(sum(sizes), SCAN_TASK_BYTES, cores))
        t0 = time.monotonic()
        w0 = time.time()
        try:
            with one_job_group(sc):
                ran = None
                small = int(self.spark.conf.get(SMALL_PASS_CONF, None) or SMALL_PASS_RECORDS)
                if _dirty_bound(scan) <= small:
                    ran = run_small(sc, scan, job, groups, small)
                anomalies, spans = ran or run_stages(sc, scan, job, groups, count, tasks)
        except Exception as e:
            where = failed_stage(e)
            stage, what = where if where is not None else ("Spark", _first_line(e))
            raise PlanBError(
                f"{name}: plan B failed in its {stage} stage, nothing was swapped in and the"
                f" partition is as it was: {what}"
            ) from e
        total = time.monotonic() - t0
        ends = [min(max(spans.get(st, (w0, w0))[1] - w0, 0.0), total) for st in ("scan", "route")]
        times.scan = ends[0]
        times.shuffle = max(ends[1] - ends[0], 0.0)
        times.write = max(total - max(ends), 0.0)
        stats.add(anomalous_version_headers=anomalies)
        stats.index_done()
        staging = Path(job.staging)
        done = [staging / f"group-{g:06d}" / STATS_FILE for g in range(groups)]
        missing = [g for g, path in enumerate(done) if not path.is_file()]
        if missing:
            raise PlanBError(
                f"{name}: plan B wrote no segment for groups {missing}; nothing swapped"
            )
        return [json.loads(path.read_text()) for path in done]


def _waves(size: int, per_task: int, cores: int) -> int:
    """Tasks for ``size`` bytes at about ``per_task`` each, rounded up to whole waves."""
    tasks = max(-(-size // per_task), 1)
    return -(-tasks // cores) * cores


def _dirty_bound(scan: ScanJob) -> int:
    """At most how many records of the pass's sources are dirty (offsets at or past the start,
    each source's end bounded by the next segment's base)."""
    bases = scan.segments.bases
    return sum(max(bases[i + 1] - max(scan.start, bases[i]), 0) for i, _ in scan.segments.sources())


def load_hook(name: str) -> BeforeWrite:
    """The function ``module:function`` names, imported in the process that calls it."""
    module, sep, function = name.partition(":")
    if not sep or not module or not function:
        raise ValueError(f"{BEFORE_WRITE_CONF}={name!r}: expected module:function")
    hook = getattr(importlib.import_module(module), function)
    if not callable(hook):
        raise TypeError(f"{BEFORE_WRITE_CONF}={name!r} is not callable")
    return cast(BeforeWrite, hook)


def _first_line(e: BaseException) -> str:
    """The useful line of a Spark task error (a Python traceback wrapped in a Java one)."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line.split(":")[0] or line.startswith(("RuntimeError", "CorruptRecordError")):
            return line
    return lines[0] if lines else type(e).__name__
