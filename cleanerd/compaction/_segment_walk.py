"""Segment metadata from a read-only walk of batch headers, without opening a ``PartitionLog``.

Opening a ``PartitionLog`` may finish an interrupted swap and rebuild indexes (it writes), so
``cleanerd plan`` and the daemon's metadata cache read a segment this way instead: map the file,
walk the batch headers (no CRC), summarise. Besides ``SegmentMeta`` the walk keeps what the daemon
caches per segment: the record count (to size the offset map) and whether it holds transactional
batches (to skip the producer-state walk when none does). A walk can resume where an earlier
one stopped, so an active segment that only grew costs a walk of its new batches. A walk reads
the file a chunk at a time and keeps only its summary (``storage.summarise_headers``): a walk
that held every batch's row would take more memory than the file. Whoever folds a segment's
producer state takes its batches a chunk at a time too (``producer_scans``).

A segment the cleaner has already cleaned whole needs less: ``summarise_cleaned`` reads what the
plan takes of it the way Kafka's ``LogSegment`` does, from its indexes (the time index's last
entry for the largest timestamp, the offset index's last entry and the batches after it for the
next offset) and its first batch header, so a daemon that starts over a big compacted log does
not read every page of it. Its record count is the offset span (Kafka's own estimate when it
sizes the offset map) and it claims no transactional batch: an open transaction begins at or
after the last stable offset of the cleaning that wrote the checkpoint, so never in a segment
wholly below it (docs/daemon.md, "Survey and ranking").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from cleanerd.compaction._cleaning_plan import SegmentMeta
from cleanerd.format import (
    I64,
    LONG_MAX,
    U8,
    CorruptRecordError,
    layout as at,
)
from cleanerd.storage import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    OffsetIndex,
    StorageError,
    TimeIndex,
    iter_chunks,
    segment_file,
    summarise_headers,
    view_regular,
)


@dataclass(frozen=True, slots=True)
class SegmentWalk:
    """What one header walk learnt of a segment; small, so a cache can keep one per segment."""

    meta: SegmentMeta
    records: int  # sum of the batches' record counts
    transactional: bool  # some batch (data or marker) is transactional
    max_timestamp: int  # largest batch max timestamp; -1 when none is known
    end: int  # byte position where the walk stopped (after the last good batch)
    last_offset: int  # last offset walked; base - 1 when no batch
    last_batch: tuple[int, int, int] | None  # (position, base offset, crc) of the last batch
    error: CorruptRecordError | None = None  # a batch that does not decode
    torn_tail: CorruptRecordError | None = None  # an incomplete last batch (a writer mid-append)
    # from ``summarise_cleaned``: ``records`` is the offset span, ``transactional`` not known
    summary: bool = False

    @property
    def resumable(self) -> bool:
        """A later walk of the same, grown file may start at ``end``."""
        return self.error is None and self.last_batch is not None and not self.summary


@dataclass(frozen=True, slots=True)
class WalkResult:
    """A walk with the stat of the file it read."""

    walk: SegmentWalk
    stat: os.stat_result


def producer_scans(base: int, path: Path) -> Iterator[tuple[U8, I64, str]]:
    """A segment's batches for a producer-state fold (``storage.scan_producer_state``), a chunk
    at a time, up to the first problem its walk would report (a torn tail, a bad batch): the
    batches before it are what the walk summarised."""
    arr, _ = view_regular(path)
    name = str(path)
    for b in iter_chunks(arr, path=name, prev_last_offset=base - 1, check_crc=False, strict=False):
        yield arr, b, name


def _u(arr: U8, start: int, size: int, *, signed: bool = False) -> int:
    return int.from_bytes(arr[start : start + size].tobytes(), "big", signed=signed)


def _torn(arr: U8, position: int) -> bool:
    """The bytes at ``position`` are the start of a batch not yet fully written: too short for a
    header, or a v2 header whose length runs past the end of the file."""
    left = arr.shape[0] - position
    if left < at.HEADER_SIZE:
        return True
    length = _u(arr, position + at.LENGTH_AT, 4, signed=True)
    magic = int(arr[position + at.MAGIC_AT])
    return (
        magic == at.MAGIC_V2
        and length >= at.HEADER_SIZE - at.LOG_OVERHEAD
        and position + at.LOG_OVERHEAD + length > arr.shape[0]
    )


def _still_there(arr: U8, last_batch: tuple[int, int, int] | None) -> bool:
    """The batch a resumed walk continues after is unchanged (the file was not rewritten)."""
    if last_batch is None:
        return False
    position, base, crc = last_batch
    if position + at.HEADER_SIZE > arr.shape[0]:
        return False
    stored_base = _u(arr, position + at.BASE_OFFSET_AT, 8, signed=True)
    return stored_base == base and _u(arr, position + at.CRC_AT, 4) == crc


def walk_segment(
    base: int,
    path: Path,
    *,
    torn_tail_ok: bool = False,
    resume: SegmentWalk | None = None,
) -> WalkResult:
    """Walk ``path``'s batch headers (no CRC check) and summarise them.

    ``torn_tail_ok``: an incomplete last batch is not an error (an active segment being appended
    to by another process); it is kept in ``torn_tail``. ``resume``: an earlier walk of the same
    file; when its last batch is still in place only the bytes after it are walked.
    """
    arr, st = view_regular(path)
    mtime_ms = st.st_mtime_ns // 1_000_000
    if resume is not None and not (resume.resumable and _still_there(arr, resume.last_batch)):
        resume = None
    start = resume.end if resume is not None else 0
    prev_last = resume.last_offset if resume is not None else base - 1
    walked = summarise_headers(arr, path=str(path), start=start, prev_last_offset=prev_last)
    error, torn = walked.error, None
    if error is not None and torn_tail_ok and _torn(arr, walked.end):
        error, torn = None, error
    records, transactional, max_ts = walked.records, walked.transactional, walked.max_timestamp
    first = walked.first_timestamp
    next_offset = walked.last_offset + 1 if walked.last_offset is not None else base
    last_batch = walked.last_batch
    if resume is not None:
        records += resume.records
        transactional = transactional or resume.transactional
        max_ts = max(max_ts, resume.max_timestamp)
        first = resume.meta.first_batch_timestamp
        next_offset = next_offset if walked.batches else resume.meta.next_offset
        last_batch = last_batch or resume.last_batch
    meta = SegmentMeta(
        base_offset=base,
        size_bytes=int(st.st_size),
        largest_timestamp=max_ts if max_ts >= 0 else mtime_ms,  # none known: the mtime, as Kafka
        first_batch_timestamp=first,
        next_offset=next_offset,
    )
    walk = SegmentWalk(
        meta=meta,
        records=records,
        transactional=transactional,
        max_timestamp=max_ts,
        end=walked.end,
        last_offset=next_offset - 1,
        last_batch=last_batch,
        error=error,
        torn_tail=torn,
    )
    return WalkResult(walk, st)


SUMMARY_MIN_BYTES = 4 << 20
"""Smaller segments are walked: reading two indexes costs about 0.11 ms whatever the segment's
size, a walk 0.04 ms plus about 0.03 ms a MiB (both from the page cache, on the 2-core dev VM:
even at 4 MiB a walk costs 0.15 ms). Kafka's default ``segment.bytes`` is 1 GiB."""


