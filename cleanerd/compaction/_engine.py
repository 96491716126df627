"""The engine's front door: open a partition, plan it as Kafka's cleaner would, clean it once.

Every driver runs the same sequence (the daemon's worker thread, ``cleanerd compact``, the
benchmarks, the tests, and next the snapshot and Spark drivers): open the log (recovery runs),
read its metadata and cleaner checkpoint, plan at ``now_ms``, run one ``Cleaner.clean`` over the
plan's range, close. These few functions are that sequence, written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cleanerd.compaction._cleaner import Cleaner, CleanResult
from cleanerd.compaction._cleaning_plan import CleaningPlan, LogMeta, cleaner_checkpoint, plan
from cleanerd.compaction._ledger import ENGINE_LOCAL, record_cleaning, segment_sizes
from cleanerd.format import limit_decompression
from cleanerd.storage import PartitionLog, wall_clock_ms
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig

__all__ = ["clean_once", "never", "open_log", "plan_log"]


@contextmanager
def open_log(
    directory: Path, config: LogConfig | None = None, *, clock: Callable[[], int] = wall_clock_ms
) -> Iterator[PartitionLog]:
    """The partition at ``directory``, opened (interrupted swaps recovered, indexes checked)
    and closed when the block ends, whatever happens in it. Batches read in the block are
    decompressed within the topic's ``max.decompressed.message.bytes``."""
    bound = (config or LogConfig()).max_decompressed_message_bytes
    with limit_decompression(bound):
        log = PartitionLog(directory, config, clock=clock)
        try:
            yield log
        finally:
            log.close()


def plan_log(
    log: PartitionLog, config: TopicCleanerConfig, now_ms: int
) -> tuple[LogMeta, CleaningPlan]:
    """The log's metadata (with its cleaner checkpoint) and Kafka's plan for it at ``now_ms``.
    The producer-state walk behind the plan's LSO is kept by ``log`` for the clean."""
    meta = LogMeta.from_log(log, cleaner_checkpoint(log))
    return meta, plan(meta, config, now_ms)


def never() -> bool:
    """The default ``abort_check``: a cleaning nobody will ask to stop."""
    return False


def clean_once(
    log: PartitionLog,
    cleaner: Cleaner,
    config: TopicCleanerConfig,
    strategy: StrategyConfig,
    now_ms: int,
    abort_check: Callable[[], bool] = never,
    *,
    keep_tombstones_from: int | None = None,
) -> tuple[CleaningPlan, CleanResult]:
    """Plan ``log`` at ``now_ms`` and run one cleaning over the plan's range (nothing when the
    range is empty): Kafka's ``cleanLog`` for one log, whatever its dirty ratio. Tombstones
    reaching ``keep_tombstones_from`` stay (``Cleaner.clean``: by default, those its snapshots
    need). A cleaning that swapped segments in gets its erasure ledger entry (``_ledger``)."""
    _, p = plan_log(log, config, now_ms)
    before = segment_sizes(log)
    result = cleaner.clean(
        log, p, config, strategy, now_ms, abort_check, keep_tombstones_from=keep_tombstones_from
    )
    problem = record_cleaning(
        log,
        first_dirty=p.first_dirty_offset,
        end=result.end_offset,
        stats=result.stats,
        before=before,
        engine=ENGINE_LOCAL,
        strategy=strategy,
    )
    return p, result if problem is None else dataclasses.replace(result, ledger_error=problem)
