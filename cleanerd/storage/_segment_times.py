"""A segment's times as Kafka's rolling and retention rules need them, exact across processes.

A process that did not write a segment knows its largest timestamp only from the time index,
whose last entry may predate the last few batches (an entry is added once per
``index.interval.bytes``; the writer adds the final one when it rolls). Retention by time and
the final entry of a roll done by another process (the daemon's idle roll) must not miss those
batches, so they also read the batch headers after the last offset-index entry: a few KB.
"""

from __future__ import annotations

from cleanerd.format import LONG_MAX
from cleanerd.storage._header_summary import summarise_headers
from cleanerd.storage._segment import LogSegment


def tail_max_timestamp(seg: LogSegment) -> tuple[int, int]:
    """(max timestamp, its offset) of the batches from the last offset-index entry on;
    (-1, base offset) when there are none."""
    _, position = seg.offset_index.lookup(LONG_MAX)
    tail = summarise_headers(
        seg.view(keep=False),
        path=str(seg.log_path),
        start=position,
        prev_last_offset=seg.base_offset - 1 if position == 0 else -1,
    )
    if tail.batches == 0:
        return -1, seg.base_offset
    return tail.max_timestamp, tail.max_timestamp_offset


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
