"""Kafka's retention for logs whose ``cleanup.policy`` contains ``delete``: the rules.

For ``compact,delete`` topics the cleaner also deletes whole old segments by time
(``retention.ms``) and size (``retention.bytes``), as Kafka's ``UnifiedLog.deleteOldSegments``
does; -1 means no limit. The settings (``RetentionConfig``) are part of ``cleanerd.topics._model``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from cleanerd.storage._checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    fsync_dir,
    read_offset_checkpoint,
    update_offset_checkpoint,
    write_leader_epoch_checkpoint,
)
from cleanerd.storage._files import DELETED_SUFFIX, SNAPSHOT_SUFFIX, segment_file
from cleanerd.storage._leader_epoch import LeaderEpochCache
from cleanerd.storage._partition import PartitionLog
from cleanerd.storage._segment import LogSegment
from cleanerd.storage._segment_times import largest_timestamp_ms
from cleanerd.topics import RetentionConfig


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one ``delete_old_segments`` run removed, and the log start offset after it."""

    segments_deleted: int
    bytes_deleted: int
    log_start_offset: int


Predicate = Callable[[LogSegment, LogSegment | None], bool]


def delete_old_segments(
    log: PartitionLog, retention: RetentionConfig, now_ms: int
) -> RetentionResult:
    """Kafka's ``deleteOldSegments`` for a log whose ``cleanup.policy`` contains ``delete``.

    Three passes in Kafka's order, each over the oldest segments and stopping at the first that
    does not qualify: segments wholly below the log start offset, then by ``retention.bytes``
    (whole segments while they fit the excess), then by ``retention.ms`` (largest timestamp
    older than ``now_ms - retention.ms``). A segment whose end is above the high watermark is
    never deleted. When every segment qualifies, the active one included, the log is rolled
    first (as Kafka does), so the active segment itself is never deleted and the log keeps its
    end offset. Runs under the writer lock.
    """
    deleted = size = 0
    with log.writer_lock:
        for rule in (_start_breached, _size_breached, _time_breached):
            predicate = rule(log, retention, now_ms)
            if predicate is not None:
                count, nbytes = _delete(log, _deletable(log, predicate))
                deleted, size = deleted + count, size + nbytes
        return RetentionResult(deleted, size, log.log_start_offset)


def delete_segments_below(log: PartitionLog, limit: int) -> RetentionResult:
    """Delete the oldest whole segments holding only offsets below ``limit`` (never the active
    one), with ``delete_old_segments``' crash safety: the log start offset is checkpointed
    before any file goes. KIP-630's truncation: a snapshot ending at ``limit`` replaces them."""
    with log.writer_lock:
        doomed = _deletable(log, lambda seg, nxt: nxt is not None and nxt.base_offset <= limit)
        count, nbytes = _delete(log, doomed)
        return RetentionResult(count, nbytes, log.log_start_offset)


def _start_breached(log: PartitionLog, retention: RetentionConfig, now_ms: int) -> Predicate:
    start = log.log_start_offset
    return lambda seg, nxt: nxt is not None and nxt.base_offset <= start


def _size_breached(log: PartitionLog, retention: RetentionConfig, now_ms: int) -> Predicate | None:
    limit = retention.retention_bytes
    total = sum(s.refresh_size() for s in log.segments)
    if limit < 0 or total < limit:
        return None
    excess = total - limit

    def fits(seg: LogSegment, nxt: LogSegment | None) -> bool:
        nonlocal excess
        if excess - seg.size < 0:
            return False
        excess -= seg.size
        return True

    return fits


def _time_breached(log: PartitionLog, retention: RetentionConfig, now_ms: int) -> Predicate | None:
    limit = retention.retention_ms
    if limit < 0:
        return None
    return lambda seg, nxt: now_ms - largest_timestamp_ms(seg) > limit


def _deletable(log: PartitionLog, predicate: Predicate) -> list[LogSegment]:
    """Kafka's ``deletableSegments``: the oldest segments, while each is below the high
    watermark, qualifies, and is not an empty active segment."""
    segments = list(log.segments)
    high_watermark = log.high_watermark
    found: list[LogSegment] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = log.log_end_offset if nxt is None else nxt.base_offset
        if high_watermark < upper or not predicate(seg, nxt):
            break
        if nxt is None and (seg.refresh_size() == 0 or seg.next_offset() == seg.base_offset):
            break  # empty (or only a torn batch): nothing a roll could close
        found.append(seg)
    return found


def _delete(log: PartitionLog, doomed: list[LogSegment]) -> tuple[int, int]:
    """Move the log start past ``doomed`` (a prefix of the log) and remove its files.

    Crash safety: the new log start offset is checkpointed before any file goes, so a crash
    leaves either the old segments below a checkpointed start (reads begin there and the next
    run deletes them) or ``.deleted`` files that opening the log removes.
    """
    if not doomed:
        return 0, 0
    if doomed[-1] is log.active_segment:
        log.roll()
    keep = log.segments[len(doomed) :]
    start = max(log.log_start_offset, keep[0].base_offset)
    _checkpoint(log, start)
    nbytes = sum(seg.refresh_size() for seg in doomed)
    snapshots = [segment_file(log.directory, s.base_offset, SNAPSHOT_SUFFIX) for s in doomed]
    for seg, snap in zip(doomed, snapshots, strict=True):
        seg.change_suffix(DELETED_SUFFIX)
        if snap.exists():
            os.replace(snap, snap.with_name(snap.name + DELETED_SUFFIX))
    log.segments = keep
    fsync_dir(log.directory)
    for seg, snap in zip(doomed, snapshots, strict=True):
        seg.delete()
        snap.with_name(snap.name + DELETED_SUFFIX).unlink(missing_ok=True)
    _truncate_epochs(log, start)
    return len(doomed), nbytes


def _checkpoint(log: PartitionLog, start: int) -> None:
    path = log.directory.parent / LOG_START_OFFSET_CHECKPOINT
    if read_offset_checkpoint(path).get(log.topic_partition) != start:
        update_offset_checkpoint(path, set={log.topic_partition: start})


def _truncate_epochs(log: PartitionLog, start: int) -> None:
    """Kafka's ``truncateFromStart``: epochs starting at or below the new log start collapse
    into the last of them, which now starts there."""
    entries = log.leader_epochs.entries
    below = [e for e in entries if e[1] <= start]
    if not below or below == [(below[-1][0], start)]:
        return
    kept = [(below[-1][0], start), *(e for e in entries if e[1] > start)]
    write_leader_epoch_checkpoint(log.leader_epochs.path, kept)
    log.leader_epochs = LeaderEpochCache(log.directory)
