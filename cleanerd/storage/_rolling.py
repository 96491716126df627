"""Kafka's rules for when the active segment rolls: on an append, and (ours) when idle.

Kafka rolls only when an append arrives, so a compacted topic that stops receiving writes
keeps its last records in the active segment, out of the cleaner's reach, for ever. An append
rolls a compacted topic's segment once it spans ``min(segment.ms, max.compaction.lag.ms)``
(``LogConfig.max_segment_ms``): a writer cannot know how long the cleaning will take. The
daemon rolls it earlier, ``lead`` ms before its first batch is ``max.compaction.lag.ms`` old
(the lead is the expected cleaning time, scheduling's), so the cleaning ends within the lag;
it uses the same ``rollingBasedTimestamp`` an append would.
"""

from __future__ import annotations

import random

from cleanerd.storage._segment import LogSegment
from cleanerd.topics import LogConfig


def jitter_ms(config: LogConfig, dir_name: str, base_offset: int) -> int:
    """Kafka picks a random roll jitter per segment; ours is seeded by the segment's name."""
    cap = min(config.segment_jitter_ms, config.segment_ms)
    if cap <= 0:
        return 0
    return random.Random(f"{dir_name}:{base_offset}").randrange(cap)


def should_roll(
    seg: LogSegment,
    config: LogConfig,
    jitter: int,
    size: int,
    max_timestamp: int,
    last_offset: int,
    now_ms: int,
) -> bool:
    """Kafka's shouldRoll of the active segment ``seg`` for an append of ``size`` bytes."""
    if seg.size == 0:
        return False
    rolling = seg.first_batch_timestamp()
    if rolling is not None and rolling >= 0:
        waited = max_timestamp - rolling
    else:
        waited = now_ms - seg.created_ms
    return (
        seg.size > config.segment_bytes - size
        or waited > config.max_segment_ms - jitter
        or seg.indexes_full()
        or not seg.can_hold(last_offset)
    )


def rolling_timestamp_ms(seg: LogSegment) -> int:
    """Kafka's ``rollingBasedTimestamp`` (the first batch's max timestamp); without one, the
    earliest known bound on the segment's creation (object creation or file mtime)."""
    ts = seg.first_batch_timestamp()
    if ts is not None and ts >= 0:
        return ts
    mtime = seg.last_modified_ms
    return min(seg.created_ms, mtime) if seg.created_ms > 0 else mtime


def is_idle(seg: LogSegment, now_ms: int, max_lag_ms: int, lead_ms: int = 0) -> bool:
    """A non-empty segment whose rolling timestamp is older than ``now_ms + lead_ms -
    max_lag_ms``: ``lead_ms`` before its first batch is ``max_lag_ms`` old, or later."""
    return seg.refresh_size() > 0 and rolling_timestamp_ms(seg) < now_ms + lead_ms - max_lag_ms
