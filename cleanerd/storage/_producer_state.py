"""Producer state rebuilt from batch headers: last batch per producer, open transactions, LSO.

Kafka keeps this in ``ProducerStateManager`` (with snapshots); cleanerd rebuilds it by walking the
batch headers of a log, which the numba batch walk makes cheap. Only control batches are decoded
(one record each) to tell COMMIT from ABORT. A ``ProducerSnapshot`` keeps the result with what it
was walked from, so one cleaning (its plan, then its pass 2) walks the log once. It also says
which segments the walk that made it checked whole (CRCs included), so the cleaning that planned
from it need not check them again (``PartitionLog.claim_checked_segments``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    I64,
    U8,
    BatchScan,
    ControlType,
    CorruptRecordError,
    EndTransactionMarker,
    RecordBatch,
    kernels as k,
    parse_control_key,
)
from cleanerd.storage._chunks import iter_chunks
from cleanerd.storage._segment import FileKey, LogSegment
from cleanerd.storage._txnindex import AbortedTxn


@dataclass(slots=True)
class ProducerEntry:
    """What the log says about one producer id after its latest batch."""

    producer_id: int
    epoch: int = -1
    last_sequence: int = -1
    last_data_offset: int = -1  # last offset of its latest data batch (-1: only markers seen)
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # first offset of its open transaction, -1 if none
    last_marker_offset: int = -1  # offset of its latest COMMIT or ABORT marker, -1 if none


@dataclass(frozen=True, slots=True)
class AbortMarker:
    """An ABORT marker as the walk met it: what a ``.txnindex`` entry for it may say.

    ``txn`` is the entry Kafka's recovery would write (None when the walk saw no data of the
    transaction: Kafka writes no entry then). An entry written earlier may name a first offset
    as low as just after ``previous_end``: the cleaner removes aborted batches but keeps the
    entry as it was, so the data the walk still sees can start later than the entry says.
    """

    producer_id: int
    offset: int
    previous_end: int  # the producer's previous COMMIT/ABORT marker, -1 if none
    txn: AbortedTxn | None


LastBatch = tuple[int, int] | None
"""A segment's last batch: its last offset and its position; None for a segment without one."""


@dataclass
class ProducerState:
    """Producers of a log, the aborted transactions found, and where stability ends."""

    producers: dict[int, ProducerEntry] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)
    abort_markers: list[AbortMarker] = field(default_factory=list)
    # (last offset, position) of the last batch folded: ``take_snapshot`` keeps each checked
    # segment's, which spares the offsets check across segments a walk of its own
    last_batch: LastBatch = field(default=None, compare=False)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None when all are decided."""
        firsts = [p.current_txn_first_offset for p in self.producers.values()]
        open_firsts = [f for f in firsts if f >= 0]
        return min(open_firsts) if open_firsts else None

    def copy(self) -> ProducerState:
        """A copy whose entries can change without touching these (transactions are frozen)."""
        entries = {pid: copy.copy(e) for pid, e in self.producers.items()}
        return ProducerState(entries, list(self.aborted), list(self.abort_markers))

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: the first unstable offset if below the high watermark, else the HW."""
        fuo = self.first_unstable_offset
        return high_watermark if fuo is None else min(fuo, high_watermark)

    def apply(self, arr: U8, batches: I64, path: str | None = None) -> None:
        """Fold the batches of one scan (in offset order) into the state."""
        if batches.shape[0]:
            self.last_batch = int(batches[-1, k.B_LAST_OFFSET]), int(batches[-1, k.B_POS])
        with_pid = np.nonzero(batches[:, k.B_PRODUCER_ID] >= 0)[0]
        for i in with_pid:
            row = batches[i]
            pid = int(row[k.B_PRODUCER_ID])
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            entry.epoch = int(row[k.B_PRODUCER_EPOCH])
            attrs = int(row[k.B_ATTRIBUTES])
            if attrs & ATTR_CONTROL:
                entry.last_timestamp = int(row[k.B_MAX_TIMESTAMP])  # Kafka: markers count too
                if row[k.B_COUNT] > 0:
                    self._end_txn(entry, arr, row, path)
                continue
            base_seq = int(row[k.B_BASE_SEQUENCE])
            delta = int(row[k.B_LAST_OFFSET] - row[k.B_BASE_OFFSET])
            entry.last_sequence = -1 if base_seq < 0 else (base_seq + delta) % 2**31
            entry.last_data_offset = int(row[k.B_LAST_OFFSET])
            entry.last_timestamp = int(row[k.B_MAX_TIMESTAMP])
            if attrs & ATTR_TRANSACTIONAL and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = int(row[k.B_BASE_OFFSET])

    def _end_txn(self, entry: ProducerEntry, arr: U8, row: I64, path: str | None) -> None:
        batch = RecordBatch(arr, row, BatchScan(row.reshape(1, -1), 0, None).header(0), path)
        record = batch.records()[0]
        kind = parse_control_key(record.key)
        if kind not in (ControlType.COMMIT, ControlType.ABORT):
            return
        entry.coordinator_epoch = EndTransactionMarker.parse(kind, record.value).coordinator_epoch
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        marker_offset = int(row[k.B_LAST_OFFSET])
        previous_end, entry.last_marker_offset = entry.last_marker_offset, marker_offset
        if kind != ControlType.ABORT:
            return
        txn = None
        if first >= 0:  # Kafka's LSO then: the oldest other open transaction, else after us
            others = self.first_unstable_offset
            lso = marker_offset + 1 if others is None else others
            txn = AbortedTxn(entry.producer_id, first, marker_offset, lso)
            self.aborted.append(txn)
        self.abort_markers.append(AbortMarker(entry.producer_id, marker_offset, previous_end, txn))


