"""Why a log's cleanable range ends where it does, and where it would end were the active segment
rolled.

Kafka never cleans the active segment, so a partition copied from a stopped broker, or archived,
keeps its last segment as it is; a partition of one segment is never compacted at all. The
one-shot ``compact`` rolls it on request (``--roll-active``) and otherwise says why nothing was
cleanable; ``plan`` shows what rolling would add without touching the log (``as_rolled``).
"""

from __future__ import annotations

import enum
from dataclasses import replace

from cleanerd.compaction._cleaning_plan import LogMeta, SegmentMeta, cleanable_offsets
from cleanerd.topics import TopicCleanerConfig


class Bound(enum.Enum):
    """The rule that set a log's first uncleanable offset (docs/kafka-format.md §4.2)."""

    ACTIVE_SEGMENT = "active_segment"  # the active segment's base offset
    LAST_STABLE_OFFSET = "last_stable_offset"  # an open transaction, or the high watermark
    MIN_COMPACTION_LAG = "min_compaction_lag"  # a segment younger than min.compaction.lag.ms


def as_rolled(log: LogMeta) -> LogMeta:
    """The log as ``PartitionLog.roll`` would leave it: the active segment inactive and an empty
    one at the log end. An empty active segment is not rolled (nor is it here)."""
    active = log.active_segment
    if active.next_offset <= active.base_offset:
        return log
    empty = SegmentMeta(
        base_offset=active.next_offset,
        size_bytes=0,
        largest_timestamp=active.largest_timestamp,
        first_batch_timestamp=None,
        next_offset=active.next_offset,
    )
    return replace(log, segments=(*log.segments, empty))


def uncleanable_bound(log: LogMeta, config: TopicCleanerConfig, now_ms: int) -> Bound:
    """Which of Kafka's three bounds is the lowest (the first named wins a tie)."""
    upper = cleanable_offsets(log, config, now_ms).first_uncleanable_dirty_offset
    if log.active_segment.base_offset <= upper:
        return Bound.ACTIVE_SEGMENT
    if log.last_stable_offset <= upper:
        return Bound.LAST_STABLE_OFFSET
    return Bound.MIN_COMPACTION_LAG


def nothing_cleanable_reason(
    log: LogMeta, config: TopicCleanerConfig, now_ms: int, records: int
) -> tuple[Bound, str]:
    """Why no offset of a non-empty log may be cleaned at ``now_ms``, in words, with the bound
    that says so; ``records`` is how many records the log holds. (With nothing cleanable and
    the active segment the bound, the segments before it hold no record.)"""
    bound = uncleanable_bound(log, config, now_ms)
    if bound is Bound.ACTIVE_SEGMENT:
        text = f"all {records} records are in the active segment, which is never cleaned"
    elif bound is Bound.LAST_STABLE_OFFSET:
        text = (
            f"the last stable offset is {log.last_stable_offset} (a transaction open there, or "
            "the high watermark), inside the first segment"
        )
    else:
        text = (
            f"the first segment holds records younger than min.compaction.lag.ms "
            f"({config.min_compaction_lag_ms} ms)"
        )
    return bound, f"nothing cleanable: {text}"
