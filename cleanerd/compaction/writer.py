"""Writing what pass 2 keeps into the ``.cleaned`` segment (reference 3.12, 3.13).

Runs of consecutive COPY batches go out as one slice of the source segment's mapped bytes;
REBUILD batches are re-encoded with their kept records (same base and last offset, producer
fields, codec at its default level, timestamp type, leader epoch; the delete horizon stamped or
carried); EMPTY batches become 61-byte headers. Output is appended in pieces of about
``APPEND_BYTES``, each one ``LogSegment.append`` (which adds index entries as Kafka's does).

Rebuilt batches come from ``rebuild`` (a numba kernel splices the kept records; no record is
decoded into Python objects).
"""

from __future__ import annotations

import itertools

import numpy as np

from cleanerd.compaction.filter import Action, ChunkDecision
from cleanerd.compaction.rebuild import rebuild_batches
from cleanerd.compaction.stats import CleanerStats
from cleanerd.compaction.throttle import Throttler
from cleanerd.format import kernels as k
from cleanerd.format.builder import build_empty_batch
from cleanerd.format.header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
)
from cleanerd.format.reader import I64, U8
from cleanerd.storage.segment import LogSegment

APPEND_BYTES = 256 << 10
"""Target size of one append to the cleaned segment (Kafka appends one write buffer at a time)."""

NO_TIMESTAMP = -1
_COPY = int(Action.COPY)  # plain ints for the per-batch loop (enum lookups are slow)
_EMPTY = int(Action.EMPTY)


class CleanedSegmentWriter:
    """Appends retained batches to one ``.cleaned`` segment, a piece at a time."""

    def __init__(
        self, segment: LogSegment, stats: CleanerStats, throttler: Throttler | None = None
    ) -> None:
        self.segment = segment
        self.stats = stats
        self.throttler = throttler
        self._buf = bytearray()
        self._reset()

    def _reset(self) -> None:
        self._buf.clear()
        self._largest = -1
        self._max_ts = NO_TIMESTAMP
        self._max_ts_offset = -1

    def _add(self, data: bytes | memoryview, last_offset: int, max_ts: int, ts_offset: int) -> None:
        """Queue bytes of whole batches; ``ts_offset`` is the offset of their max timestamp."""
        if self._buf and len(self._buf) + len(data) > APPEND_BYTES:
            self.flush()
        if not self._buf and len(data) >= APPEND_BYTES:
            self._append(data, last_offset, max_ts, ts_offset)  # big piece: no extra copy
            return
        self._buf += data
        self._largest = max(self._largest, last_offset)
        if max_ts > self._max_ts or self._max_ts_offset < 0:
            self._max_ts, self._max_ts_offset = max_ts, ts_offset
        if len(self._buf) >= APPEND_BYTES:
            self.flush()

    def flush(self) -> None:
        """Append what is queued."""
        if self._buf:
            self._append(self._buf, self._largest, self._max_ts, self._max_ts_offset)
            self._reset()

    def _append(
        self, data: bytes | bytearray | memoryview, largest: int, max_ts: int, ts_offset: int
    ) -> None:
        size = len(data)
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
        kept_idx = np.flatnonzero(d.keep)
        kept_rb = d.record_batch[kept_idx]
        actions = d.action[out]
        copy = actions == Action.COPY
        rebuild_rows = out[actions == Action.REBUILD]
        rebuilt: dict[int, bytes] = {}
        if rebuild_rows.size:
            built = rebuild_batches(
                d.payload, d.records, kept_idx, kept_rb, b, rebuild_rows, d.stamp_horizon
            )
            rebuilt = dict(zip(rebuild_rows.tolist(), built, strict=True))
        # a new piece starts at every non-copy batch, and at a copy batch after a gap or non-copy
        starts = np.ones(out.size, dtype=np.bool_)
        starts[1:] = ~(copy[1:] & copy[:-1] & (np.diff(out) == 1))
        bounds = [*np.flatnonzero(starts).tolist(), int(out.size)]
        out_l = out.tolist()
        actions_l = actions.tolist()
        last_l = b[:, k.B_LAST_OFFSET].tolist()
        for s, e in itertools.pairwise(bounds):
            first = out_l[s]
            if actions_l[s] == _COPY:
                self._copy_run(arr, b, first, out_l[e - 1])
                continue
            if actions_l[s] == _EMPTY:
                row = b[first]
                data = _empty_batch(row)
                max_ts = int(row[k.B_MAX_TIMESTAMP])
            else:
                data = rebuilt[first]
                max_ts = int.from_bytes(data[35:43], "big", signed=True)
            last = last_l[first]
            self._add(data, last, max_ts, last)
        written = copy | (actions == Action.REBUILD)
        self.stats.messages_written += int(d.kept[out[written]].sum())
        self.stats.add(batches_copied=int(copy.sum()), batches_rebuilt=int(out.size - copy.sum()))

    def _copy_run(self, arr: U8, b: I64, first: int, last: int) -> None:
        """Batches ``first..last`` (consecutive in ``arr``) as slices of about APPEND_BYTES."""
        pos = b[first : last + 1, k.B_POS]
        ends = pos + b[first : last + 1, k.B_SIZE]
        i = 0
        n = last - first + 1
        mv = arr.data
        while i < n:
            # batches up to the one that crosses APPEND_BYTES from this piece's start
            j = int(np.searchsorted(ends, int(pos[i]) + APPEND_BYTES, side="left"))
            j = min(max(j, i), n - 1)
            rows = b[first + i : first + j + 1]
            ts = rows[:, k.B_MAX_TIMESTAMP]
            top = int(np.argmax(ts))
            self._add(
                mv[int(pos[i]) : int(ends[j])],
                int(rows[-1, k.B_LAST_OFFSET]),
                int(ts[top]),
                int(rows[top, k.B_LAST_OFFSET]),
            )
            i = j + 1


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
