"""A segment's times as Kafka's rolling and retention rules need them, exact across processes.

A process that did not write a segment knows its largest timestamp only from the time index,
whose last entry may predate the last few batches (an entry is added once per
``index.interval.bytes``; the writer adds the final one when it rolls). Retention by time and
the final entry of a roll done by another process (the daemon's idle roll) must not miss those
batches, so they also read the batch headers after the last offset-index entry: a few KB.
"""

from __future__ import annotations

import numpy as np

from cleanerd.format import LONG_MAX, kernels as k
from cleanerd.storage._segment import LogSegment


def tail_max_timestamp(seg: LogSegment) -> tuple[int, int]:
    """(max timestamp, its offset) of the batches from the last offset-index entry on;
    (-1, base offset) when there are none."""
    _, position = seg.offset_index.lookup(LONG_MAX)
    b = seg.scan(position, check_crc=False).batches
    if len(b) == 0:
        return -1, seg.base_offset
    row = int(np.argmax(b[:, k.B_MAX_TIMESTAMP]))
    return int(b[row, k.B_MAX_TIMESTAMP]), int(b[row, k.B_LAST_OFFSET])


def largest_timestamp_ms(seg: LogSegment) -> int:
    """Kafka's ``largestTimestamp``: the largest batch timestamp, else the file's mtime."""
    ts = max(seg.time_index.last_entry[0], tail_max_timestamp(seg)[0])
    return ts if ts >= 0 else seg.last_modified_ms


def complete_time_index(seg: LogSegment) -> None:
    """Before a roll: make the time index's last entry cover every batch, so the segment's
    largest timestamp survives even when this process did not write its last batches."""
    ts, offset = tail_max_timestamp(seg)
    index = seg.time_index
    last_ts, last_offset = index.last_entry
    if ts > last_ts and index.entries < index.max_entries:
        index.maybe_append(ts, max(offset, last_offset), skip_full_check=True)