def scan_producer_state(scans: Iterable[tuple[U8, I64, str | None]]) -> ProducerState:
    """Producer state of a log from its segments' scans, oldest first."""
    state = ProducerState()
    for arr, batches, path in scans:
        state.apply(arr, batches, path)
    return state


SegmentFold = Callable[[LogSegment, ProducerState], bool]
"""Folds one segment's batches, in offset order, into a producer state; True when it checked
every batch of the segment itself (CRC included) to the end of its file. Damage, a batch cut
short by the end of the file included, raises ``CorruptRecordError`` after the batches before
it are folded: whether a cut is a writer's append in flight is for ``take_snapshot`` to say.
Every fold gives the same state (they differ only in how they map and walk), so a snapshot
serves them all."""


@dataclass(frozen=True, eq=False)
class ProducerSnapshot:
    """A log's producer state and the segments (objects and files) it was walked from.

    Writers only append to the active (last) segment and a swap brings new ``LogSegment``
    objects, so while the objects and their files' keys match, a new walk would find the same.
    """

    segments: tuple[LogSegment, ...]
    keys: tuple[FileKey, ...]
    prefix: ProducerState  # after every segment but the active one
    state: ProducerState
    checked: tuple[int, ...] = ()  # indexes of the segments this walk checked whole (CRC too)
    # for each of ``checked``: its last batch's (last offset, position), None for no batch
    last_batches: tuple[LastBatch, ...] = ()

    def _same(self, segments: tuple[LogSegment, ...], keys: tuple[FileKey, ...], n: int) -> bool:
        """The first ``n`` segments are the ones walked, unchanged."""
        if len(segments) != len(self.segments) or keys[:n] != self.keys[:n]:
            return False
        return all(a is b for a, b in zip(segments[:n], self.segments[:n], strict=False))


def take_snapshot(
    segments: Sequence[LogSegment], fold: SegmentFold, previous: ProducerSnapshot | None = None
) -> ProducerSnapshot:
    """The producer state of ``segments`` (oldest first), reusing ``previous`` where it still
    holds: whole when nothing changed, all but the active segment when only that one did.

    Only the active (last) segment may end inside a batch: there a writer's append is in
    flight and the walk stops before it. A segment below it is closed, so a batch cut short
    there is damage and raises, naming the file and position, as Kafka's recovery of a closed
    segment would find it (and the daemon's survey says, ``settled``)."""
    segs = tuple(segments)
    keys = tuple(s.file_key() for s in segs)  # before the walk: a change during it shows later
    if previous is not None and previous._same(segs, keys, len(segs)):
        return previous
    checked: list[int] = []
    lasts: list[LastBatch] = []

    def walk(i: int, into: ProducerState) -> None:
        into.last_batch = None
        if keys[i][1] and fold(segs[i], into):  # an empty file has no batches to fold
            checked.append(i)
            lasts.append(into.last_batch)

    if previous is not None and previous._same(segs, keys, len(segs) - 1):
        prefix = previous.prefix
    else:
        prefix = ProducerState()
        for i in range(len(segs) - 1):
            walk(i, prefix)
    state = prefix.copy()
    try:
        if segs:
            walk(len(segs) - 1, state)
    except CorruptRecordError as exc:
        if not exc.is_truncation:
            raise
    return ProducerSnapshot(segs, keys, prefix, state, tuple(checked), tuple(lasts))


def fold_segment(seg: LogSegment, state: ProducerState) -> bool:
    """Fold a whole segment's batches, through a map of its own (the pages it touches do not
    stay in a long-lived log's map). Every batch is checked (CRC, lengths, offsets rising from
    the base offset): a corrupt one raises ``CorruptRecordError`` naming it, since a producer
    id or an offset taken from it would decide the LSO and the aborted set. Only a batch cut
    short by the end of the file raises too, after the batches before it are folded
    (``take_snapshot`` forgives it in the active segment)."""
    arr, path = seg.view(keep=False), str(seg.log_path)
    # a chunk at a time: a segment of small batches has more bytes of batch rows than of file
    for batches in iter_chunks(arr, path=path, prev_last_offset=seg.base_offset - 1):
        state.apply(arr, batches, path)
    return True
