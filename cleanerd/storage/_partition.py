"""One partition directory (``<topic>-<partition>``): its segments, appends, rolls and swaps.

The writer contract (docs/architecture.md): writers only append to the active segment (highest
base offset) and roll by starting a new one, under ``writer_lock``; the cleaner never touches the
active segment and replaces older ones only by the atomic renames of ``swap.replace_segments``.
``writer_lock`` also excludes other processes: taking it brings the segment list up to date
with what they did (``segment_list``); letting go writes our buffered index entries out.

Every append path (records, transaction markers, ready-made batches as a replica appends them)
goes through ``_append_tracked``, which keeps the open transactions and writes the ``.txnindex``
entry of each ABORT marker after the marker is in the log, as Kafka's append path does.

Opening recovers interrupted swaps, which is the owner's job: a writer beside a running daemon
opens with ``recover=False``, since a ``.cleaned`` file there may be a cleaning in progress
(written outside the writer lock; only its swap takes it).
"""

from __future__ import annotations

import bisect
import errno
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BatchScan,
    Compression,
    Record,
    RecordBatch,
    build_batch,
    build_end_txn_marker,
    kernels as k,
    layout as at,
    scan_batches,
    set_base_offset,
)
from cleanerd.storage import _txn_check as txn_check
from cleanerd.storage._checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    checkpointed_offset,
    fsync_dir,
)
from cleanerd.storage._errors import StorageError
from cleanerd.storage._leader_epoch import LeaderEpochCache
from cleanerd.storage._logdir import DELETE_DIR_SUFFIX, parse_partition_dir_name, partition_of
from cleanerd.storage._producer_state import (
    LastBatch,
    ProducerEntry,
    ProducerSnapshot,
    ProducerState,
    SegmentFold,
    fold_segment,
    take_snapshot,
)
from cleanerd.storage._regular import truncate_regular
from cleanerd.storage._rolling import is_idle, jitter_ms, should_roll
from cleanerd.storage._segment import FileKey, LogSegment
from cleanerd.storage._segment_list import (
    SegmentWatch,
    check_offsets_across,
    list_logs,
    open_segment,
)
from cleanerd.storage._segment_times import complete_time_index
from cleanerd.storage._swap import RecoveryReport, recover_temp_files, replace_segments
from cleanerd.storage._topic_partition import TopicPartition
from cleanerd.storage._writer_lock import PartitionWriterLock
from cleanerd.topics import LogConfig

