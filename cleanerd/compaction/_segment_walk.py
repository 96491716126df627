"""Segment metadata from a read-only walk of batch headers, without opening a ``PartitionLog``.

Opening a ``PartitionLog`` may finish an interrupted swap and rebuild indexes (it writes), so
``cleanerd plan`` and the daemon's metadata cache read a segment this way instead: map the file,
walk the batch headers (no CRC), summarise. Besides ``SegmentMeta`` the walk keeps what the daemon
caches per segment: the record count (to size the offset map) and whether it holds transactional
batches (to skip the producer-state walk when none does). A walk can resume where an earlier
one stopped, so an active segment that only grew costs a walk of its new batches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from cleanerd.compaction._cleaning_plan import SegmentMeta
from cleanerd.format import (
    ATTR_TRANSACTIONAL,
    I64,
    U8,
    CorruptRecordError,
    kernels as k,
    layout as at,
    scan_batches,
)
from cleanerd.storage import view_regular


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

    @property
    def resumable(self) -> bool:
        """A later walk of the same, grown file may start at ``end``."""
        return self.error is None and self.last_batch is not None


@dataclass(frozen=True, slots=True)
class WalkResult:
    """A walk with the mapped file and the batches it found (for a producer-state fold)."""

    walk: SegmentWalk
    arr: U8
    batches: I64  # only the batches this walk read (the new ones when resumed)
    stat: os.stat_result


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
    scan = scan_batches(
        arr, start=start, path=str(path), check_crc=False, prev_last_offset=prev_last
    )
    b, n = scan.batches, len(scan)
    error, torn = scan.error, None
    if error is not None and torn_tail_ok and _torn(arr, scan.end):
        error, torn = None, error
    records = int(b[:, k.B_COUNT].sum()) if n else 0
    transactional = bool(n) and bool((b[:, k.B_ATTRIBUTES] & ATTR_TRANSACTIONAL).any())
    max_ts = int(b[:, k.B_MAX_TIMESTAMP].max()) if n else -1
    first = int(b[0, k.B_MAX_TIMESTAMP]) if n else None
    next_offset = int(b[-1, k.B_LAST_OFFSET]) + 1 if n else base
    last_batch = (
        (int(b[-1, k.B_POS]), int(b[-1, k.B_BASE_OFFSET]), int(b[-1, k.B_CRC])) if n else None
    )
    if resume is not None:
        records += resume.records
        transactional = transactional or resume.transactional
        max_ts = max(max_ts, resume.max_timestamp)
        first = resume.meta.first_batch_timestamp
        next_offset = next_offset if n else resume.meta.next_offset
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
        end=scan.end,
        last_offset=next_offset - 1,
        last_batch=last_batch,
        error=error,
        torn_tail=torn,
    )
    return WalkResult(walk, arr, b, st)


def settled(walk: SegmentWalk) -> SegmentWalk:
    """The walk of a segment that is no longer active: a torn tail there is corruption."""
    if walk.torn_tail is None:
        return walk
    return replace(walk, error=walk.torn_tail, torn_tail=None)
