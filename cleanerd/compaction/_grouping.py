"""Grouping segments for pass 2 (docs/kafka-format.md §4.7: Kafka's ``groupSegmentsBySize``).

Each group becomes one cleaned segment named after its first base offset. A group grows while the
sum of ``.log`` sizes stays within ``segment.bytes``, the sums of offset- and time-index bytes
within ``segment.index.bytes``, and its offsets (estimated up to the next segment's base, or the
first uncleanable offset for the last one) span at most 2^31 - 1 from the group's first base; an
empty candidate skips the offset test, so empty segments left every 2^31 offsets merge away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from cleanerd.format import INT_MAX


class SegmentSizes(NamedTuple):
    """What grouping reads of a segment."""

    base_offset: int
    log_bytes: int
    offset_index_bytes: int  # entries x 8, as a trimmed index file
    time_index_bytes: int  # entries x 12


S = TypeVar("S")


def group_segments(
    sizes: Sequence[SegmentSizes],
    max_log_bytes: int,
    max_index_bytes: int,
    first_uncleanable_offset: int,
) -> list[list[int]]:
    """Kafka's grouping over ``sizes`` (in base-offset order); returns lists of indexes."""
    groups: list[list[int]] = []
    i = 0
    n = len(sizes)
    while i < n:
        head = sizes[i]
        group = [i]
        log_bytes = head.log_bytes
        index_bytes = head.offset_index_bytes
        time_bytes = head.time_index_bytes
        i += 1
        while i < n:
            cand = sizes[i]
            if log_bytes + cand.log_bytes > max_log_bytes:
                break
            if index_bytes + cand.offset_index_bytes > max_index_bytes:
                break
            if time_bytes + cand.time_index_bytes > max_index_bytes:
                break
            if cand.log_bytes != 0:
                estimated_last = (
                    sizes[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
                )
                if estimated_last - head.base_offset > INT_MAX:
                    break
            group.append(i)
            log_bytes += cand.log_bytes
            index_bytes += cand.offset_index_bytes
            time_bytes += cand.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def group_items(
    items: Sequence[S],
    sizes: Sequence[SegmentSizes],
    max_log_bytes: int,
    max_index_bytes: int,
    first_uncleanable_offset: int,
) -> list[list[S]]:
    """``group_segments`` applied to the items the sizes describe."""
    return [
        [items[i] for i in group]
        for group in group_segments(sizes, max_log_bytes, max_index_bytes, first_uncleanable_offset)
    ]
