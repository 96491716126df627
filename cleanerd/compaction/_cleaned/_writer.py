"""Writing what pass 2 keeps into ``.cleaned`` segments (docs/kafka-format.md §4.8, §4.11, §4.12).

COPY batches are the source segment's bytes as they are; REBUILD batches are re-encoded with
their kept records (``_rebuild``: same base and last offset, producer fields, codec at its default
level, timestamp type, leader epoch; the delete horizon stamped or carried); EMPTY batches become
61-byte headers; a legacy message that loses records is written again in its magic and codec
(``_rebuild.rebuild_legacy``). A chunk's output batches, in order, are cut into appends of about
``APPEND_BYTES`` (``append_groups``), each one ``LogSegment.append`` (which adds index entries as
Kafka's does): an append that lies end to end in one source goes out as a slice of it, any other
is gathered by a kernel. No per-batch Python loop runs, so workers on other threads keep the GIL.

A group's output rolls into a new ``.cleaned`` segment when the next batch would not fit the
current one (KAFKA-20036, kafka-format.md §4.8): its ``.log`` would pass ``MAX_SEGMENT_BYTES``
(Kafka's int32 file size), or its last offset would not fit the indexes' 32-bit relative offsets,
or (checked per append) the append would add an entry to a full ``.index`` or ``.timeindex``.
The new segment's base offset is the first offset of the batch that did not fit; ``fitting``
finds that batch in one kernel call per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.compaction._cleaned._rebuild import rebuild_batches, rebuild_legacy
from cleanerd.compaction._filter import Action, ChunkDecision
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._throttle import Throttler
from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    I64,
    INT_MAX,
    U8,
    build_empty_batch,
    is_legacy,
    kernels as k,
    legacy_rows,
)
from cleanerd.storage import CLEANED_SUFFIX, AbortedTxn, LogSegment

APPEND_BYTES = 256 << 10
"""Target size of one append to the cleaned segment (Kafka appends one write buffer at a time)."""

MAX_SEGMENT_BYTES = INT_MAX
"""A cleaned ``.log`` never grows past this (Kafka's ``FileRecords`` size is an int32): the
batch that would take it past rolls the output into a new segment (KAFKA-20036)."""


def max_segment_bytes() -> int:
    """The roll size now (``MAX_SEGMENT_BYTES``): a driver reads it once and hands it to the
    write tasks of other processes, so they roll where this process would."""
    return MAX_SEGMENT_BYTES


NO_TIMESTAMP = -1
Arr = npt.NDArray[Any]
_NO_BYTES = np.zeros(0, dtype=np.uint8)


@kernel(nogil=True)
def append_groups(sizes: Arr, fill: int, limit: int, ends: Arr) -> int:
    """Ends of the appends the batches of ``sizes`` close, after ``fill`` pending bytes, into
    ``ends`` (room for ``2 * len(sizes) + 1``); returns how many.

    Batches are taken whole and in order: one that does not fit in ``limit`` behind what is
    pending closes the append before it (an end equal to the previous one flushes only what
    was pending); an append closes as soon as it holds ``limit`` bytes. The batches after the
    last end stay pending. The caller gives the room: a kernel returning an array it made
    would need numba's Python side to hand it over, which imports the numba package.
    """
    if ends.shape[0] < 2 * sizes.shape[0] + 1:
        raise ValueError("append_groups: no room for the ends")
    n = 0
    for i in range(sizes.shape[0]):
        if fill > 0 and fill + sizes[i] > limit:
            ends[n] = i
            n += 1
            fill = 0
        fill += sizes[i]
        if fill >= limit:
            ends[n] = i + 1
            n += 1
            fill = 0
    return n


@kernel(nogil=True)
def gather(
    src0: Arr, src1: Arr, src2: Arr, which: Arr, pos: Arr, size: Arr, lo: int, dest: Arr
) -> None:
    """Batches ``lo..`` end to end into ``dest`` (until it is full): batch i is ``size[i]``
    bytes at ``pos[i]`` of ``src0``, ``src1`` or ``src2`` as ``which[i]`` says."""
    q = 0
    i = lo
    while q < dest.shape[0]:
        n = size[i]
        p = pos[i]
        if which[i] == 0:
            dest[q : q + n] = src0[p : p + n]
        elif which[i] == 1:
            dest[q : q + n] = src1[p : p + n]
        else:
            dest[q : q + n] = src2[p : p + n]
        q += n
        i += 1


@kernel(nogil=True)
def fitting(size: Arr, last: Arr, lo: int, used: int, base: int, max_bytes: int) -> int:
    """The first batch from ``lo`` that would not fit a segment at ``base`` already holding
    ``used`` bytes: its bytes would pass ``max_bytes`` or its last offset the 32-bit relative
    range. ``size.shape[0]`` when every batch fits."""
    i = lo
    while i < size.shape[0]:
        if used + size[i] > max_bytes or last[i] - base > INT_MAX:
            return i
        used += size[i]
        i += 1
    return i


@dataclass
class CleanedOutput:
    """The ``.cleaned`` segments one group is written into, in offset order: one, or several
    when the output rolls (KAFKA-20036). ``make`` creates an empty one at a base offset."""

    make: Callable[[int], LogSegment]
    segments: list[LogSegment] = field(default_factory=list)

    def new(self, base_offset: int) -> LogSegment:
        seg = self.make(base_offset)
        self.segments.append(seg)
        return seg

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        """Remove the segments not swapped in yet (those still ``.cleaned``)."""
        for seg in self.segments:
            if seg.temp_suffix == CLEANED_SUFFIX:
                seg.delete()


class CleanedSegmentWriter:
    """Appends retained batches to a group's ``.cleaned`` segments, a piece at a time, rolling
    into a new segment when the next batch does not fit (see the module doc)."""

    def __init__(
        self,
        output: CleanedOutput,
        base_offset: int,
        stats: CleanerStats,
        throttler: Throttler | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.output = output
        self.segment = output.new(base_offset)
        self.stats = stats
        self.throttler = throttler
        self.max_bytes = MAX_SEGMENT_BYTES if max_bytes is None else max_bytes
        self._buf = bytearray()
        self._first = -1  # base offset of the first batch queued in _buf
        self._reset()

    def _reset(self) -> None:
        self._buf.clear()
        self._first = -1
        self._largest = -1
        self._max_ts = NO_TIMESTAMP
        self._max_ts_offset = -1

    def flush(self) -> None:
        """Append what is queued."""
        if self._buf:
            self._append(self._buf, self._first, self._largest, self._max_ts, self._max_ts_offset)
            self._reset()

    def finish(self) -> None:
        """Append what is queued and close the last segment's indexes, as a roll does."""
        self.flush()
        self.segment.on_become_inactive()

    def _roll(self, base_offset: int) -> None:
        """Close the current segment (Kafka's ``onBecomeInactiveSegment``, flushed) and go on
        in a new one at ``base_offset``; the caller has appended what belongs to the old one."""
        self.segment.on_become_inactive()
        self.segment = self.output.new(base_offset)

    def index_aborted(self, txns: list[AbortedTxn]) -> None:
        """The ``.txnindex`` entries of the ABORT markers a chunk kept, each into the segment
        that holds its marker (the last one based at or below the marker's offset)."""
        segments = self.output.segments
        for txn in txns:
            i = len(segments) - 1
            while i > 0 and segments[i].base_offset > txn.last_offset:
                i -= 1
            segments[i].txn_index.append(txn)
        txns.clear()

    def _append(
        self,
        data: bytes | bytearray | memoryview,
        first: int,
        largest: int,
        max_ts: int,
        ts_offset: int,
    ) -> None:
        size = len(data)
        if self.segment.size and self.segment.index_entry_blocked():
            self._roll(first)  # Kafka's append to a full index would fail
        self.segment.append(
            data,
            largest_offset=largest,
            largest_timestamp=max_ts,
            offset_of_max_timestamp=ts_offset,
        )
        self.stats.bytes_written += size
        if self.throttler is not None:
            self.throttler.maybe_throttle(size)

    def write(self, arr: U8, d: ChunkDecision) -> None:
        """Append the chunk's retained batches in order."""
        b = d.batches
        out = np.flatnonzero(d.action != Action.DROP)
        if out.size == 0:
            return
        actions = d.action[out]
        rows = b[out]
        which = np.zeros(out.size, dtype=np.int64)  # 0: arr, 1: rebuilt, 2: emptied
        pos = rows[:, k.B_POS].copy()
        size = rows[:, k.B_SIZE].copy()
        max_ts = rows[:, k.B_MAX_TIMESTAMP].copy()
        rebuilt = _NO_BYTES
        last = rows[:, k.B_LAST_OFFSET].copy()
        rb = np.flatnonzero(actions == Action.REBUILD)
        old_rb = rb[legacy_rows(rows[rb])] if is_legacy(rows[rb]) else rb[:0]
        rb = np.setdiff1d(rb, old_rb) if old_rb.size else rb
        if rb.size:
            kept_idx = np.flatnonzero(d.keep)
            r = rebuild_batches(
                d.payload,
                d.records,
                kept_idx,
                d.record_batch[kept_idx],
                b,
                out[rb],
                d.stamp_horizon,
            )
            rebuilt = r.buf
            which[rb], pos[rb], size[rb], max_ts[rb] = 1, r.starts, r.ends - r.starts, r.max_ts
        if old_rb.size:  # legacy messages, rebuilt in their magic and codec after the v2 ones
            kept_idx = np.flatnonzero(d.keep)
            lr, lasts = rebuild_legacy(
                d.payload, d.records, kept_idx, d.record_batch[kept_idx], b, out[old_rb]
            )
            which[old_rb], pos[old_rb] = 1, lr.starts + rebuilt.shape[0]
            size[old_rb], max_ts[old_rb], last[old_rb] = lr.ends - lr.starts, lr.max_ts, lasts
            rebuilt = np.concatenate([rebuilt, lr.buf])
        emptied = _NO_BYTES
        em = np.flatnonzero(actions == Action.EMPTY)
        if em.size:
            emptied = np.frombuffer(b"".join(_empty_batch(b[i]) for i in out[em]), np.uint8)
            which[em], pos[em], size[em] = 2, np.arange(em.size) * k.HEADER_SIZE, k.HEADER_SIZE
        # a legacy wrapper rebuilt keeps its first offset at or below its first kept record
        first = rows[:, k.B_BASE_OFFSET]
        self._put(_Pieces((arr, rebuilt, emptied), which, pos, size, max_ts, first, last))
        copy = actions == Action.COPY
        written = copy | (actions == Action.REBUILD)
        self.stats.messages_written += int(d.kept[out[written]].sum())
        self.stats.add(batches_copied=int(copy.sum()), batches_rebuilt=int(out.size - copy.sum()))

    def _put(self, p: _Pieces) -> None:
        """Append the batches, rolling before each one that does not fit the segment."""
        n = int(p.size.shape[0])
        lo = 0
        while lo < n:
            used = self.segment.size + len(self._buf)
            base = self.segment.base_offset
            hi = int(fitting(p.size, p.last, lo, used, base, self.max_bytes))
            if hi == lo:
                if used == 0 and int(p.last[lo]) - base <= INT_MAX:
                    hi = lo + 1  # an empty segment takes any one batch its indexes can hold
                else:
                    self.flush()
                    self._roll(int(p.first[lo]))
                    continue
            self._put_fitting(p, lo, hi)
            lo = hi

    def _put_fitting(self, p: _Pieces, lo0: int, n: int) -> None:
        """Batches ``lo0..n-1`` in appends of about ``APPEND_BYTES``; the last stays queued."""
        lo = lo0
        ends = np.empty(2 * (n - lo0) + 1, dtype=np.int64)
        ends = ends[: append_groups(p.size[lo0:n], len(self._buf), APPEND_BYTES, ends)] + lo0
        for hi in [*ends.tolist(), None]:
            end = n if hi is None else hi
            if end > lo:
                data = p.bytes(lo, end)
                top = lo + int(np.argmax(p.max_ts[lo:end]))
                first, largest, mts, mts_offset = (
                    int(p.first[lo]),
                    int(p.last[end - 1]),
                    int(p.max_ts[top]),
                    int(p.last[top]),
                )
                if hi is not None and not self._buf:
                    self._append(data, first, largest, mts, mts_offset)  # whole: no copy
                else:
                    if not self._buf:
                        self._first = first
                    self._buf += data
                    self._largest = max(self._largest, largest)
                    if mts > self._max_ts or self._max_ts_offset < 0:
                        self._max_ts, self._max_ts_offset = mts, mts_offset
            if hi is not None:
                self.flush()
            lo = end


@dataclass(frozen=True)
class _Pieces:
    """A chunk's output batches in order: batch i is ``srcs[which[i]][pos[i]:][:size[i]]``."""

    srcs: tuple[U8, U8, U8]
    which: I64
    pos: I64
    size: I64
    max_ts: I64
    first: I64
    last: I64

    def bytes(self, lo: int, hi: int) -> memoryview:
        """Batches ``lo..hi-1``: a slice of the source when they lie there end to end."""
        which, pos = self.which[lo:hi], self.pos[lo:hi]
        start, stop = int(pos[0]), int(pos[-1] + self.size[hi - 1])
        total = int(self.size[lo:hi].sum())
        if (which == which[0]).all() and stop - start == total:
            return self.srcs[int(which[0])].data[start:stop]
        dest = np.empty(total, dtype=np.uint8)
        gather(*self.srcs, self.which, self.pos, self.size, lo, dest)
        return dest.data


def _flags(row: I64) -> tuple[bool, bool, bool]:
    attrs = int(row[k.B_ATTRIBUTES])
    return (
        bool(attrs & ATTR_TIMESTAMP_TYPE),
        bool(attrs & ATTR_TRANSACTIONAL),
        bool(attrs & ATTR_CONTROL),
    )


def _empty_batch(row: I64) -> bytes:
    """Kafka's ``writeEmptyHeader``: offsets, producer fields and max timestamp kept."""
    log_append_time, transactional, control = _flags(row)
    return build_empty_batch(
        base_offset=int(row[k.B_BASE_OFFSET]),
        last_offset=int(row[k.B_LAST_OFFSET]),
        max_timestamp=int(row[k.B_MAX_TIMESTAMP]),
        log_append_time=log_append_time,
        transactional=transactional,
        control=control,
        producer_id=int(row[k.B_PRODUCER_ID]),
        producer_epoch=int(row[k.B_PRODUCER_EPOCH]),
        base_sequence=int(row[k.B_BASE_SEQUENCE]),
        partition_leader_epoch=int(row[k.B_LEADER_EPOCH]),
    )
