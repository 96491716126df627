"""Choosing the next log to clean, and what a worker gets and gives back.

Pure functions over plans, split from the manager (which keeps the states): the order (an
admin's clean request first, then the logs due by their deadline, earliest deadline first, then
the rest in ``plan.rank``'s order), Kafka's grab figures (max dirty ratio, max compaction delay,
logs past the max lag), and the cheap test for retention.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cleanerd.compaction import CleanerStats, CleaningPlan, LogMeta, rank
from cleanerd.scheduling._deadlines import Leads, is_due
from cleanerd.scheduling._state import CleaningTotals
from cleanerd.storage import TopicPartition
from cleanerd.topics import TopicSettings


@dataclass(frozen=True, slots=True)
class Grab:
    """A log handed to a worker: where it is, how to clean it, and how big a map to ask for."""

    tp: TopicPartition
    directory: Path
    log_dir: Path
    settings: TopicSettings
    plan: CleaningPlan
    map_bytes: int  # offset map size for the dirty records (sizing.map_bytes_for)
    dirty_records: int
    max_compaction_delay_ms: int  # KIP-354: the largest delay among this grab's candidates
    requested: bool = False  # chosen because of an admin clean request


def add_clean(totals: CleaningTotals, stats: CleanerStats, *, spark: bool) -> CleaningTotals:
    """The daemon's totals after one more successful clean (``spark``: done by Spark)."""
    return dataclasses.replace(
        totals,
        cleanings=totals.cleanings + 1,
        spark_cleanings=totals.spark_cleanings + spark,
        bytes_read=totals.bytes_read + stats.bytes_read,
        bytes_written=totals.bytes_written + stats.bytes_written,
        records_removed=totals.records_removed + stats.records_removed,
        tombstones_expired=totals.tombstones_expired + stats.tombstones_expired,
        tombstones_superseded=totals.tombstones_superseded + stats.tombstones_superseded,
        markers_removed=totals.markers_removed + stats.markers_removed,
        unkeyed_records_removed=totals.unkeyed_records_removed + stats.invalid_messages_read,
        txn_indexes_rebuilt=totals.txn_indexes_rebuilt + stats.txn_indexes_rebuilt,
    )


class _Job(Protocol):
    @property
    def stats(self) -> CleanerStats: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def engine(self) -> str: ...


@dataclass(frozen=True, slots=True)
class CleanOutcome:
    """What a worker reports after a successful clean (``CleanerManager.done``)."""

    stats: CleanerStats
    end_offset: int  # the new cleaner checkpoint (first dirty offset of the next clean)
    seconds: float  # wall time of the clean
    engine: str = "local"  # or "spark": the daemon handed the partition to Spark

    @classmethod
    def from_job(cls, job: _Job) -> CleanOutcome:
        """From anything carrying ``stats``, ``end_offset``, ``seconds`` and ``engine``."""
        return cls(job.stats, job.end_offset, job.seconds, job.engine)


@dataclass(frozen=True, slots=True)
class GrabFigures:
    """Kafka's LogCleanerManager gauge and KIP-354's PreCleanStats of one grab."""

    max_dirty_ratio: float  # among candidates with bytes, before the threshold
    max_compaction_delay_ms: int  # among all candidates
    logs_compacted_by_max_lag: int  # candidates past max.compaction.lag.ms
    cleanable_logs: int  # candidates passing Kafka's cleanable test


def due_key(p: CleaningPlan) -> tuple[int, float, float, TopicPartition]:
    """The order of the logs due: earliest deadline, then KIP-354's must-clean ratio, the
    dirty ratio, the name (unique). Only for plans with a deadline (``is_due`` says so)."""
    assert p.deadline_ms is not None
    return (p.deadline_ms, -p.must_clean_ratio, -p.dirty_ratio, p.topic_partition)


def choose(
    plans: Sequence[CleaningPlan],
    requested: Collection[TopicPartition],
    leads: Mapping[TopicPartition, Leads],
    now_ms: int,
) -> tuple[TopicPartition | None, GrabFigures]:
    """The log to clean among the candidates' plans, and the grab's figures.

    A requested log goes first (by the order below if it is cleanable anyway, else the smallest
    name); then the logs due (``deadlines.is_due``: overdue, or their deadline nearer than their
    lead), earliest deadline first (then KIP-354's must-clean ratio, the dirty ratio, the
    name), whatever their dirty ratio; then ``rank``'s order of the rest, by dirty ratio. Every
    log KIP-354 calls overdue is due, so none waits behind a dirty one.
    """
    due = sorted(
        due_key(p)
        for p in plans
        if p.topic_partition in leads and is_due(p, leads[p.topic_partition], now_ms)
    )
    ranked = [tp for *_, tp in due]
    first = set(ranked)
    ranked += [p.topic_partition for p in rank(plans) if p.topic_partition not in first]
    figures = GrabFigures(
        max_dirty_ratio=max((p.dirty_ratio for p in plans if p.total_bytes), default=0.0),
        max_compaction_delay_ms=max((p.compaction_delay_ms for p in plans), default=0),
        logs_compacted_by_max_lag=sum(1 for p in plans if p.need_compaction_now),
        cleanable_logs=len(ranked),
    )
    chosen = next((tp for tp in ranked if tp in requested), min(requested, default=None))
    if chosen is None and ranked:
        chosen = ranked[0]
    return chosen, figures


def retention_due(log: LogMeta, settings: TopicSettings, now_ms: int) -> bool:
    """Kafka's deleteOldSegments would delete the oldest inactive segment (by time, by size, or
    because it lies below the log start): a cheap test so only logs with work get opened."""
    if not settings.cleaner.delete or len(log.segments) < 2:
        return False
    first = log.segments[0]
    if first.next_offset <= log.log_start_offset:
        return True
    ms, size = settings.retention.retention_ms, settings.retention.retention_bytes
    if ms >= 0 and now_ms - first.largest_timestamp > ms:
        return True
    return size >= 0 and log.size_bytes - size >= first.size_bytes
