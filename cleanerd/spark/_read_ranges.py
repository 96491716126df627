"""Input partitions of a read: byte ranges of segments, cut and trimmed through their indexes.

Runs on the driver and reads only directory listings, index files and (for read_committed) the
batch headers that decide which transactions aborted; the segments' records are left to the
tasks. A range starts and ends at batch boundaries: segment ends, or ``.index`` positions,
which Kafka only ever writes at the start of an append. Everything here is plain data so the
ranges pickle to the executors.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cleanerd.compaction import producer_scans
from cleanerd.format import I64, LONG_MAX
from cleanerd.inspect import segment_logs
from cleanerd.spark._bounds import Bounds
from cleanerd.storage import (
    OffsetIndex,
    StorageError,
    TimeIndex,
    parse_partition_dir_name,
    scan_producer_state,
)

AbortedRange = tuple[int, int, int]
"""(producer id, first offset, marker offset) of an aborted transaction."""


@dataclass(frozen=True)
class Txns:
    """What read_committed hides in one partition: aborted transactions and the LSO."""

    aborted: tuple[AbortedRange, ...] = ()
    last_stable_offset: int = LONG_MAX


@dataclass(frozen=True)
class SegmentRange:
    """One task's work: ``[start, end)`` bytes of one segment (``end``: its size when planned)."""

    topic: str
    partition: int
    path: str
    base_offset: int
    next_base: int | None  # the next segment's base offset (offsets must stay below it)
    start: int
    end: int
    last_segment: bool  # the partition's active segment: a writer may be appending
    txns: Txns | None = None  # read_committed only

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PartitionDir:
    topic: str
    partition: int
    path: Path


def partition_dirs(path: Path, bounds: Bounds) -> list[PartitionDir]:
    """The partition dirs under a log dir (or ``path`` itself when it is one) that ``bounds``
    wants, sorted by (topic, partition)."""
    if not path.is_dir():
        raise StorageError(f"{path}: not a directory (expected a Kafka log dir or partition dir)")
    own = parse_partition_dir_name(path.name)
    if own is not None and segment_logs(path):
        found = [(own, path)]
    else:
        found = []
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            tp = parse_partition_dir_name(entry.name)
            if tp is not None and entry.is_dir():
                found.append((tp, Path(entry.path)))
    found.sort(key=lambda item: (item[0].topic, item[0].partition))
    return [
        PartitionDir(tp.topic, tp.partition, p)
        for tp, p in found
        if bounds.wants_topic(tp.topic) and bounds.wants_partition(tp.partition)
    ]


def _first_position(index: OffsetIndex, time_index: TimeIndex, bounds: Bounds) -> int:
    """Where the first record the bounds keep can be: everything before it is below them.

    Offsets: the floor entry's position (every batch before an entry's position holds only
    offsets below the entry's). Timestamps: the last time entry below the lowest timestamp
    kept says every record up to its offset is older, so reading starts at that offset + 1.
    """
    start = 0
    if bounds.offset_min > index.base_offset:
        start = index.lookup(bounds.offset_min)[1]
    ts = bounds.ts_seek_from
    if ts is not None:
        found_ts, offset = time_index.lookup(ts - 1)
        if found_ts >= 0:
            start = max(start, index.lookup(offset + 1)[1])
    return start


def _entries(index: OffsetIndex) -> tuple[I64, I64]:
    """(offsets, positions) of every ``.index`` entry (8-byte big-endian relative offset and
    position, as Kafka writes them), as arrays: a big segment's index has a million."""
    # no more than the entries the index loaded (at most segment.index.bytes of them): the
    # file may have grown since, to any length
    raw = np.fromfile(
        index.path, dtype=np.dtype([("rel", ">i4"), ("pos", ">i4")]), count=index.entries
    )
    return raw["rel"].astype(np.int64) + index.base_offset, raw["pos"].astype(np.int64)


def _last_position(index: OffsetIndex, bounds: Bounds, size: int) -> int:
    """Where the records above ``offset_max`` surely begin: the position of the entry after
    the first entry at or above it (entries may name an append's last offset)."""
    if bounds.offset_max >= LONG_MAX or index.entries == 0:
        return size
    offsets, positions = _entries(index)
    j = int(np.searchsorted(offsets, bounds.offset_max, side="left"))
    if j + 1 >= len(offsets):
        return size
    return min(size, int(positions[j + 1]))


