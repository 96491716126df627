"""Plan B: one cleaning pass of one big partition, distributed: scan, shuffle, write, swap.

``SparkPass.clean`` has ``Cleaner.clean``'s contract, so the one-shot driver runs it for every
pass it would run locally (the settling pass, then the sweeps) and builds the same summary
(``compaction.one_shot``, through its ``passes`` hook). One pass:

1. driver: the ``.txnindex`` check, pass 2's segment groups, the producers whose last batch
   must survive, and the transaction state at each group's start (``compaction.external``);
2. scan (one task per source segment) and shuffle on the key hash (``winners``): every dirty
   key's winner, joined to the groups holding the key;
3. write (one task per group): the group's winners fill a small ``OffsetMap`` exactly as pass 1
   would have left those entries, and the local filter and writer write the group's
   ``.cleaned`` segment, with its indexes, to the job's staging dir;
4. driver, only after every task succeeded: each staged segment is renamed into the partition
   dir and swapped in by the swap protocol, in group order, then the cleaner checkpoint moves.

A failed task fails the job before anything is swapped: the log is as it was (the driver undoes
the index repairs its open made, ``storage.repairs``).

The partition's writer lock is held as ``Cleaner.clean`` holds it: for the ``.txnindex`` check
and for each group's move into the partition dir and swap, not across the Spark stages. Writers
append to the active segment and roll meanwhile (the writer contract); a pass reads only the
inactive segments below its first uncleanable offset, which no writer changes, and the one-shot
driver's target keeps its appends out of the passes, as for the local engine.

Test hooks (the tests use them; nothing else does): the Spark conf ``spark.cleanerd.test.failWrite``
set to a group number makes that group's write task fail after it started writing;
``spark.cleanerd.test.holdWrite`` set to a directory makes every write task create
``writing-<group>`` there and wait (at most ``HOLD_SECONDS``) until the file ``go`` exists.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cleanerd.compaction.cleaner import CleanResult, trust_txn_indexes
from cleanerd.compaction.external import (
    TxnState,
    last_records,
    pass_context,
    pass_groups,
    restore_state,
    swap_group,
    tombstone_floor,
    transaction_states,
    winner_map,
)
from cleanerd.compaction.group_writer import write_group
from cleanerd.compaction.plan import CleaningPlan
from cleanerd.compaction.stats import CleanerStats
from cleanerd.compaction.strategy import StrategyConfig
from cleanerd.compaction.throttle import Throttler
from cleanerd.compaction.topic_config import TopicCleanerConfig
from cleanerd.compaction.transactions import LastRecord
from cleanerd.format.limits import LONG_MAX
from cleanerd.spark.staging import group_dir, job_dir, move_into
from cleanerd.spark.winners import ScanJob, SegmentSet, scan_rows, winners_by_group
from cleanerd.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, update_offset_checkpoint
from cleanerd.storage.files import CLEANED_SUFFIX
from cleanerd.storage.partition import PartitionLog
from cleanerd.storage.segment import LogSegment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FAIL_WRITE_CONF = "spark.cleanerd.test.failWrite"
HOLD_WRITE_CONF = "spark.cleanerd.test.holdWrite"
HOLD_SECONDS = 120.0
STATS_FILE = "stats.json"
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
    upper: int
    latest_offset: int
    producers: dict[int, LastRecord]
    states: tuple[TxnState, ...]
    created_ms: int
    fail_group: int | None = None
    tombstones_kept_from: int = LONG_MAX  # the oldest snapshot's end (external.tombstone_floor)
    hold: str | None = None  # test hook: HOLD_WRITE_CONF's directory

    def write(self, group: int, hashes: Any, offsets: Any, versions: Any, has: Any) -> None:
        """Filter group ``group`` into its staging dir, with its counters (``STATS_FILE``)."""
        if self.hold is not None:
            _hold(Path(self.hold), group)
        segments = self.segments.open()
        members = [segments[i] for i in self.segments.groups[group]]
        omap = winner_map(self.strategy, hashes, offsets, versions, has, self.latest_offset)
        ctx = pass_context(
            omap,
            self.config,
            self.strategy,
            self.now_ms,
            self.upper,
            self.producers,
            self.tombstones_kept_from,
        )
        stats = CleanerStats()
        where = group_dir(Path(self.staging), group)
        cleaned = LogSegment.create(
            where,
            members[0].base_offset,
            self.segments.config,
            temp_suffix=CLEANED_SUFFIX,
            created_ms=self.created_ms,
        )
        try:
            if self.fail_group == group:
                raise RuntimeError(
                    f"injected failure writing group {group} ({FAIL_WRITE_CONF} is set)"
                )
            write_group(segments, members, cleaned, ctx, restore_state(self.states[group]), stats)
        finally:
            cleaned.close()
        counters = {name: getattr(stats, name) for name in COUNTERS}
        (where / STATS_FILE).write_text(json.dumps(counters))

    def write_batches(self, batches: Iterator[Any]) -> None:
        """The write task: every group among ``batches`` (winners, one marker row per group)."""
        import pyarrow as pa  # noqa: PLC0415 (the spark extra, on the executor)

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        t = pa.Table.from_batches(parts)
        col = {name: t.column(name).to_numpy() for name in t.column_names}
        for group in np.unique(col["grp"]).tolist():
            sel = (col["grp"] == group) & (col["offset"] >= 0)
            hashes = np.stack([col["h1"][sel], col["h2"][sel]], axis=1).view(np.uint64)
            self.write(int(group), hashes, col["offset"][sel], col["version"][sel], col["has"][sel])


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
        fail = self.spark.conf.get(FAIL_WRITE_CONF, None)
        hold = self.spark.conf.get(HOLD_WRITE_CONF, None)
        name = f"{log.topic_partition}"
        with job_dir(self.staging_root, log.directory.parent, name) as staging:
            job = WriteJob(
                segments=seg_set,
                staging=str(staging),
                config=config,
                strategy=strategy,
                now_ms=now_ms,
                upper=upper,
                latest_offset=upper - 1,
                producers=producers,
                states=states,
                created_ms=log.clock(),
                fail_group=int(fail) if fail not in (None, "") else None,
                tombstones_kept_from=tombstone_floor(log),
                hold=hold or None,
            )
            times.prepare = time.monotonic() - t0
            results = self._run(
                ScanJob(seg_set, start, upper, strategy), job, len(groups), stats, times
            )
            t0 = time.monotonic()
            for g, group in enumerate(groups):
                base = group[0].base_offset
                # as the local cleaner's swap: a writer opening the log meanwhile would take a
                # .cleaned file for a crashed cleaning's and remove it
                with log.writer_lock:
                    move_into(staging / f"group-{g:06d}", log.directory, base, CLEANED_SUFFIX)
                    cleaned = LogSegment(
                        log.directory,
                        base,
                        log.config,
                        temp_suffix=CLEANED_SUFFIX,
                        created_ms=job.created_ms,
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
        self, scan: ScanJob, job: WriteJob, groups: int, stats: CleanerStats, times: PassTimes
    ) -> list[dict[str, int]]:
        """The Spark stages; any failure becomes a ``PlanBError`` (nothing swapped yet)."""
        from pyspark.sql import functions as F  # noqa: N812, PLC0415 (the spark extra)

        from cleanerd.spark.stages import WRITE_SINK, encode, register  # noqa: PLC0415 (pyspark)

        register(self.spark)
        name = Path(job.segments.directory).name
        rows = shuffled = None
        stage = "scan"
        try:
            t0 = time.monotonic()
            rows = scan_rows(self.spark, scan).persist()
            anomalies = rows.where(F.col("grp") < 0).agg(F.sum("version")).collect()[0][0]
            stats.add(anomalous_version_headers=int(anomalies or 0))
            stats.index_done()
            times.scan = time.monotonic() - t0
            stage = "shuffle"
            t0 = time.monotonic()
            data = rows.where(F.col("grp") >= 0)
            shuffled = winners_by_group(self.spark, data, scan.strategy.versioned, groups).persist()
            shuffled.count()
            times.shuffle = time.monotonic() - t0
            stage = "write"
            t0 = time.monotonic()
            shuffled.write.format(WRITE_SINK).option("job", encode(job)).mode("append").save()
            times.write = time.monotonic() - t0
        except Exception as e:
            raise PlanBError(
                f"{name}: plan B failed in its {stage} stage, nothing was swapped in and the"
                f" partition is as it was: {_first_line(e)}"
            ) from e
        finally:
            for df in (shuffled, rows):
                if df is not None:
                    df.unpersist()
        staging = Path(job.staging)
        done = [staging / f"group-{g:06d}" / STATS_FILE for g in range(groups)]
        missing = [g for g, path in enumerate(done) if not path.is_file()]
        if missing:
            raise PlanBError(
                f"{name}: plan B wrote no segment for groups {missing}; nothing swapped"
            )
        return [json.loads(path.read_text()) for path in done]


def _hold(gate: Path, group: int) -> None:
    """``HOLD_WRITE_CONF``'s hook: say the write task started, wait for the test's ``go``."""
    (gate / f"writing-{group}").touch()
    deadline = time.monotonic() + HOLD_SECONDS
    while not (gate / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _first_line(e: BaseException) -> str:
    """The useful line of a Spark task error (a Python traceback wrapped in a Java one)."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line.split(":")[0] or line.startswith(("RuntimeError", "CorruptRecordError")):
            return line
    return lines[0] if lines else type(e).__name__
