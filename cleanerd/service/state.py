"""The daemon's view of its partitions and workers: plain values shared by manager, metrics, HTTP.

``PartitionStatus`` is the manager's mutable record of one partition (Kafka's LogCleanerManager
keeps the same facts in ``inProgress``, ``uncleanablePartitions`` and its checkpoints). Everything
that leaves the manager (``/status``, the metrics collector, the demo table) gets a frozen
``DaemonSnapshot`` of copies, so a scrape never sees a half-updated record and never touches
asyncio objects.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleanerd.storage.topic_partition import TopicPartition


class CleaningState(enum.Enum):
    """Kafka's ``LogCleaningState`` plus ``idle`` (no entry in Kafka's ``inProgress`` map)."""

    IDLE = "idle"
    IN_PROGRESS = "in_progress"  # a worker is cleaning it
    ABORTED = "aborted"  # asked to stop; becomes paused when the worker lets go
    PAUSED = "paused"  # paused(n): n pause requests outstanding


@dataclass
class PartitionStatus:
    """One partition as the manager knows it; the manager is its only writer."""

    tp: TopicPartition
    log_dir: Path
    directory: Path
    compacted: bool = False  # cleanup.policy contains compact (else only retention applies)
    state: CleaningState = CleaningState.IDLE
    paused_count: int = 0  # Kafka's LogCleaningPaused(n)
    uncleanable: bool = False
    # from the last plan (refresh)
    size_bytes: int = 0
    clean_bytes: int = 0
    cleanable_bytes: int = 0
    dirty_ratio: float = 0.0
    must_clean_ratio: float = 0.0
    compaction_delay_ms: int = 0
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    overdue: bool = False
    cleanable: bool = False  # Kafka's test (overdue, or dirtier than min.cleanable.dirty.ratio)
    # history
    cleanings: int = 0
    last_clean_ms: int | None = None  # wall clock at the end of the last successful cleaning
    last_clean_seconds: float | None = None
    last_error: str | None = None
    failures: int = 0  # consecutive failed attempts; 0 after a success
    retry_at_ms: int | None = None  # no new attempt before this (exponential backoff)
    clean_requested: bool = False  # POST .../clean: clean at the next grab whatever the ratio

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields for ``/status``."""
        out = dataclasses.asdict(self)
        out["tp"] = str(self.tp)
        out["topic"] = self.tp.topic
        out["partition"] = self.tp.partition
        out["log_dir"] = str(self.log_dir)
        out["directory"] = str(self.directory)
        out["state"] = "uncleanable" if self.uncleanable else self.state.value
        return out


@dataclass(frozen=True)
class WorkerStatus:
    """One worker coroutine: alive or dead, what it cleans, and its last pass's figures
    (Kafka's gauges are maxima over the threads' last passes)."""

    worker_id: int
    alive: bool = True
    partition: str | None = None  # the partition it is cleaning now
    last_buffer_utilization: float = 0.0
    last_bytes_read: int = 0
    last_bytes_written: int = 0
    last_clean_seconds: float = 0.0
    last_max_compaction_delay_ms: int = 0  # of the grab that gave it its last log


@dataclass(frozen=True)
class CleaningTotals:
    """Cumulative counters since the daemon started (they become Prometheus counters)."""

    cleanings: int = 0  # successful cleanings
    failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0
    unkeyed_records_removed: int = 0
    txn_indexes_rebuilt: int = 0  # .txnindex files that disagreed with the ABORT markers
    segments_rolled: int = 0  # idle active segments rolled past max.compaction.lag.ms
    segments_deleted: int = 0  # by retention (compact,delete)
    worker_restarts: int = 0


@dataclass(frozen=True)
class DaemonSnapshot:
    """Everything the metrics, ``/status`` and the demo table show, at one instant."""

    now_ms: int
    partitions: tuple[PartitionStatus, ...]  # copies
    workers: tuple[WorkerStatus, ...] = ()
    totals: CleaningTotals = field(default_factory=CleaningTotals)
    # Kafka LogCleanerManager gauges, from the last grab
    max_dirty_ratio: float = 0.0
    last_run_ms: int | None = None  # wall clock of the last grab attempt
    logs_compacted_by_max_lag: int = 0  # KIP-354: logs that needed compaction now, last cycle
    # budget and throttle
    dedupe_budget_bytes: int = 0
    dedupe_budget_in_use_bytes: int = 0
    throttle_sleep_seconds_total: float = 0.0
    last_success_ms: int | None = None
    per_partition_metrics: bool = True
    ready: bool = False
    stopping: bool = False

    @property
    def dead_workers(self) -> int:
        return sum(1 for w in self.workers if not w.alive)

    @property
    def uncleanable(self) -> tuple[PartitionStatus, ...]:
        return tuple(p for p in self.partitions if p.uncleanable)

    @property
    def max_compaction_delay_ms(self) -> int:
        """Kafka's max-compaction-delay-secs source: max over workers of their last grab's delay."""
        return max((w.last_max_compaction_delay_ms for w in self.workers), default=0)

    def to_json(self) -> dict[str, Any]:
        """``/status``: the daemon's summary and every partition."""
        return {
            "now_ms": self.now_ms,
            "ready": self.ready,
            "stopping": self.stopping,
            "workers": [dataclasses.asdict(w) for w in self.workers],
            "dead_workers": self.dead_workers,
            "totals": dataclasses.asdict(self.totals),
            "max_dirty_ratio": self.max_dirty_ratio,
            "max_compaction_delay_ms": self.max_compaction_delay_ms,
            "logs_compacted_by_max_lag": self.logs_compacted_by_max_lag,
            "last_run_ms": self.last_run_ms,
            "last_success_ms": self.last_success_ms,
            "dedupe_budget_bytes": self.dedupe_budget_bytes,
            "dedupe_budget_in_use_bytes": self.dedupe_budget_in_use_bytes,
            "uncleanable_partitions": len(self.uncleanable),
            "partitions": [p.to_json() for p in self.partitions],
        }