def _cuts(index: OffsetIndex, start: int, end: int, max_bytes: int) -> list[int]:
    """Range ends inside ``(start, end)`` at index positions, cutting it into the fewest
    ranges of about ``max_bytes`` or less, all about the same size: the index position nearest
    each ``1/n`` mark. (Equal ranges keep a stage's tasks even: cut greedily, a 100 MB
    segment in 32 MB ranges left a 4 MB fourth one, and two task slots took 64 MB each way.)"""
    span = end - start
    if span <= max_bytes or index.entries == 0:
        return []
    _, positions = _entries(index)
    inside = positions[(positions > start) & (positions < end)]
    if not len(inside):
        return []
    pieces = -(-span // max_bytes)
    marks = np.array([start + span * i // pieces for i in range(1, pieces)], dtype=np.int64)
    after = np.minimum(np.searchsorted(inside, marks), len(inside) - 1)
    before = np.maximum(after - 1, 0)
    nearer = np.where(
        np.abs(inside[before] - marks) <= np.abs(inside[after] - marks), before, after
    )
    return sorted({int(p) for p in inside[nearer].tolist()})


def _indexes(log: Path, base: int) -> tuple[OffsetIndex, TimeIndex] | None:
    """The segment's indexes, or None when they cannot be trusted (read it whole instead)."""
    stem = log.with_suffix("")
    index = OffsetIndex(stem.with_suffix(".index"), base)
    time_index = TimeIndex(stem.with_suffix(".timeindex"), base)
    try:
        index.sanity_check()
        time_index.sanity_check()
    except StorageError:
        return None
    return index, time_index


def segment_ranges(part: PartitionDir, bounds: Bounds, max_bytes: int) -> list[SegmentRange]:
    """The byte ranges of one partition the bounds can need, in offset order."""
    logs = segment_logs(part.path)
    out: list[SegmentRange] = []
    for i, (base, log) in enumerate(logs):
        next_base = logs[i + 1][0] if i + 1 < len(logs) else None
        if next_base is not None and next_base <= bounds.offset_min:
            continue
        if base > bounds.offset_max:
            break
        size = log.stat().st_size
        start, end = 0, size
        indexes = _indexes(log, base)
        if indexes is not None:
            start = min(_first_position(indexes[0], indexes[1], bounds), size)
            end = max(start, _last_position(indexes[0], bounds, size))
        cuts = [] if indexes is None else _cuts(indexes[0], start, end, max_bytes)
        edges = [start, *cuts, end]
        last = next_base is None
        for a, b in itertools.pairwise(edges):
            if b > a:
                out.append(
                    SegmentRange(part.topic, part.partition, str(log), base, next_base, a, b, last)
                )
    return out


def partition_txns(part: PartitionDir) -> Txns:
    """Aborted transactions and the last stable offset of a partition, from its batch headers
    (the walk Kafka's recovery makes; see ``storage._producer_state``), so read_committed does
    not depend on ``.txnindex`` files being present or current."""
    # a chunk at a time, up to each segment's first problem: all of a partition's batch rows
    # may take more memory than its files
    scans = (scan for base, log in segment_logs(part.path) for scan in producer_scans(base, log))
    state = scan_producer_state(scans)
    aborted = tuple((t.producer_id, t.first_offset, t.last_offset) for t in state.aborted)
    return Txns(aborted, state.last_stable_offset(LONG_MAX))


MIN_TASK_BYTES = 4 * 1024 * 1024
"""Ranges are not cut below this to make up ``min_tasks`` (Spark's open cost of a file)."""


def split_bytes(total: int, min_tasks: int, max_bytes: int) -> int:
    """The range size of a read of ``total`` bytes: ``max_bytes``, or less so that there are
    about ``min_tasks`` ranges, never below :data:`MIN_TASK_BYTES` (the rule of Spark's
    ``FilePartition.maxSplitBytes`` for files, with the cores as ``min_tasks``)."""
    return min(max_bytes, max(MIN_TASK_BYTES, -(-total // max(min_tasks, 1))))


def plan(
    path: Path, bounds: Bounds, *, max_bytes: int, committed: bool, min_tasks: int = 1
) -> list[SegmentRange]:
    """Every range a read of ``path`` under ``bounds`` needs (empty when a bound is empty).

    With fewer than ``min_tasks`` ranges of ``max_bytes``, big segments are cut smaller
    (``split_bytes``), so a log dir of one or two big segments still keeps every core busy.
    """
    if bounds.empty_offsets or bounds.empty_timestamps:
        return []
    parts = partition_dirs(path, bounds)
    found = [segment_ranges(part, bounds, max_bytes) for part in parts]
    if sum(len(f) for f in found) < min_tasks:
        spread = split_bytes(sum(r.size for f in found for r in f), min_tasks, max_bytes)
        if spread < max_bytes:
            found = [segment_ranges(part, bounds, spread) for part in parts]
    ranges: list[SegmentRange] = []
    for part, part_ranges in zip(parts, found, strict=True):
        if committed and part_ranges:
            txns = partition_txns(part)
            ranges.extend(_with_txns(r, txns) for r in part_ranges)
        else:
            ranges.extend(part_ranges)
    return ranges


def _with_txns(r: SegmentRange, txns: Txns) -> SegmentRange:
    """Only the aborted transactions that can overlap the range's segment travel with it."""
    hi = LONG_MAX if r.next_base is None else r.next_base
    mine = tuple(t for t in txns.aborted if t[1] < hi and t[2] >= r.base_offset)
    return SegmentRange(
        r.topic,
        r.partition,
        r.path,
        r.base_offset,
        r.next_base,
        r.start,
        r.end,
        r.last_segment,
        Txns(mine, txns.last_stable_offset),
    )
