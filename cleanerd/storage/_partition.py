"""One partition directory (``<topic>-<partition>``): its segments, appends, rolls and swaps.

The writer contract (docs/architecture.md): writers only append to the active segment (highest
base offset) and roll by starting a new one, under ``writer_lock``; the cleaner never touches the
active segment and replaces older ones only by the atomic renames of ``swap.replace_segments``.
``writer_lock`` also excludes other processes: taking it brings the segment list up to date
with what they did (``segment_list``); letting go writes our buffered index entries out.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cleanerd.format import Record, RecordBatch
from cleanerd.format import kernels as k
from cleanerd.storage import _txn_check as txn_check
from cleanerd.storage._appender import Appender
from cleanerd.storage._checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    checkpointed_offset,
)
from cleanerd.storage._errors import StorageError
from cleanerd.storage._leader_epoch import LeaderEpochCache
from cleanerd.storage._logdir import partition_of
from cleanerd.storage._producer_state import (
    ProducerSnapshot,
    ProducerState,
    SegmentFold,
    fold_segment,
    take_snapshot,
)
from cleanerd.storage._segment import LogSegment
from cleanerd.storage._segment_list import SegmentWatch, list_logs, open_segment
from cleanerd.storage._swap import RecoveryReport, recover_temp_files, replace_segments
from cleanerd.storage._topic_partition import TopicPartition
from cleanerd.storage._writer_lock import PartitionWriterLock
from cleanerd.topics import LogConfig

__all__ = ["LoadReport", "PartitionLog", "wall_clock_ms"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class LoadReport:
    """What opening the partition repaired."""

    recovery: RecoveryReport = field(default_factory=RecoveryReport)
    rebuilt_indexes: list[str] = field(default_factory=list)
    rebuilt_txn_indexes: list[str] = field(default_factory=list)
    truncated_tail_bytes: int = 0


class PartitionLog(Appender):
    """A partition's log on disk; safe for writers in several threads and processes plus
    readers and the cleaner."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
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
        self._txn_rebuilds: set[int] = set()  # segments whose indexes were rebuilt on open
        self.segments: list[LogSegment] = []
        self._watch = SegmentWatch(self.directory)
        self.writer_lock = PartitionWriterLock(
            self.directory, on_acquire=self._sync_segments, on_release=self._publish
        )
        with self.writer_lock:  # recovery must not race another process's swap
            self._load()
            self._watch.remember()

    @classmethod
    def create(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> PartitionLog:
        """Create the directory (parents too) and open it."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        return cls(directory, config, clock=clock)

    # --- loading ----------------------------------------------------------------------------
    def _load(self) -> None:
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
        start = self._checkpointed(LOG_START_OFFSET_CHECKPOINT) or 0
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
        self._producers = snap
        return snap.state.copy()

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
    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment]) -> None:
        """Swap a ``.cleaned`` segment in for inactive ``old`` segments (swap protocol)."""
        with self.writer_lock:  # the list is now up to date with other processes
            live = {s.base_offset for s in self.segments[:-1]}
            gone = [s.log_path.name for s in old if s.base_offset not in live]
            if gone:
                raise StorageError(f"cannot replace {gone}: not inactive segments (any more)")
            replace_segments(new, old)
            doomed = {s.base_offset for s in old}
            kept = [s for s in self.segments if s.base_offset not in doomed]
            bisect.insort(kept, new, key=lambda s: s.base_offset)
            self.segments = kept

    def flush(self) -> None:
        with self.writer_lock:
            self.active_segment.flush()

    def close(self) -> None:
        self._producers = None
        with self.writer_lock:
            self.active_segment.flush()
            for seg in self.segments:
                seg.close()
        self.writer_lock.close()

    def __repr__(self) -> str:
        return f"PartitionLog({self.directory}, segments={len(self.segments)})"
