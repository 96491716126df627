"""One cleaning as a worker runs it, in its process or a thread: open, plan afresh, clean once,
close.

This is the daemon's counterpart of Kafka's ``CleanerThread.cleanLog``: one ``doClean`` over the
dirty range the log has now (the manager's plan came from cached metadata and may be stale), then,
for ``compact,delete`` topics, Kafka's retention deletion. Everything here is synchronous and runs
off the event loop, in the worker's cleaning process (``service._processes``) or in a thread.

Each worker keeps one ``Cleaner`` (and so one offset map) and reuses it while the lease size and
the strategy stay the same: a fresh map faults its pages in again, which costs more than a small
clean.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from cleanerd.compaction import Cleaner, CleanerStats, OffsetMap, Throttler, clean_once, open_log
from cleanerd.storage import PartitionLog, delete_old_segments
from cleanerd.topics import TopicSettings


@dataclass(frozen=True)
class JobResult:
    """What one cleaning did: the cleaner's stats, its range, and retention's deletions."""

    stats: CleanerStats
    first_dirty_offset: int
    end_offset: int
    seconds: float
    segments_deleted: int = 0
    bytes_deleted: int = 0
    engine: str = "local"  # or "spark" (service._spark_engine)
    plan: str | None = None  # a Spark cleaning's plan, A or B
    ledger_error: str | None = None  # its erasure ledger entry was not written: why


class CleanerSlot:
    """A worker's cleaner, rebuilt only when the map size or the strategy changes."""

    def __init__(self, decompression: Executor | None = None) -> None:
        self.decompression = decompression  # shared by the workers (service._threads)
        self._cleaner: Cleaner | None = None
        self._key: tuple[object, ...] = ()

    def cleaner(
        self, map_bytes: int, settings: TopicSettings, load_factor: float, throttler: Throttler
    ) -> Cleaner:
        key = (map_bytes, settings.strategy, load_factor, id(throttler), id(self.decompression))
        if self._cleaner is None or key != self._key:
            self._cleaner = None  # let the old map go before the new one is allocated
            self._cleaner = Cleaner(
                OffsetMap(map_bytes, settings.strategy, load_factor),
                throttler,
                decompression_pool=self.decompression,
            )
            self._key = key
        return self._cleaner


def run_clean(
    directory: Path,
    settings: TopicSettings,
    slot: CleanerSlot,
    *,
    map_bytes: int,
    load_factor: float,
    throttler: Throttler,
    now_ms: int,
    abort_check: Callable[[], bool],
) -> JobResult:
    """Clean the partition in ``directory`` once at ``now_ms``; errors propagate unchanged
    (``CleaningAbortedError`` when ``abort_check`` said stop; the log is then as it was or
    with some groups swapped, never with a ``.cleaned`` file left)."""
    started = time.monotonic()
    with open_log(directory, settings.log) as log:
        cleaner = slot.cleaner(map_bytes, settings, load_factor, throttler)
        p, result = clean_once(
            log, cleaner, settings.cleaner, settings.strategy, now_ms, abort_check
        )
        deleted, bytes_deleted = _retention(log, settings, now_ms)
    return JobResult(
        stats=result.stats,
        first_dirty_offset=p.first_dirty_offset,
        end_offset=result.end_offset,
        seconds=time.monotonic() - started,
        segments_deleted=deleted,
        bytes_deleted=bytes_deleted,
        ledger_error=result.ledger_error,
    )


def _retention(log: PartitionLog, settings: TopicSettings, now_ms: int) -> tuple[int, int]:
    """Kafka's deleteOldSegments after a cleaning of a ``compact,delete`` topic: (segments,
    bytes) deleted."""
    if not settings.cleaner.delete:
        return 0, 0
    r = delete_old_segments(log, settings.retention, now_ms)
    return r.segments_deleted, r.bytes_deleted


def apply_retention(directory: Path, settings: TopicSettings, now_ms: int) -> tuple[int, int]:
    """``_retention`` on the partition in ``directory`` (after a Spark cleaning)."""
    if not settings.cleaner.delete:
        return 0, 0
    with open_log(directory, settings.log) as log:
        return _retention(log, settings, now_ms)


def roll_if_idle(
    directory: Path,
    settings: TopicSettings,
    now_ms: int,
    lead_ms: int = 0,
    active_base: int | None = None,
) -> bool:
    """Roll the active segment ``lead_ms`` before its first record is ``max.compaction.lag.ms``
    old, or later (under the writer lock, and only the segment of ``active_base`` when given),
    so the cleaning that follows removes what it supersedes within the lag."""
    log = PartitionLog(directory, settings.log)
    try:
        lag = settings.cleaner.max_compaction_lag_ms
        return log.roll_if_idle(now_ms, lag, lead_ms=lead_ms, active_base=active_base)
    finally:
        log.close()
