"""Per-pass transaction bookkeeping and the batch-level keep/drop decision.

The rules are docs/kafka-format.md §4.8 and §4.10.

Kafka's ``CleanedTransactionMetadata`` and the filter's ``checkBatchRetention``, rule for rule.
They run once per batch header (never per record), so plain Python is fast enough; the record-level
work stays in the kernels. One ``CleanedTransactionMetadata`` lives for a whole pass (pass 2 walks
the log from its start, so every transaction it meets is complete and decided: the pass never
looks past the LSO). Aborted data goes in the first pass that reads it; an ABORT marker stays and is
re-indexed while a batch of its transaction is still read, then becomes discardable and follows
the delete-horizon dance of tombstones; a COMMIT marker likewise once no batch of its transaction
is read. A producer's last batch survives (at least as an empty header) so its sequence and epoch
are not lost, until the producer expires (``producer.id.expiration.ms`` after its latest batch or
marker, with no open transaction): Kafka then drops it from its producer state, and its last
batch is cleaned like any other.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TRANSACTIONAL,
    I64,
    LONG_MAX,
    NO_PRODUCER_ID,
    BatchHeader,
    ControlType,
    kernels as k,
)
from cleanerd.storage import AbortedTxn, ProducerEntry, ProducerState


class AbortedSink(Protocol):
    """Where kept ABORT markers' entries go: a ``TransactionIndex``, or a list the cleaned
    segment writer hands on to the segment that holds each marker."""

    def append(self, txn: AbortedTxn, /) -> None: ...


LastRecord = tuple[int | None, int]
"""Kafka's ``LastRecord``: (last data offset, or None if only markers are known; epoch)."""


@dataclass(frozen=True, slots=True)
class BatchView:
    """The header fields the transaction rules read; built from a batch-matrix row or header."""

    producer_id: int
    producer_epoch: int
    last_offset: int
    is_control: bool = False
    is_transactional: bool = False
    delete_horizon_ms: int | None = None
    has_records: bool = True
    control_type: ControlType | None = None  # type of the first control record, if any

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @classmethod
    def from_row(cls, row: I64, control_type: ControlType | None = None) -> BatchView:
        """From a row of the kernels' batch matrix (the horizon is the base timestamp, bit 6)."""
        attrs = int(row[k.B_ATTRIBUTES])
        horizon = int(row[k.B_BASE_TIMESTAMP]) if attrs & ATTR_DELETE_HORIZON else None
        return cls(
            producer_id=int(row[k.B_PRODUCER_ID]),
            producer_epoch=int(row[k.B_PRODUCER_EPOCH]),
            last_offset=int(row[k.B_LAST_OFFSET]),
            is_control=bool(attrs & ATTR_CONTROL),
            is_transactional=bool(attrs & ATTR_TRANSACTIONAL),
            delete_horizon_ms=horizon,
            has_records=int(row[k.B_COUNT]) > 0,
            control_type=control_type,
        )

    @classmethod
    def from_header(cls, header: BatchHeader, control_type: ControlType | None = None) -> BatchView:
        return cls(
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            last_offset=header.last_offset,
            is_control=header.is_control,
            is_transactional=header.is_transactional,
            delete_horizon_ms=header.delete_horizon_ms,
            has_records=header.records_count > 0,
            control_type=control_type,
        )