def summarise_cleaned(base: int, path: Path, next_base: int, size: int) -> WalkResult | None:
    """The walk of an inactive segment wholly below the cleaner checkpoint, read from its
    indexes, its first batch header and the batches after its last offset-index entry (see the
    module docstring); ``next_base``: the next segment's base offset, ``size``: the file's size
    as listed. None when the caller had better walk the segment: smaller than
    ``SUMMARY_MIN_BYTES``, or anything does not add up (an index missing, failing its checks or
    pointing elsewhere than a batch, a legacy or torn batch, offsets past ``next_base``)."""
    if size < SUMMARY_MIN_BYTES:
        return None
    index, time_index = (
        segment_file(path.parent, base, s) for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
    )
    if not (index.is_file() and time_index.is_file()):  # Kafka would rebuild them: walk
        return None
    try:
        offsets, times = OffsetIndex(index, base), TimeIndex(time_index, base)
        offsets.sanity_check()
        times.sanity_check()
        arr, st = view_regular(path)
    except (StorageError, OSError, ValueError):
        return None
    size = arr.shape[0]
    indexed, position = offsets.lookup(LONG_MAX)
    if not 0 <= position <= size - at.HEADER_SIZE:  # a whole header at the entry's position
        return None
    if arr[at.MAGIC_AT] != at.MAGIC_V2 or arr[position + at.MAGIC_AT] != at.MAGIC_V2:
        return None  # legacy message sets: walked
    tail = summarise_headers(arr, path=str(path), start=position)
    if tail.error is not None or tail.end != size or tail.last_offset is None:
        return None
    next_offset = tail.last_offset + 1
    # an entry holds the largest offset of what one append wrote from its position on
    pointed = not offsets.entries or (tail.first_offset or 0) <= indexed < next_offset
    if next_offset > next_base or not pointed:
        return None
    first = _u(arr, at.MAX_TIMESTAMP_AT, 8, signed=True)
    largest, _ = times.last_entry
    meta = SegmentMeta(
        base_offset=base,
        size_bytes=int(st.st_size),
        largest_timestamp=largest if largest >= 0 else st.st_mtime_ns // 1_000_000,
        first_batch_timestamp=first,
        next_offset=next_offset,
    )
    walk = SegmentWalk(
        meta=meta,
        records=next_offset - base,
        transactional=False,
        max_timestamp=largest,
        end=size,
        last_offset=next_offset - 1,
        last_batch=tail.last_batch,
        summary=True,
    )
    return WalkResult(walk, st)


def settled(walk: SegmentWalk) -> SegmentWalk:
    """The walk of a segment that is no longer active: a torn tail there is corruption."""
    if walk.torn_tail is None:
        return walk
    return replace(walk, error=walk.torn_tail, torn_tail=None)
