"""The daemon at one instant, for metrics, ``/status`` and the demo table.

Everything that leaves the daemon gets a frozen ``DaemonStatus`` of copies (partition statuses
from the manager, worker figures, budget and throttle), so a scrape never sees a half-updated
record and never touches asyncio objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cleanerd.scheduling import CleaningTotals, PartitionStatus
from cleanerd.service._lateness import DeadlineFigures


@dataclass(frozen=True)
class WorkerStatus:
    """One worker coroutine: alive or dead, what it cleans, and its last pass's figures
    (Kafka's gauges are maxima over the threads' last passes)."""

    worker_id: int
    alive: bool = True
    partition: str | None = None  # the partition it is cleaning now
    engine: str | None = None  # what cleans it: "local" or "spark"
    spark_job: dict[str, Any] | None = None  # a Spark cleaning's progress (daemon_job.JobProgress)
    last_buffer_utilization: float = 0.0
    last_bytes_read: int = 0
    last_bytes_written: int = 0
    last_clean_seconds: float = 0.0
    last_max_compaction_delay_ms: int = 0  # of the grab that gave it its last log
    pid: int | None = None  # its cleaning process (cleanerd.cleaner.processes), once started


@dataclass(frozen=True)
class DaemonStatus:
    """Everything the metrics, ``/status`` and the demo table show, at one instant."""

    now_ms: int
    partitions: tuple[PartitionStatus, ...]  # copies
    workers: tuple[WorkerStatus, ...] = ()
    totals: CleaningTotals = field(default_factory=CleaningTotals)
    # Kafka LogCleanerManager gauges, from the last grab
    max_dirty_ratio: float = 0.0
    last_run_ms: int | None = None  # wall clock of the last grab attempt
    logs_compacted_by_max_lag: int = 0  # KIP-354: logs that needed compaction now, last cycle
    # compaction deadlines: misses, cleanings of overdue logs, each partition's next deadline
    deadlines: DeadlineFigures = field(default_factory=DeadlineFigures)
    # budget and throttle
    dedupe_budget_bytes: int = 0
    dedupe_budget_in_use_bytes: int = 0
    throttle_sleep_seconds_total: float = 0.0
    last_success_ms: int | None = None
    per_partition_metrics: bool = True
    ready: bool = False
    stopping: bool = False
    kernels: str = "loading"  # "loaded" or "failed: <error>": the workers start after either

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
            "kernels": self.kernels,
            "workers": [dataclasses.asdict(w) for w in self.workers],
            "dead_workers": self.dead_workers,
            "totals": dataclasses.asdict(self.totals),
            "max_dirty_ratio": self.max_dirty_ratio,
            "max_compaction_delay_ms": self.max_compaction_delay_ms,
            "logs_compacted_by_max_lag": self.logs_compacted_by_max_lag,
            "deadlines": self.deadlines.to_json(),
            "last_run_ms": self.last_run_ms,
            "last_success_ms": self.last_success_ms,
            "dedupe_budget_bytes": self.dedupe_budget_bytes,
            "dedupe_budget_in_use_bytes": self.dedupe_budget_in_use_bytes,
            "uncleanable_partitions": len(self.uncleanable),
            "partitions": [p.to_json() for p in self.partitions],
        }