@dataclass(slots=True)
class OngoingAbortedTxn:
    """Kafka's ``AbortedTransactionMetadata``: whether this pass read a batch of the txn."""

    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """Transaction state of one cleaning pass (Kafka's ``CleanedTransactionMetadata``).

    ``output_txn_index`` is re-pointed at each group's output: the ABORT markers kept there get
    their ``.txnindex`` entries back, unchanged.
    """

    def __init__(
        self, aborted: Iterable[AbortedTxn] = (), output_txn_index: AbortedSink | None = None
    ) -> None:
        self.output_txn_index = output_txn_index
        self.ongoing_committed: set[int] = set()
        self.ongoing_aborted: dict[int, OngoingAbortedTxn] = {}
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # min-heap by first offset
        self._seq = itertools.count()  # tie-break: AbortedTxn itself is not orderable
        self.add_aborted(aborted)

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        """Queue aborted txns (per source segment, as Kafka does); duplicates are harmless
        because a producer's ongoing entry is never replaced."""
        for txn in txns:
            heapq.heappush(self._pending, (txn.first_offset, next(self._seq), txn))

    @property
    def pending(self) -> list[AbortedTxn]:
        """Queued aborted txns not yet reached, by first offset."""
        return [t for _, _, t in sorted(self._pending)]

    def consume_aborted_up_to(self, offset: int) -> None:
        """The step before every batch: txns that started at or before ``offset`` are ongoing."""
        while self._pending and self._pending[0][0] <= offset:
            txn = heapq.heappop(self._pending)[2]
            self.ongoing_aborted.setdefault(txn.producer_id, OngoingAbortedTxn(txn))

    def on_control_batch_read(
        self,
        producer_id: int,
        control_type: ControlType | None,
        batch_has_records: bool,
        last_offset: int,
    ) -> bool:
        """Whether a control batch may be discarded (the caller still applies the horizon).

        ``last_offset`` drives the step before the batch, so an ABORT whose data is already gone
        still closes its txn (else the producer's next txn would look aborted).
        """
        self.consume_aborted_up_to(last_offset)
        if not batch_has_records:
            return True  # emptied by an earlier pass
        if control_type == ControlType.ABORT:
            ongoing = self.ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.last_observed_batch_offset is not None:
                # keep the marker until every batch of the txn is gone, and keep it indexed
                if self.output_txn_index is not None:
                    self.output_txn_index.append(ongoing.txn)
                return False
            return True
        if control_type == ControlType.COMMIT:
            if producer_id in self.ongoing_committed:
                self.ongoing_committed.discard(producer_id)
                return False
            return True  # no batch of its txn was read in this pass
        return False

    def on_batch_read(self, producer_id: int, is_transactional: bool, last_offset: int) -> bool:
        """Whether a data batch is aborted (discarded whatever its keys)."""
        self.consume_aborted_up_to(last_offset)
        if not is_transactional:
            return False
        ongoing = self.ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = last_offset
            return True
        self.ongoing_committed.add(producer_id)
        return False

    def should_discard_batch(self, batch: BatchView) -> bool:
        """Kafka's ``shouldDiscardBatch``: the verdict for any batch."""
        if batch.is_control:
            return self.on_control_batch_read(
                batch.producer_id, batch.control_type, batch.has_records, batch.last_offset
            )
        return self.on_batch_read(batch.producer_id, batch.is_transactional, batch.last_offset)


class BatchRetention(enum.Enum):
    """What filterTo may do with a batch (Kafka's ``BatchRetention``)."""

    RETAIN_EMPTY = "retain_empty"  # keep at least a header-only batch
    DELETE = "delete"  # drop without reading its records
    DELETE_EMPTY = "delete_empty"  # keep only if some record survives


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """Kafka's ``BatchRetentionResult`` plus the filter's ``discardBatchRecords``."""

    mode: BatchRetention
    discard_batch_records: bool
    contains_marker_for_empty_txn: bool  # a surviving marker must get a delete horizon


def is_last_record_of_producer(batch: BatchView, last_records: Mapping[int, LastRecord]) -> bool:
    """Whether the batch holds its producer's latest state, so it must survive (maybe empty)."""
    last = last_records.get(batch.producer_id)
    if last is None:
        return False  # producer no longer active
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return batch.last_offset == last_data_offset
    return batch.is_control and batch.producer_epoch == epoch  # only markers known


def batch_retention(
    batch: BatchView,
    can_discard: bool,
    last_records_of_active_producers: Mapping[int, LastRecord],
    high_watermark: int,
    current_time_ms: int,
) -> BatchDecision:
    """Kafka's ``checkBatchRetention`` given the transaction verdict ``can_discard``."""
    if batch.is_control:
        horizon = batch.delete_horizon_ms
        discard_records = can_discard and horizon is not None and horizon <= current_time_ms
    else:
        discard_records = can_discard
    if batch.has_producer_id and is_last_record_of_producer(
        batch, last_records_of_active_producers
    ):
        mode = BatchRetention.RETAIN_EMPTY
    elif batch.next_offset == high_watermark:
        # KAFKA-17076 as KAFKA-20452 narrowed it: the log may not end below its high watermark
        mode = BatchRetention.RETAIN_EMPTY
    elif discard_records:
        mode = BatchRetention.DELETE
    else:
        mode = BatchRetention.DELETE_EMPTY
    return BatchDecision(mode, discard_records, can_discard and batch.is_control)


NEVER_EXPIRE = LONG_MAX
"""An expiration of Long.MAX_VALUE ms switches expiration off. Kafka reads the setting as a Java
int, so only code passes this: tests replaying Kafka's LogCleanerTest (which cleans at up to
Long.MAX_VALUE but never runs the expiration check) and tools that want that behaviour."""


def is_producer_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's ``isProducerExpired``: no open transaction, and its latest batch (data or marker)
    is ``producer.id.expiration.ms`` old. An open transaction keeps a producer however old."""
    if expiration_ms >= NEVER_EXPIRE or entry.current_txn_first_offset >= 0:
        return False
    return now_ms - entry.last_timestamp >= expiration_ms


def last_records_of_active_producers(
    state: ProducerState, now_ms: int, expiration_ms: int
) -> dict[int, LastRecord]:
    """Kafka's snapshot taken before each group: producer -> (last data offset, epoch), for the
    producers not expired at ``now_ms`` (Kafka has removed the expired ones from its state)."""
    return {
        pid: (entry.last_data_offset if entry.last_data_offset >= 0 else None, entry.epoch)
        for pid, entry in state.producers.items()
        if not is_producer_expired(entry, now_ms, expiration_ms)
    }
