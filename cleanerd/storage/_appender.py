"""The append half of a partition log: appends, the open transactions they track, and rolls.

``PartitionLog`` is this plus loading, reading and swapping. Every append path (records,
transaction markers, ready-made batches as a replica appends them) goes through
``_append_tracked``, which keeps the open transactions and writes the ``.txnindex`` entry of
each ABORT marker after the marker is in the log, as Kafka's append path does. Appends and
rolls run under the partition's writer lock (the writer contract, docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BatchScan,
    Compression,
    Record,
    build_batch,
    build_end_txn_marker,
    scan_batches,
    set_base_offset,
)
from cleanerd.format import kernels as k
from cleanerd.format import layout as at
from cleanerd.storage import _txn_check as txn_check
from cleanerd.storage._leader_epoch import LeaderEpochCache
from cleanerd.storage._producer_state import (
    ProducerEntry,
    ProducerState,
    SegmentFold,
    fold_segment,
)
from cleanerd.storage._regular import truncate_regular
from cleanerd.storage._rolling import is_idle, jitter_ms, should_roll
from cleanerd.storage._segment import LogSegment
from cleanerd.storage._segment_times import complete_time_index
from cleanerd.storage._writer_lock import PartitionWriterLock
from cleanerd.topics import LogConfig

__all__ = ["AppendInfo", "Appender"]

if TYPE_CHECKING:  # PartitionLog's module imports this one
    from cleanerd.storage._partition import LoadReport


@dataclass(frozen=True)
class AppendInfo:
    """Offsets given to an append."""

    first_offset: int
    last_offset: int


class Appender:
    """Appends and rolls of ``PartitionLog`` (which sets these attributes when it opens)."""

    directory: Path
    config: LogConfig
    clock: Callable[[], int]
    segments: list[LogSegment]
    writer_lock: PartitionWriterLock
    leader_epochs: LeaderEpochCache
    report: LoadReport
    _tail_checked: bool
    _txn_firsts: dict[int, int] | None

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def producer_state(self, fold: SegmentFold = fold_segment) -> ProducerState:
        raise NotImplementedError  # PartitionLog's: a walk of every segment, reused

    # --- appending --------------------------------------------------------------------------
    def append(
        self,
        records: Sequence[Record],
        *,
        compression: Compression = Compression.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        log_append_time: bool = False,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Append records as one batch; offsets are assigned from the log end (the records'
        own offsets are ignored), timestamps kept (LogAppendTime stamps the clock)."""
        if not records:
            raise ValueError("append needs at least one record")
        with self.writer_lock:
            first = self._prepare_append()
            now = self.clock()
            placed = [
                Record(
                    first + i, now if log_append_time else r.timestamp, r.key, r.value, r.headers
                )
                for i, r in enumerate(records)
            ]
            epoch = self.leader_epochs.assign(leader_epoch, first)
            data = build_batch(
                placed,
                compression=compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                transactional=transactional,
                log_append_time=log_append_time,
                partition_leader_epoch=epoch,
            )
            return self._append_tracked(data)

    def append_marker(
        self,
        *,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        timestamp: int,
        coordinator_epoch: int = 0,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker; an ABORT gets its ``.txnindex`` entry, as in Kafka."""
        with self.writer_lock:
            offset = self._prepare_append()
            data = build_end_txn_marker(
                commit=commit,
                offset=offset,
                timestamp=timestamp,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                partition_leader_epoch=self.leader_epochs.assign(leader_epoch, offset),
            )
            return self._append_tracked(data)

    def append_batches(self, data: bytes, *, leader_epoch: int | None = None) -> AppendInfo:
        """Append ready-made v2 batches (validated: CRC, lengths), moved to the log end."""
        scan = scan_batches(data, path="<appended batches>")
        scan.raise_error()
        if len(scan) == 0:
            raise ValueError("append_batches needs at least one batch")
        with self.writer_lock:
            next_offset = self._prepare_append()
            out = bytearray(data)
            b = scan.batches
            epoch = self.leader_epochs.assign(leader_epoch, next_offset)
            first = next_offset
            for i in range(len(scan)):
                pos = int(b[i, k.B_POS])
                set_base_offset(out, next_offset, pos)
                epoch_at = pos + at.LEADER_EPOCH_AT
                out[epoch_at : epoch_at + 4] = epoch.to_bytes(4, "big", signed=True)
                next_offset += int(b[i, k.B_LAST_OFFSET] - b[i, k.B_BASE_OFFSET]) + 1
            info = self._append_tracked(bytes(out))
            return AppendInfo(first, info.last_offset)

    def _prepare_append(self) -> int:
        """Before the first append of this process, cut a partial batch a crashed writer left."""
        seg = self.active_segment
        if not self._tail_checked:
            next_offset, end = seg.last_batch_end()
            if end < seg.refresh_size():
                self.report.truncated_tail_bytes = seg.size - end
                truncate_regular(seg.log_path, end)
                seg.refresh_size()
                seg.offset_index.truncate_to(next_offset)
                seg.time_index.truncate_to(next_offset)
                seg.txn_index.truncate_to(next_offset)
            self._tail_checked = True
        return seg.next_offset()

    def _open_txns(self) -> dict[int, int]:
        """Open transactions' first offsets: one log scan, then kept up to date by appends.

        The scan also repairs the active segment's ``.txnindex``: a writer that died between
        appending an ABORT marker and its index entry left the entry out (Kafka's recovery of
        the unflushed tail does the same)."""
        if self._txn_firsts is None:
            state = self.producer_state()
            active = self.active_segment.base_offset
            if any(
                p.base_offset == active for p in txn_check.txn_index_problems(self.segments, state)
            ):
                txn_check.rebuild(self.segments, state, {active})
            self._txn_firsts = {
                p.producer_id: p.current_txn_first_offset
                for p in state.producers.values()
                if p.current_txn_first_offset >= 0
            }
        return self._txn_firsts

    def _append_tracked(self, data: bytes) -> AppendInfo:
        """Append placed batches, keeping the open transactions and indexing each ABORT marker
        among them as ``append_marker`` always has: after the marker is in the log, with the
        transaction's first offset and the LSO then (every append path goes through here)."""
        scan = scan_batches(data, path="<append>", check_crc=False)
        attrs = scan.batches[:, k.B_ATTRIBUTES]
        with_pid = scan.batches[:, k.B_PRODUCER_ID] >= 0
        if not (with_pid & ((attrs & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) != 0)).any():
            return self._append_bytes(data, scan)
        txns = self._open_txns()
        state = ProducerState(
            {pid: ProducerEntry(pid, current_txn_first_offset=first) for pid, first in txns.items()}
        )
        state.apply(np.frombuffer(data, dtype=np.uint8), scan.batches, "<append>")
        info = self._append_bytes(data, scan)
        for txn in state.aborted:
            self.active_segment.txn_index.append(txn)
        self._txn_firsts = {
            pid: e.current_txn_first_offset
            for pid, e in state.producers.items()
            if e.current_txn_first_offset >= 0
        }
        return info

    def _append_bytes(self, data: bytes, scan: BatchScan | None = None) -> AppendInfo:
        if scan is None:
            scan = scan_batches(data, path="<append>")
        b = scan.batches
        first = int(b[0, k.B_BASE_OFFSET])
        last = int(b[-1, k.B_LAST_OFFSET])
        max_row = int(np.argmax(b[:, k.B_MAX_TIMESTAMP]))
        max_ts = int(b[max_row, k.B_MAX_TIMESTAMP])
        self._maybe_roll(len(data), max_ts, first, last)
        self.active_segment.append(
            data,
            largest_offset=last,
            largest_timestamp=max_ts,
            offset_of_max_timestamp=int(b[max_row, k.B_LAST_OFFSET]),
        )
        return AppendInfo(first, last)

    # --- rolling ----------------------------------------------------------------------------
    def roll_if_idle(self, now_ms: int, max_lag_ms: int) -> bool:
        """Roll the active segment if ``rolling.is_idle``; True if it rolled (KIP-354)."""
        with self.writer_lock:
            self._prepare_append()  # no torn tail may end up inside an inactive segment
            seg = self.active_segment
            return is_idle(seg, now_ms, max_lag_ms) and self.roll() is not seg

    def _jitter_ms(self, base_offset: int) -> int:
        return jitter_ms(self.config, self.directory.name, base_offset)

    def should_roll(self, size: int, max_timestamp: int, last_offset: int) -> bool:
        """Kafka's shouldRoll for an append of ``size`` bytes."""
        seg = self.active_segment
        jitter = self._jitter_ms(seg.base_offset)
        return should_roll(seg, self.config, jitter, size, max_timestamp, last_offset, self.clock())

    def _maybe_roll(self, size: int, max_timestamp: int, first: int, last: int) -> None:
        seg = self.active_segment
        if self.should_roll(size, max_timestamp, last):
            self.roll(first)
        elif seg.size == 0 and not seg.can_hold(last):
            seg.delete()
            self.segments[-1] = LogSegment.create(
                self.directory, first, self.config, created_ms=self.clock()
            )

    def roll(self, new_base: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at the log end (under the writer lock)."""
        with self.writer_lock:
            seg = self.active_segment
            base = seg.next_offset() if new_base is None else new_base
            if seg.size == 0:
                return seg
            complete_time_index(seg)
            seg.on_become_inactive()
            seg.close()
            new = LogSegment.create(self.directory, base, self.config, created_ms=self.clock())
            self.segments.append(new)
            return new

    def unroll(self, closed: LogSegment, started: LogSegment) -> bool:
        """Take back a ``roll`` of ``closed`` that started ``started``, if nobody has used it:
        ``started`` is still the empty active segment and ``closed`` the one before it. A
        failed one-shot cleaning calls this so that its roll is not left behind; a segment a
        writer appended to, or rolled past, is the writer's and stays. True if undone."""
        with self.writer_lock:  # up to date with other processes' appends and rolls
            segs = self.segments
            if len(segs) < 2 or segs[-1] is not started or segs[-2] is not closed:
                return False
            if started.refresh_size() != 0:
                return False
            started.delete()
            segs.pop()
            return True
