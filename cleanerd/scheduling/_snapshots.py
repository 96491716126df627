"""When the daemon takes a snapshot of a partition (KIP-630), and what it remembers of them.

A topic with ``snapshot.enable`` gets a new snapshot once more than ``snapshot.minimum.records``
offsets lie between its newest snapshot's end (0 without one) and the end a snapshot may reach
now (the last stable offset, as the last survey planned it: ``snapshot._build`` caps it at the
high watermark too). Worker jobs under the shared dedupe budget take them, after the overdue
cleanings (``CleanerManager.grab_snapshot``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cleanerd.compaction import LogMeta
from cleanerd.storage import TopicPartition, list_snapshots
from cleanerd.topics import TopicSettings


def latest_snapshot_end(directory: Path) -> int | None:
    """End offset of the newest snapshot file (validated when it is used, not here)."""
    found = list_snapshots(directory)
    return found[-1][0].end_offset if found else None


def snapshot_due(meta: LogMeta, settings: TopicSettings, snapshot_end: int | None) -> bool:
    """Whether the partition needs a new snapshot now (see the module doc); ``snapshot_end`` is
    the newest snapshot's end as the survey found it (``latest_snapshot_end``)."""
    if not settings.snapshot.enable:
        return False
    reachable = min(meta.last_stable_offset, meta.log_end_offset)
    since = reachable - (snapshot_end or meta.log_start_offset)
    return since > settings.snapshot.minimum_records


@dataclass(frozen=True)
class SnapshotGrab:
    """A partition handed to a worker for a snapshot, marked in progress meanwhile."""

    tp: TopicPartition
    directory: Path
    settings: TopicSettings
    map_bytes: int
    records: int  # offsets since the newest snapshot: an upper bound on the keys to map
