"""The writers of a generated partition: plain, idempotent and transactional producers.

Each batch goes to a writer picked at random, so transactions of different producers interleave
as they do on a real broker. Idempotent and transactional producers carry a producer id, an epoch
and running sequence numbers (lastSequence = baseSequence + lastOffsetDelta, wrapping at 2^31,
docs/kafka-format.md §2.1), continuing from the log's producer state when appending to existing
data.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from cleanerd.storage import ProducerState
from cleanerd.workload._spec import MAX_PRODUCERS, WorkloadSpec

IDEMPOTENT_PID_BASE = MAX_PRODUCERS  # ids 1_000_000 + i
TRANSACTIONAL_PID_BASE = 2 * MAX_PRODUCERS  # ids 2_000_000 + i
MAX_TXN_BATCHES = 4  # a transaction spans 1..4 of its producer's batches
SEQUENCE_WRAP = 2**31


@dataclass
class Producer:
    """One writer's state between batches; producer id -1 is a plain, non-idempotent writer."""

    producer_id: int = -1
    epoch: int = -1
    next_sequence: int = -1
    transactional: bool = False
    txn_batches_left: int = 0  # > 0: a transaction is open and wants that many more batches
    in_txn: bool = False

    def take_sequence(self, count: int) -> int:
        """Base sequence for a batch of ``count`` records (-1 for a plain writer)."""
        base = self.next_sequence
        if base >= 0:
            self.next_sequence = (base + count) % SEQUENCE_WRAP
        return base


def make_producers(
    spec: WorkloadSpec, state: ProducerState | None, rnd: random.Random
) -> list[Producer]:
    """The writers of one partition; with ``state`` (appending) they continue where they were."""
    writers: list[Producer] = []
    if spec.idempotent_producers == 0:
        writers.append(Producer())
    for i in range(spec.idempotent_producers):
        writers.append(Producer(IDEMPOTENT_PID_BASE + i, 0, 0))
    for i in range(spec.transactional_producers):
        writers.append(Producer(TRANSACTIONAL_PID_BASE + i, 0, 0, transactional=True))
    if state is not None:
        for w in writers:
            entry = state.producers.get(w.producer_id)
            if entry is None:
                continue
            w.epoch = max(entry.epoch, 0)
            w.next_sequence = (entry.last_sequence + 1) % SEQUENCE_WRAP
            if w.transactional and entry.current_txn_first_offset >= 0:
                w.in_txn = True
                w.txn_batches_left = rnd.randint(1, MAX_TXN_BATCHES)
    return writers


def begin_if_idle(writer: Producer, rnd: random.Random) -> None:
    """A transactional writer with no open transaction starts one of a few batches."""
    if writer.transactional and not writer.in_txn:
        writer.in_txn = True
        writer.txn_batches_left = rnd.randint(1, MAX_TXN_BATCHES)