__all__ = ["AppendInfo", "LoadReport", "PartitionLog", "wall_clock_ms"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class LoadReport:
    """What opening the partition repaired."""

    recovery: RecoveryReport = field(default_factory=RecoveryReport)
    rebuilt_indexes: list[str] = field(default_factory=list)
    rebuilt_txn_indexes: list[str] = field(default_factory=list)
    truncated_tail_bytes: int = 0


@dataclass(frozen=True)
class AppendInfo:
    """Offsets given to an append."""

    first_offset: int
    last_offset: int


class PartitionLog:
    """A partition's log on disk; safe for writers in several threads and processes plus
    readers and the cleaner."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        recover: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.topic_partition: TopicPartition = partition_of(self.directory)
        self.config = config or LogConfig()
        self.clock = clock
        self.report = LoadReport()
        self._tail_checked = False
        self.leader_epochs = LeaderEpochCache(self.directory)
        self._txn_firsts: dict[int, int] | None = None  # producer id -> its open txn's first offset
        self._producers: ProducerSnapshot | None = None
        # segments the producer-state walks since ``begin_checks`` checked whole, unclaimed
        self._unclaimed_checks: dict[int, tuple[LogSegment, FileKey, LastBatch]] = {}
        self._checks_epoch = 0
        self._txn_rebuilds: set[int] = set()  # segments whose indexes were rebuilt on open
        self.segments: list[LogSegment] = []
        self._watch = SegmentWatch(self.directory)
        self.writer_lock = PartitionWriterLock(
            self.directory, on_acquire=self._sync_segments, on_release=self._publish
        )
        with self.writer_lock:  # recovery must not race another process's swap
            self._load(recover)
            self._watch.remember()

    @classmethod
    def create(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        recover: bool = True,
    ) -> PartitionLog:
        """Open the partition, making its directory (parents too) first when it is missing.

        A new directory appears whole, its first segment in it (``_make_partition_dir``), so
        a daemon surveying the log dir never finds a half-made partition.
        """
        directory = Path(directory)
        if not directory.is_dir():
            _make_partition_dir(directory, config or LogConfig(), clock())
        return cls(directory, config, clock=clock, recover=recover)

    # --- loading ----------------------------------------------------------------------------
    def _load(self, recover: bool) -> None:
        if recover:
            self.report.recovery = recover_temp_files(self.directory, self.config)
        bases = sorted(list_logs(self.directory))
        self.segments = [self._open_segment(base) for base in bases] or [self._first_segment()]
        self._rebuild_txn_indexes()

    def _open_segment(self, base: int) -> LogSegment:
        seg, rebuilt = open_segment(self.directory, base, self.config, self.clock())
        if rebuilt is not None:
            self.report.rebuilt_indexes.append(rebuilt)
            self._txn_rebuilds.add(base)
        return seg

    def _rebuild_txn_indexes(self) -> None:
        """Kafka's recovery rebuilds all three indexes of a segment: the ``.txnindex`` of each
        segment whose other indexes were rebuilt comes from the ABORT markers, through the
        producer state of the whole log (a transaction may start in an earlier segment)."""
        if not self._txn_rebuilds:
            return
        pending, self._txn_rebuilds = self._txn_rebuilds, set()
        state = self.producer_state()
        for path in txn_check.rebuild(self.segments, state, pending):
            self.report.rebuilt_txn_indexes.append(path.name)

    def _first_segment(self) -> LogSegment:
        start = _log_start(self.directory.parent, self.topic_partition)
        return LogSegment.create(self.directory, start, self.config, created_ms=self.clock())

    def _sync_segments(self) -> None:
        """Outermost lock acquire: take in the rolls, swaps and deletions of other processes."""
        if self._watch.stale(self.segments):
            fresh = self._watch.reconcile(self.segments, self._open_segment)
            if fresh is not None:
                self.segments = fresh or [self._first_segment()]
                self._tail_checked = False  # a writer that died may have left a torn tail
                self._txn_firsts = None
                self._rebuild_txn_indexes()

    def _publish(self) -> None:
        """Outermost lock release: buffered index entries go to disk for other processes."""
        if self.segments:
            self.active_segment.offset_index.close()
            self.active_segment.time_index.close()
            self._watch.settle()

    def _checkpointed(self, name: str) -> int | None:
        return checkpointed_offset(self.directory.parent, name, self.topic_partition)

    # --- offsets ----------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        """The checkpointed log start offset when it lies inside the log, else the first base."""
        first = self.segments[0].base_offset
        cp = self._checkpointed(LOG_START_OFFSET_CHECKPOINT)
        if cp is not None and first <= cp <= self.log_end_offset:
            return cp
        return first

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset()

    @property
    def high_watermark(self) -> int:
        """From ``replication-offset-checkpoint`` when the log dir has one, else the LEO."""
        leo = self.log_end_offset
        hw = self._checkpointed(REPLICATION_OFFSET_CHECKPOINT)
        return leo if hw is None else min(hw, leo)

    def producer_state(self, fold: SegmentFold = fold_segment) -> ProducerState:
        """Producers and transactions, from a walk over every batch header (``fold`` walks one
        segment). The last walk is reused while the segments are unchanged (``take_snapshot``)."""
        snap = take_snapshot(list(self.segments), fold, self._producers)
        if snap is not self._producers:
            walked = {id(s): key for s, key in zip(snap.segments, snap.keys, strict=True)}
            kept = {
                i: check
                for i, check in self._unclaimed_checks.items()
                if walked.get(i) == check[1]  # held here, so the id is still this object's
            }
            for i, last in zip(snap.checked, snap.last_batches, strict=True):
                kept[id(snap.segments[i])] = (snap.segments[i], snap.keys[i], last)
            self._unclaimed_checks = kept
        self._producers = snap
        return snap.state.copy()

    def begin_checks(self) -> int:
        """Start recording which segments the producer-state walks check whole (a cleaning's
        plan calls this before its walk); returns the token ``claim_checked_segments`` takes.
        What earlier walks checked is forgotten: it was not checked in this cleaning."""
        self._checks_epoch += 1
        self._unclaimed_checks = {}
        return self._checks_epoch

    def claim_checked_segments(self, epoch: int) -> frozenset[int]:
        """``id()`` of the segments whose every batch (CRC included) a producer-state walk
        checked since ``begin_checks`` returned ``epoch``, unchanged since (same object, same
        file key); empty when another ``begin_checks`` came between. The claim empties the set,
        so one walk's checks serve one cleaning. Below the active segment a file changes only
        by a swap, deletion or truncation (new objects or a new key), so the cleaning that
        claims them need not check those bytes again."""
        claimed, self._unclaimed_checks = self._unclaimed_checks, {}
        if epoch != self._checks_epoch:
            return frozenset()
        return frozenset(self._still_checked(claimed))

    def check_offsets_across(self) -> None:
        """``segment_list.check_offsets_across`` of the segments, taking the last batch of
        each segment a producer-state walk checked whole (still unclaimed, file unchanged)
        from that walk instead of walking it again."""
        check_offsets_across(self.segments, self._still_checked(self._unclaimed_checks))

    def _still_checked(
        self, checks: dict[int, tuple[LogSegment, FileKey, LastBatch]]
    ) -> dict[int, LastBatch]:
        """Of ``checks``, those of segments still in the log with their file unchanged (same
        object, same file key): ``id()`` -> the segment's last batch."""
        ids = {id(s) for s in self.segments}
        return {
            i: last for i, (seg, key, last) in checks.items() if i in ids and seg.file_key() == key
        }

    def last_stable_offset(self, fold: SegmentFold = fold_segment) -> int:
        return self.producer_state(fold).last_stable_offset(self.high_watermark)

    def check_txn_indexes(
        self, fold: SegmentFold = fold_segment, *, repair: bool = True
    ) -> list[txn_check.TxnIndexProblem]:
        """Each ``.txnindex`` against the log's ABORT markers (``txn_check``); with ``repair``
        the indexes that disagree are rebuilt from the markers. The cleaner calls this before
        it trusts the indexes: no cleaning may take an aborted transaction for committed."""
        with self.writer_lock:
            state = self.producer_state(fold)
            problems = txn_check.txn_index_problems(self.segments, state)
            if problems and repair:
                txn_check.rebuild(self.segments, state, {p.base_offset for p in problems})
            return problems

    def segment_for(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (floor by base offset)."""
        bases = [s.base_offset for s in self.segments]
        return max(bisect.bisect_right(bases, offset) - 1, 0)

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
    def roll_if_idle(
        self,
        now_ms: int,
        max_lag_ms: int,
        *,
        lead_ms: int = 0,
        active_base: int | None = None,
    ) -> bool:
        """Roll the active segment if ``rolling.is_idle`` (``lead_ms`` early); True if it
        rolled (KIP-354). Decided under the writer lock, on the segment list as it is then:
        with ``active_base``, only the segment of that base offset (the one the caller looked
        at) is rolled, so a writer's roll in between is not followed by a second one; an empty
        segment is never rolled."""
        with self.writer_lock:
            self._prepare_append()  # no torn tail may end up inside an inactive segment
            seg = self.active_segment
            if active_base is not None and seg.base_offset != active_base:
                return False  # rolled since the caller looked: that roll was the one it wanted
            return is_idle(seg, now_ms, max_lag_ms, lead_ms) and self.roll() is not seg

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

    # --- reading ----------------------------------------------------------------------------
    def read(self, start_offset: int | None = None) -> Iterator[RecordBatch]:
        """Every batch holding offsets >= ``start_offset``; raises at the first corrupt one."""
        start = self.log_start_offset if start_offset is None else start_offset
        for seg in list(self.segments[self.segment_for(start) :]):
            arr, scan = seg.read_from(start)
            b = scan.batches
            for i in range(len(scan)):
                prev = int(b[i - 1, k.B_LAST_OFFSET]) if i else -1
                yield RecordBatch(arr, b[i], scan.header(i), str(seg.log_path), prev)
            scan.raise_error()

    def records(self, start_offset: int | None = None) -> Iterator[Record]:
        """Every record from ``start_offset`` (slow path for tools and tests)."""
        start = self.log_start_offset if start_offset is None else start_offset
        for batch in self.read(start):
            yield from (r for r in batch.records() if r.offset >= start)

    # --- cleaning -----------------------------------------------------------------------------
    def replace_segments(self, new: Sequence[LogSegment], old: Sequence[LogSegment]) -> None:
        """Swap ``.cleaned`` segments (one or more) in for inactive ``old`` segments (swap
        protocol, N -> M)."""
        with self.writer_lock:  # the list is now up to date with other processes
            live = {s.base_offset for s in self.segments[:-1]}
            gone = [s.log_path.name for s in old if s.base_offset not in live]
            if gone:
                raise StorageError(f"cannot replace {gone}: not inactive segments (any more)")
            replace_segments(new, old)
            doomed = {s.base_offset for s in old}
            kept = [s for s in self.segments if s.base_offset not in doomed]
            for seg in new:
                bisect.insort(kept, seg, key=lambda s: s.base_offset)
            self.segments = kept

    def flush(self) -> None:
        with self.writer_lock:
            self.active_segment.flush()

    def close(self) -> None:
        self._producers = None
        self._unclaimed_checks = {}
        with self.writer_lock:
            self.active_segment.flush()
            for seg in self.segments:
                seg.close()
        self.writer_lock.close()

    def __repr__(self) -> str:
        return f"PartitionLog({self.directory}, segments={len(self.segments)})"


def _log_start(log_dir: Path, tp: TopicPartition) -> int:
    """Where an empty partition's first segment starts: its log start checkpoint, else 0."""
    return checkpointed_offset(log_dir, LOG_START_OFFSET_CHECKPOINT, tp) or 0


def _make_partition_dir(directory: Path, config: LogConfig, now_ms: int) -> None:
    """Make a missing partition dir with its first segment under a staging name, then rename it
    into place. The staging name is Kafka's for a deleted log (``<dir>.<uuid>-delete``): the
    daemon's survey skips it, and a broker deletes one a crash left behind (any other name
    there would take the broker's log dir offline). When another writer made the dir first,
    the staged one is dropped and theirs is used."""
    tp = parse_partition_dir_name(directory.name)
    if tp is None:
        raise StorageError(
            f"{directory} is not a partition directory (expected <topic>-<partition>)"
        )
    parent = directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f"{directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    staging.mkdir()
    try:
        first = LogSegment.create(staging, _log_start(parent, tp), config, created_ms=now_ms)
        first.flush()  # the index files too
        first.close()
        fsync_dir(staging)
        try:
            os.rename(staging, directory)  # replaces only an empty dir (made by mkdir elsewhere)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise StorageError(f"{directory}: cannot create: {exc.strerror}") from exc
        else:
            fsync_dir(parent)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
