"""One-shot compaction of a partition: clean until nothing is left to clean at ``now``.

The daemon cleans a log once when it is dirty enough; ``cleanerd compact`` instead wants the log
as compact as Kafka's rules allow at one instant. So the driver:

1. plans afresh and cleans while a dirty range is left (several passes when the offset map is too
   small for the range), treating the log as compacted whatever its policy and ignoring
   ``min.cleanable.dirty.ratio``; the target is the first plan's first uncleanable offset, so a
   writer appending meanwhile cannot keep the loop going. These settling passes never remove
   what they stamp themselves (``_Run._clean`` says why);
2. sweeps the whole cleanable part until it stops changing: Kafka stamps a tombstone's (or an
   empty transaction's marker's) delete horizon, ``now + delete.retention.ms``, on the first pass
   that keeps it and removes it on a later pass past the horizon, so with
   ``delete.retention.ms = 0`` a second pass at the same ``now`` removes them (as two cleanings
   in Kafka would). A sweep is an ordinary ``Cleaner.clean`` whose dirty range is only the last
   offset before the bound: the map then holds at most one key, its latest offset is
   ``bound - 1`` (so every record of the log is judged, none is "beyond the map"), and pass 2
   walks every segment from the log start with one transaction state for the whole pass.
   ``Cleaner.clean`` returns early on an empty dirty range, and ``clean_segments`` with an empty
   map would keep everything, so neither would do.

``roll_active`` first rolls the active segment (``PartitionLog.roll``, under the writer lock: an
empty segment at the log end), so a stopped broker's or an archived partition is compacted whole.
When the run then fails, the roll is taken back while no writer has used the new segment
(``PartitionLog.unroll``): it was the run's, not a writer's, and must not be left behind.
Without ``roll_active`` the active segment is left as it is, and when that leaves nothing
cleanable the summary says why (``note``). ``dry_run`` cleans a plain copy of the partition dir
(and of the log dir's checkpoints) in a temporary dir, so the real files are never opened for
writing (a roll happens on the copy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from cleanerd.compaction._bounds import nothing_cleanable_reason
from cleanerd.compaction._cleaner import Cleaner
from cleanerd.compaction._cleaning_plan import CleaningPlan, cleaner_checkpoint
from cleanerd.compaction._engine import never, plan_log
from cleanerd.compaction._external import PassCleaner, PassFactory
from cleanerd.compaction._ledger import ENGINE_LOCAL, ENGINE_SPARK, record_cleaning, segment_sizes
from cleanerd.compaction._offset_map._map import DEFAULT_LOAD_FACTOR, OffsetMap
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._summary import (
    CompactionProgress,
    CompactionSummary,
    Progress,
    census,
)
from cleanerd.compaction._throttle import Throttler
from cleanerd.format import LONG_MAX
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogSegment,
    PartitionLog,
    StorageError,
    update_offset_checkpoint,
)
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig

DEFAULT_DEDUPE_BUFFER_BYTES = 128 << 20
"""Kafka's ``log.cleaner.dedupe.buffer.size``; one-shot runs give it all to one partition."""

MAX_SWEEPS = 4
"""Sweeps converge in at most three (stamp, remove tombstones and stamp their markers, remove
those); the fourth only confirms. A cap, never reached, against a rule that would not settle."""

