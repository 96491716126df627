"""Producer state rebuilt from batch headers: last batch per producer, open transactions, LSO.

Kafka keeps this in ``ProducerStateManager`` (with snapshots); cleanerd rebuilds it by walking the
batch headers of a log, which the numba batch walk makes cheap. Only control batches are decoded
(one record each) to tell COMMIT from ABORT.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from cleanerd.format import kernels as k
from cleanerd.format.control import ControlType, EndTransactionMarker, parse_control_key
from cleanerd.format.header import ATTR_CONTROL, ATTR_TRANSACTIONAL
from cleanerd.format.reader import I64, U8, BatchScan, RecordBatch
from cleanerd.storage.txnindex import AbortedTxn


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


@dataclass
class ProducerState:
    """Producers of a log, the aborted transactions found, and where stability ends."""

    producers: dict[int, ProducerEntry] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None when all are decided."""
        firsts = [p.current_txn_first_offset for p in self.producers.values()]
        open_firsts = [f for f in firsts if f >= 0]
        return min(open_firsts) if open_firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: the first unstable offset if below the high watermark, else the HW."""
        fuo = self.first_unstable_offset
        return high_watermark if fuo is None else min(fuo, high_watermark)

    def apply(self, arr: U8, batches: I64, path: str | None = None) -> None:
        """Fold the batches of one scan (in offset order) into the state."""
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
        if kind == ControlType.ABORT and first >= 0:
            others = self.first_unstable_offset
            lso = marker_offset + 1 if others is None else others
            self.aborted.append(AbortedTxn(entry.producer_id, first, marker_offset, lso))


def scan_producer_state(scans: Iterable[tuple[U8, I64, str | None]]) -> ProducerState:
    """Producer state of a log from its segments' scans, oldest first."""
    state = ProducerState()
    for arr, batches, path in scans:
        state.apply(arr, batches, path)
    return state
