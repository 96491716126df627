"""A partition's cleaning state as the manager keeps it, and the cleaning totals.

``PartitionStatus`` is the manager's mutable record of one partition (Kafka's LogCleanerManager
keeps the same facts in ``inProgress``, ``uncleanablePartitions`` and its checkpoints). Readers
outside the manager get copies, so none of them sees a half-updated record.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cleanerd.storage import TopicPartition


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
    # deadline scheduling (scheduling._deadlines): when the oldest dirty record must have been
    # cleaned (compaction.compaction_deadline_ms; None: no max.compaction.lag.ms or no timestamp),
    # how long its next cleaning is expected to take, margin included, and how long before the
    # deadline it is taken: that plus the workers' time for the logs due before it (uncapped)
    deadline_ms: int | None = None
    expected_clean_ms: int = 0
    lead_ms: int = 0
    # history
    cleanings: int = 0
    last_clean_ms: int | None = None  # wall clock at the end of the last successful cleaning
    last_clean_seconds: float | None = None
    last_clean_engine: str | None = None  # "local" or "spark"
    last_error: str | None = None
    failures: int = 0  # consecutive failed attempts; 0 after a success
    retry_at_ms: int | None = None  # no new attempt before this (exponential backoff)
    clean_requested: bool = False  # POST .../clean: clean at the next grab whatever the ratio
    # KIP-630 snapshots: the newest one the daemon took (end offset, wall clock)
    latest_snapshot_end_offset: int | None = None
    latest_snapshot_ms: int | None = None

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
class CleaningTotals:
    """Cumulative counters since the daemon started (they become Prometheus counters)."""

    cleanings: int = 0  # successful cleanings
    failures: int = 0
    spark_cleanings: int = 0  # of those, the ones the daemon handed to Spark
    spark_failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_expired: int = 0  # won their key, but their delete horizon had passed
    tombstones_superseded: int = 0  # a newer record of their key won
    markers_removed: int = 0
    unkeyed_records_removed: int = 0
    txn_indexes_rebuilt: int = 0  # .txnindex files that disagreed with the ABORT markers
    segments_rolled: int = 0  # active segments rolled before their max.compaction.lag.ms deadline
    segments_deleted: int = 0  # by retention (compact,delete)
    worker_restarts: int = 0
    snapshots: int = 0  # KIP-630 snapshots taken
    snapshot_failures: int = 0
    snapshot_bytes: int = 0  # bytes of the snapshot files written
    snapshot_seconds: float = 0.0  # time spent taking them

    @property
    def tombstones_removed(self) -> int:
        return self.tombstones_expired + self.tombstones_superseded