LOG_DIR_CHECKPOINTS = (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
"""Log dir files planning reads (first dirty, log start, high watermark): copied for a dry run."""


class CompactionError(Exception):
    """The one-shot compaction cannot go on (for example no pass makes progress)."""


def compact_partition(
    log: PartitionLog,
    config: TopicCleanerConfig,
    strategy: StrategyConfig,
    now_ms: int,
    *,
    map_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
    dry_run: bool = False,
    progress: Progress | None = None,
    abort_check: Callable[[], bool] = never,
    load_factor: float = DEFAULT_LOAD_FACTOR,
    roll_active: bool = False,
    passes: PassFactory | None = None,
    engine: str | None = None,
    decompression_pool: Executor | None = None,
) -> CompactionSummary:
    """Clean ``log`` until it is as compact as the rules allow at ``now_ms``; see the module doc.

    With ``dry_run`` the log's directory is copied and the copy compacted (the caller has opened
    ``log``, which may already have recovered an interrupted swap: ``compact_directory`` avoids
    even that). Errors (``CorruptRecordError`` first of all) propagate; the cleaner checks every
    batch it will rewrite before the first swap, so a log with a corrupt batch is left as it was.
    """
    if dry_run:
        return compact_directory(
            log.directory,
            log.config,
            config,
            strategy,
            now_ms,
            map_bytes=map_bytes,
            dry_run=True,
            progress=progress,
            abort_check=abort_check,
            load_factor=load_factor,
            roll_active=roll_active,
            passes=passes,
            engine=engine,
            decompression_pool=decompression_pool,
        )
    args = (config, strategy, now_ms, map_bytes, load_factor, progress, abort_check, passes)
    return _Run(log, *args, engine=engine, pool=decompression_pool).run(roll_active=roll_active)


def compact_directory(
    directory: Path,
    log_config: LogConfig,
    config: TopicCleanerConfig,
    strategy: StrategyConfig,
    now_ms: int,
    *,
    map_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
    dry_run: bool = False,
    progress: Progress | None = None,
    abort_check: Callable[[], bool] = never,
    load_factor: float = DEFAULT_LOAD_FACTOR,
    temp_root: Path | None = None,
    roll_active: bool = False,
    passes: PassFactory | None = None,
    engine: str | None = None,
    decompression_pool: Executor | None = None,
) -> CompactionSummary:
    """Open the partition dir (or, for a dry run, a copy of it in ``temp_root``) and compact it.

    ``passes`` makes the cleaner of each pass instead of a local ``Cleaner`` (the Spark engine's
    hook: same passes, sweeps and summary, the map built elsewhere). ``engine`` is what the
    erasure ledger entry names (default: ``local``, or ``spark`` with ``passes``); a dry run
    writes its entry into the copy, so none reaches the partition. ``decompression_pool``: the
    local ``Cleaner``'s (``decompression_pool``), which the caller shuts down."""
    directory = Path(directory)
    args = (config, strategy, now_ms, map_bytes, load_factor, progress, abort_check, passes)
    pool = decompression_pool
    if not dry_run:
        log = PartitionLog(directory, log_config)
        try:
            return _Run(log, *args, engine=engine, pool=pool).run(roll_active=roll_active)
        finally:
            log.close()
    with tempfile.TemporaryDirectory(prefix="cleanerd-dry-run-", dir=temp_root) as tmp:
        copy = copy_partition(directory, Path(tmp))
        log = PartitionLog(copy, log_config)
        try:
            summary = _Run(log, *args, engine=engine, pool=pool).run(roll_active=roll_active)
        finally:
            log.close()
    return dataclasses.replace(summary, directory=str(directory), dry_run=True)


def copy_partition(directory: Path, target_logdir: Path) -> Path:
    """Copy a partition dir (file contents and mtimes, never hard links) and its log dir's
    checkpoints into ``target_logdir``; returns the copy's partition dir."""
    copy = target_logdir / directory.name
    shutil.copytree(directory, copy, copy_function=shutil.copy2)
    for name in LOG_DIR_CHECKPOINTS:
        source = directory.parent / name
        if source.is_file():
            shutil.copy2(source, target_logdir / name)
    return copy


class _Run:
    """The state of one compaction: the cleaner, its stats, and the progress reporting."""

    def __init__(
        self,
        log: PartitionLog,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        map_bytes: int,
        load_factor: float,
        progress: Progress | None,
        abort_check: Callable[[], bool],
        passes: PassFactory | None = None,
        *,
        engine: str | None = None,
        pool: Executor | None = None,
    ) -> None:
        self.log = log
        self.engine = engine or (ENGINE_LOCAL if passes is None else ENGINE_SPARK)
        self.span: tuple[int, int] | None = None  # [first dirty, end) the passes covered
        # compacted whatever the policy says; the dirty ratio never holds a one-shot run back
        self.config = dataclasses.replace(config, compact=True, min_cleanable_dirty_ratio=0.0)
        self.strategy = strategy
        self.now_ms = now_ms
        self.io = Throttler(None)  # unlimited: only counts the bytes, for progress
        self.cleaner: PassCleaner = (
            Cleaner(OffsetMap(map_bytes, strategy, load_factor), self.io, decompression_pool=pool)
            if passes is None
            else passes(self.io)
        )
        self.progress = progress
        self.abort_check = abort_check
        self.stats: list[CleanerStats] = []
        self.phase = "clean"
        self.partition = str(log.topic_partition)
        # settling passes: one ms earlier, one ms more retention (see _clean)
        retention = min(self.config.delete_retention_ms + 1, LONG_MAX)
        self.settle_config = dataclasses.replace(self.config, delete_retention_ms=retention)

    def _check(self) -> bool:
        """``abort_check`` for the cleaner: reports progress, then asks the caller's check."""
        if self.progress is not None:
            self.progress(
                CompactionProgress(self.partition, self.phase, len(self.stats), self.io.bytes_total)
            )
        return self.abort_check()

    def _plan(self) -> CleaningPlan:
        self.meta, p = plan_log(self.log, self.config, self.now_ms)
        return p

    def _clean(self, p: CleaningPlan, *, settling: bool) -> int:
        """One pass. Settling passes judge delete horizons at ``now - 1`` with one more ms of
        retention: they stamp the same horizon (``now + delete.retention.ms``) but never remove
        what this run stamped. Under the timestamp and header strategies an older offset can beat
        a newer one; a winning tombstone removed before the range holding its losers is cleaned
        would bring a loser back. The sweeps then judge at ``now`` itself."""
        config, now = (
            (self.settle_config, self.now_ms - 1) if settling else (self.config, self.now_ms)
        )
        result = self.cleaner.clean(self.log, p, config, self.strategy, now, self._check)
        self.stats.append(result.stats)
        start, end = p.first_dirty_offset, result.end_offset
        if end > start:
            if self.span is not None:
                start, end = min(start, self.span[0]), max(end, self.span[1])
            self.span = (start, end)
        return result.end_offset

    def run(self, *, roll_active: bool = False) -> CompactionSummary:
        """The whole compaction; a roll it made is taken back if it fails (``_unroll``)."""
        closed = self.log.active_segment
        started = self.log.roll() if roll_active else closed
        try:
            return self._run(rolled=started is not closed)
        except BaseException:
            if started is not closed:
                self._unroll(closed, started)
            raise

    def _unroll(self, closed: LogSegment, started: LogSegment) -> None:
        """The roll was this run's, not a writer's: a failed run leaves no empty segment behind
        (and ``Repairs.undo`` can then put the closed segment's indexes back). Best effort: the
        run's own error is the one to report."""
        with contextlib.suppress(OSError, StorageError):
            self.log.unroll(closed, started)

    def _run(self, *, rolled: bool) -> CompactionSummary:
        started = time.monotonic()
        before = census(self.log)
        sizes = segment_sizes(self.log)
        p = self._plan()
        reset = None
        if p.checkpoint_invalid:  # Kafka resets it to the log start too, with a warning
            reset = (
                f"cleaner-offset-checkpoint entry {self.meta.checkpoint} is outside the log "
                f"[{self.meta.log_start_offset}, {self.meta.log_end_offset}]: cleaning from "
                f"{p.first_dirty_offset}"
            )
        target = p.first_uncleanable_offset
        while p.first_dirty_offset < min(p.first_uncleanable_offset, target):
            p = dataclasses.replace(
                p, first_uncleanable_offset=min(p.first_uncleanable_offset, target)
            )
            end = self._clean(p, settling=True)
            if end <= p.first_dirty_offset:
                raise CompactionError(
                    f"{self.partition}: a pass from offset {p.first_dirty_offset} made no progress"
                )
            p = self._plan()
        upper = min(p.first_uncleanable_offset, target)
        sweeps = self._sweep(p, upper) if upper > self.log.log_start_offset else 0
        bound = note = None
        if upper <= self.log.log_start_offset and before.records:
            found, note = nothing_cleanable_reason(
                self.meta, self.config, self.now_ms, before.records
            )
            bound = found.value
        after = census(self.log)
        total = CleanerStats.total(self.stats)
        ledger_error = None
        if self.span is not None:
            ledger_error = record_cleaning(
                self.log,
                first_dirty=self.span[0],
                end=self.span[1],
                stats=total,
                before=sizes,
                engine=self.engine,
                strategy=self.strategy,
            )
        return CompactionSummary(
            partition=self.partition,
            directory=str(self.log.directory),
            dry_run=False,
            strategy=str(self.strategy.strategy),
            records_in=before.records,
            records_out=after.records,
            bytes_in=before.bytes,
            bytes_out=after.bytes,
            batches_in=before.batches,
            batches_out=after.batches,
            passes=len(self.stats),
            sweeps=sweeps,
            seconds=time.monotonic() - started,
            tombstones_removed=total.tombstones_removed,
            tombstones_expired=total.tombstones_expired,
            tombstones_superseded=total.tombstones_superseded,
            markers_removed=total.markers_removed,
            aborted_records_removed=total.aborted_records_removed,
            unkeyed_records_removed=total.invalid_messages_read,
            anomalous_version_headers=total.anomalous_version_headers,
            first_offset=self.log.log_start_offset,
            last_offset=self.log.log_end_offset - 1,
            first_uncleanable_offset=upper,
            checkpoint=cleaner_checkpoint(self.log),
            io_bytes=self.io.bytes_total,
            buffer_utilization=total.buffer_utilization,
            rolled_active=rolled,
            bound=bound,
            note=note,
            txn_index_problems=total.txn_index_problems,
            checkpoint_reset=reset,
            ledger_error=ledger_error,
        )

    def _sweep(self, p: CleaningPlan, upper: int) -> int:
        """Whole-log passes until the log stops changing; returns how many ran.

        A sweep writes ``upper`` as the checkpoint; an entry that was already beyond it (a
        checkpoint inside the segment holding the bound) is put back.
        """
        self.phase = "sweep"
        checkpoint = cleaner_checkpoint(self.log)
        sweep = dataclasses.replace(p, first_dirty_offset=upper - 1, first_uncleanable_offset=upper)
        mark = census(self.log).fingerprint
        count = 0
        while count < MAX_SWEEPS:
            self._clean(sweep, settling=False)
            count += 1
            now = census(self.log).fingerprint
            if now == mark:
                break
            mark = now
        if checkpoint is not None and checkpoint > upper:
            update_offset_checkpoint(
                self.log.directory.parent / CLEANER_OFFSET_CHECKPOINT,
                {self.log.topic_partition: checkpoint},
            )
        return count
