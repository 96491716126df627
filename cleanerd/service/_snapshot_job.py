"""A worker's snapshot job (KIP-630): take the snapshot, keep the newest N, truncate if asked.

Runs in a worker thread like a cleaning (``asyncio.to_thread``), with the offset map memory the
worker leased from the shared dedupe budget. The partition is marked in progress meanwhile, so
no cleaning runs on it; a writer may go on appending (the snapshot ends at the high watermark,
capped at the last stable offset, and reads nothing past it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from cleanerd.compaction import open_log
from cleanerd.snapshot import (
    SnapshotResult,
    TruncateResult,
    apply_retention,
    codec_for,
    create_snapshot,
    truncate_log,
)
from cleanerd.topics import TopicSettings


@dataclass(frozen=True)
class SnapshotJobResult:
    """What one snapshot job did."""

    taken: SnapshotResult
    seconds: float
    deleted: tuple[Path, ...] = ()  # older snapshots past snapshot.retention.count
    truncated: TruncateResult | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def run_snapshot(directory: Path, settings: TopicSettings, *, map_bytes: int) -> SnapshotJobResult:
    """Snapshot the partition in ``directory`` with its topic's settings; errors propagate."""
    started = time.monotonic()
    warnings: list[str] = []
    snap = settings.snapshot
    with open_log(directory, settings.log) as log:
        taken = create_snapshot(
            log,
            settings.strategy,
            compression=codec_for(snap.compression_type),
            budget_bytes=map_bytes,
            warn=warnings.append,
        )
        deleted = tuple(apply_retention(directory, snap.retention_count))
        truncated = truncate_log(log) if snap.truncate_log else None
    return SnapshotJobResult(taken, time.monotonic() - started, deleted, truncated, tuple(warnings))
