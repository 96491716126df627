"""Snapshot retention (``snapshot.retention.count``) and log truncation (``snapshot.truncate.log``).

Truncation is KIP-630's model: a snapshot replaces the log's prefix, so whole segments entirely
below its end offset may go and the log start offset moves up. cleanerd truncates to the *oldest*
valid snapshot it keeps, not the newest: every kept snapshot can then still start a state, so a
newest one damaged later (bit rot, a bad copy) costs nothing but a longer replay. It never passes
the cleaner checkpoint (the cleaner has not looked at what lies beyond), the last stable offset
(an open transaction may still abort) or the high watermark (a replica may not have it).
Snapshots that end below the new log start (only damaged ones can) are deleted with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cleanerd.compaction import cleaner_checkpoint
from cleanerd.snapshot._format import SnapshotError, SnapshotReader
from cleanerd.storage import PartitionLog, delete_segments_below, delete_snapshot, list_snapshots


def apply_retention(partition_dir: Path, keep: int) -> list[Path]:
    """Delete the snapshots older than the newest ``keep`` valid ones (at least one is kept).

    Only valid snapshots count: a damaged newest one (bit rot, a bad copy, a cut batch) must
    not push out the valid one a reader would fall back to. Invalid ones newer than that are
    left for the operator (``verify`` and ``snapshot list`` name them)."""
    snapshots = list_snapshots(partition_dir)
    valid = 0
    cut = 0  # snapshots[:cut] go
    for i in range(len(snapshots) - 1, -1, -1):
        if valid >= max(keep, 1):
            cut = i + 1
            break
        try:
            SnapshotReader(snapshots[i][1]).close()
        except SnapshotError:
            continue
        valid += 1
    doomed = [path for _, path in snapshots[:cut]]
    for path in doomed:
        delete_snapshot(path)
    return doomed


@dataclass(frozen=True, slots=True)
class TruncateResult:
    """What a truncation removed and where the log now starts."""

    limit: int
    segments_deleted: int
    bytes_deleted: int
    log_start_offset: int
    snapshots_deleted: tuple[Path, ...] = ()


def truncation_limit(log: PartitionLog) -> int | None:
    """The offset the log may be truncated to: the oldest valid snapshot's end, capped by the
    cleaner checkpoint, the last stable offset and the high watermark (None: no snapshot)."""
    for sid, path in list_snapshots(log.directory):
        try:
            SnapshotReader(path).close()
        except SnapshotError:
            continue
        checkpoint = cleaner_checkpoint(log)
        cleaned = log.log_start_offset if checkpoint is None else checkpoint
        return min(sid.end_offset, cleaned, log.last_stable_offset(), log.high_watermark)
    return None


def truncate_log(log: PartitionLog) -> TruncateResult | None:
    """Delete the whole segments the snapshots replace (see the module doc)."""
    limit = truncation_limit(log)
    if limit is None:
        return None
    result = delete_segments_below(log, limit)
    start = log.log_start_offset
    stale = [p for sid, p in list_snapshots(log.directory) if sid.end_offset < start]
    for path in stale:
        delete_snapshot(path)
    return TruncateResult(limit, result.segments_deleted, result.bytes_deleted, start, tuple(stale))
