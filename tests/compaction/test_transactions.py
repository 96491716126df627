"""Transaction bookkeeping and batch decisions of a cleaning pass (kafka-format.md §4.8, §4.10).

The unit tests call ``CleanedTransactionMetadata`` directly. The scenario tests replay Kafka's
LogCleanerTest cases on hand-built batch sequences with a tiny model of pass 2 (``Sim``): the
metadata and ``batch_retention`` decide each batch, and the model applies docs/kafka-format.md §4.11
(records kept by an offset map of latest offsets, delete horizons stamped on surviving markers,
header-only batches for RETAIN_EMPTY). Each pass reads the aborted txns from the index the previous
pass wrote, as the real cleaner reads its cleaned segments' ``.txnindex``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

from cleanerd.compaction._transactions import (
    BatchDecision,
    BatchRetention,
    BatchView,
    CleanedTransactionMetadata,
    LastRecord,
    batch_retention,
    last_records_of_active_producers,
)
from cleanerd.format import (
    ControlType,
    Record,
    build_batch,
    build_end_txn_marker,
    parse_control_key,
    scan_batches,
)
from cleanerd.storage import AbortedTxn, PartitionLog, TransactionIndex

ABORT, COMMIT = ControlType.ABORT, ControlType.COMMIT
DAY = 86_400_000  # delete.retention.ms default
NOW = 2**63 - 1 - DAY - 1  # Kafka's largeTimestamp
RETAIN, DELETE, DELETE_EMPTY = (
    BatchRetention.RETAIN_EMPTY,
    BatchRetention.DELETE,
    BatchRetention.DELETE_EMPTY,
)


# --- CleanedTransactionMetadata --------------------------------------------------------------
def test_aborted_data_discarded_and_abort_kept_and_reindexed(tmp_path: Path) -> None:
    txn = AbortedTxn(7, 0, 2, 3)
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    meta = CleanedTransactionMetadata([txn], index)
    assert meta.on_batch_read(7, True, 1) is True
    assert meta.ongoing_aborted[7].last_observed_batch_offset == 1
    assert meta.on_control_batch_read(7, ABORT, True, 2) is False
    assert index.all_aborted() == [txn]
    assert meta.ongoing_aborted == {}


def test_abort_discarded_and_not_reindexed_when_no_batch_was_read(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    meta = CleanedTransactionMetadata([AbortedTxn(7, 0, 2, 3)], index)
    assert meta.on_control_batch_read(7, ABORT, True, 2) is True  # the step ran before it
    assert index.all_aborted() == []
    assert not index.exists
    # the txn is closed: the producer's next transaction is not mistaken for aborted data
    assert meta.on_batch_read(7, True, 3) is False
    assert meta.ongoing_committed == {7}


def test_commit_kept_only_while_a_batch_of_its_txn_is_read() -> None:
    meta = CleanedTransactionMetadata()
    assert meta.on_batch_read(1, True, 0) is False
    assert meta.on_control_batch_read(1, COMMIT, True, 1) is False
    assert meta.ongoing_committed == set()
    assert meta.on_control_batch_read(1, COMMIT, True, 2) is True  # nothing of it read


def test_non_transactional_batches_are_never_discarded() -> None:
    meta = CleanedTransactionMetadata([AbortedTxn(1, 0, 5, 6)])
    assert meta.on_batch_read(1, False, 0) is False
    assert meta.on_batch_read(-1, False, 1) is False
    assert meta.ongoing_committed == set()
    assert meta.ongoing_aborted[1].last_observed_batch_offset is None


@pytest.mark.parametrize(
    "kind",
    [
        ControlType.LEADER_CHANGE,
        ControlType.SNAPSHOT_HEADER,
        ControlType.SNAPSHOT_FOOTER,
        ControlType.KRAFT_VERSION,
        ControlType.KRAFT_VOTERS,
        ControlType.UNKNOWN,
    ],
)
def test_other_control_types_are_kept(kind: ControlType) -> None:
    assert CleanedTransactionMetadata().on_control_batch_read(1, kind, True, 0) is False


@pytest.mark.parametrize("kind", [ABORT, COMMIT, None])
def test_empty_control_batch_is_discarded(kind: ControlType | None) -> None:
    meta = CleanedTransactionMetadata([AbortedTxn(1, 0, 3, 4)])
    assert meta.on_batch_read(1, True, 0) is True
    assert meta.on_control_batch_read(1, kind, False, 3) is True
    assert 1 in meta.ongoing_aborted  # an emptied marker does not close the txn


def test_step_before_every_batch_moves_only_started_txns() -> None:
    a, b = AbortedTxn(1, 5, 9, 10), AbortedTxn(2, 3, 4, 5)
    meta = CleanedTransactionMetadata([a, b])
    assert meta.pending == [b, a]
    assert meta.on_batch_read(2, True, 2) is False  # txn b starts at 3: not yet
    assert meta.pending == [b, a]
    meta.consume_aborted_up_to(3)
    assert meta.pending == [a]
    assert set(meta.ongoing_aborted) == {2}
    assert meta.on_batch_read(1, True, 7) is True  # batch 6..7 reaches a's first offset 5
    assert meta.pending == []


def test_two_producers_interleaved(tmp_path: Path) -> None:
    txn = AbortedTxn(1, 0, 6, 7)
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    meta = CleanedTransactionMetadata([txn], index)
    verdicts = [
        meta.on_batch_read(1, True, 1),  # p1 aborted data
        meta.on_batch_read(2, True, 3),  # p2 committed data
        meta.on_batch_read(1, True, 5),
        meta.on_control_batch_read(1, ABORT, True, 6),
        meta.on_control_batch_read(2, COMMIT, True, 7),
        meta.on_batch_read(1, True, 8),  # p1's next txn is committed
        meta.on_control_batch_read(1, COMMIT, True, 9),
    ]
    assert verdicts == [True, False, True, False, False, False, False]
    assert index.all_aborted() == [txn]


def test_overlapping_add_aborted_gives_one_index_entry(tmp_path: Path) -> None:
    """A txn spanning segments is returned for both; the first entry per producer wins."""
    txn = AbortedTxn(3, 0, 4, 5)
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    meta = CleanedTransactionMetadata([txn], index)  # segment [0, 2)
    assert meta.on_batch_read(3, True, 1) is True
    meta.add_aborted([txn, txn])  # segment [2, 5), twice for good measure
    assert meta.on_batch_read(3, True, 3) is True
    assert meta.ongoing_aborted[3].last_observed_batch_offset == 3
    assert meta.on_control_batch_read(3, ABORT, True, 4) is False
    assert meta.pending == []
    assert index.all_aborted() == [txn]


def test_output_index_is_repointed_per_cleaned_segment(tmp_path: Path) -> None:
    first, second = AbortedTxn(1, 0, 1, 2), AbortedTxn(1, 2, 3, 4)
    meta = CleanedTransactionMetadata([first, second])  # no index yet: nothing to append to
    assert meta.on_batch_read(1, True, 0) is True
    assert meta.on_control_batch_read(1, ABORT, True, 1) is False
    meta.output_txn_index = index = TransactionIndex(tmp_path / "2.txnindex", 2)
    assert meta.on_batch_read(1, True, 2) is True
    assert meta.on_control_batch_read(1, ABORT, True, 3) is False
    assert index.all_aborted() == [second]


# --- batch_retention --------------------------------------------------------------------------
def view(
    last: int,
    pid: int = 1,
    epoch: int = 0,
    control: bool = False,
    horizon: int | None = None,
) -> BatchView:
    return BatchView(pid, epoch, last, control, True, horizon, True, COMMIT if control else None)


@pytest.mark.parametrize(
    ("batch", "can_discard", "last_records", "expected"),
    [
        # the producer's last data batch beats every other rule
        (view(4), True, {1: (4, 0)}, BatchDecision(RETAIN, True, False)),
        (view(4), False, {1: (4, 0)}, BatchDecision(RETAIN, False, False)),
        (view(3), True, {1: (4, 0)}, BatchDecision(DELETE, True, False)),
        # only markers known: any control batch of the current epoch
        (view(4, control=True), True, {1: (None, 0)}, BatchDecision(RETAIN, False, True)),
        (view(4, 1, 1, True), True, {1: (None, 0)}, BatchDecision(DELETE_EMPTY, False, True)),
        (view(4), True, {1: (None, 0)}, BatchDecision(DELETE, True, False)),
        # inactive producer, or none at all
        (view(4), True, {2: (4, 0)}, BatchDecision(DELETE, True, False)),
        (view(4, pid=-1), False, {-1: (4, 0)}, BatchDecision(DELETE_EMPTY, False, False)),
        # plain rules
        (view(4), False, {}, BatchDecision(DELETE_EMPTY, False, False)),
        (view(4, control=True), False, {}, BatchDecision(DELETE_EMPTY, False, False)),
    ],
)
def test_batch_decision_table(
    batch: BatchView,
    can_discard: bool,
    last_records: dict[int, LastRecord],
    expected: BatchDecision,
) -> None:
    assert batch_retention(batch, can_discard, last_records, 100, NOW) == expected


def test_high_watermark_rule_beats_delete_but_not_producer_rule() -> None:
    """The batch whose next offset is the high watermark (10) stays, as an empty header if need
    be (KAFKA-17076 as KAFKA-20452 narrowed it); the one before it does not."""
    assert batch_retention(view(9), True, {}, 10, NOW) == BatchDecision(RETAIN, True, False)
    assert batch_retention(view(9, pid=-1), False, {}, 10, NOW).mode is RETAIN
    assert batch_retention(view(8), True, {}, 10, NOW).mode is DELETE
    # producer's last batch and high watermark both say RETAIN_EMPTY: same answer
    assert batch_retention(view(9), True, {1: (9, 0)}, 10, NOW).mode is RETAIN


@pytest.mark.parametrize(
    ("horizon", "can_discard", "mode", "discard_records"),
    [
        (None, True, DELETE_EMPTY, False),  # first discardable pass: the horizon gets stamped
        (NOW + 1, True, DELETE_EMPTY, False),  # horizon not yet passed
        (NOW, True, DELETE, True),  # horizon <= now
        (NOW - DAY, True, DELETE, True),
        (NOW - DAY, False, DELETE_EMPTY, False),  # horizon alone never drops a needed marker
    ],
)
def test_control_batch_horizon(
    horizon: int | None, can_discard: bool, mode: BatchRetention, discard_records: bool
) -> None:
    decision = batch_retention(view(4, control=True, horizon=horizon), can_discard, {}, 100, NOW)
    assert decision == BatchDecision(mode, discard_records, can_discard)


def test_data_batch_ignores_horizon() -> None:
    decision = batch_retention(view(4, horizon=NOW + DAY), True, {}, 100, NOW)
    assert decision == BatchDecision(DELETE, True, False)


def test_batch_view_from_row_and_header() -> None:
    marker = build_end_txn_marker(
        commit=False, offset=7, timestamp=5, producer_id=3, producer_epoch=2
    )
    data = build_batch(
        [Record(10, 5, b"k", b"v"), Record(11, 5, b"k", None)],
        producer_id=4,
        producer_epoch=1,
        base_sequence=0,
        transactional=True,
    )
    scan = scan_batches(marker + data)
    row_marker = BatchView.from_row(scan.batches[0], ABORT)
    assert row_marker == BatchView(3, 2, 7, True, True, None, True, ABORT)
    assert row_marker == BatchView.from_header(scan.header(0), ABORT)
    row_data = BatchView.from_row(scan.batches[1])
    assert row_data == BatchView(4, 1, 11, False, True, None, True, None)
    assert row_data.next_offset == 12
    assert row_data.has_producer_id
    stamped = scan.header(1).with_fields(attributes=scan.header(1).attributes | 0x40)
    assert BatchView.from_header(stamped).delete_horizon_ms == stamped.base_timestamp


# --- scenarios (Kafka's LogCleanerTest, one pass = one group over the whole log) -------------
@dataclass(frozen=True)
class Batch:
    base: int
    last: int
    pid: int
    epoch: int
    txn: bool
    control: ControlType | None
    records: tuple[tuple[int, str], ...]  # (offset, key); a marker's record has key ""
    horizon: int | None = None

    def view(self) -> BatchView:
        return BatchView(
            self.pid,
            self.epoch,
            self.last,
            self.control is not None,
            self.txn,
            self.horizon,
            bool(self.records),
            self.control if self.records else None,
        )


class Sim:
    """A log of batches cleaned by the metadata and ``batch_retention`` (kafka-format.md §4.11)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.log: list[Batch] = []
        self.aborted: list[AbortedTxn] = []  # what the log's .txnindex files hold
        self.open: dict[int, int] = {}
        self.passes = 0

    @property
    def next(self) -> int:
        return self.log[-1].last + 1 if self.log else 0

    def data(self, *keys: str, pid: int = 1, txn: bool = True, epoch: int = 0) -> None:
        base = self.next
        recs = tuple((base + i, key) for i, key in enumerate(keys))
        self.log.append(Batch(base, base + len(keys) - 1, pid, epoch, txn, None, recs))
        if txn:
            self.open.setdefault(pid, base)

    def marker(self, kind: ControlType, pid: int = 1, epoch: int = 0) -> None:
        off = self.next
        self.log.append(Batch(off, off, pid, epoch, True, kind, ((off, ""),)))
        first = self.open.pop(pid, None)
        if kind is ABORT and first is not None:
            self.aborted.append(
                AbortedTxn(pid, first, off, min(self.open.values(), default=off + 1))
            )

    def last_records(self) -> dict[int, LastRecord]:
        last: dict[int, LastRecord] = {}
        for b in self.log:
            if b.pid >= 0:
                data = b.last if b.control is None else last.get(b.pid, (None, 0))[0]
                last[b.pid] = (data, b.epoch)
        return last

    def clean(self, now: int = NOW, segments: tuple[int, ...] = (0,), hw: int = 10**9) -> None:
        """One pass; ``segments`` are source base offsets (aborted txns are added per segment),
        ``hw`` the high watermark (the batch ending there stays)."""
        pass1 = CleanedTransactionMetadata(self.aborted)  # the offset map skips aborted data
        latest: dict[str, int] = {}
        for b in self.log:
            if not pass1.should_discard_batch(b.view()) and b.control is None:
                latest.update((key, off) for off, key in b.records)
        self.passes += 1
        index = TransactionIndex(self.tmp / f"{self.passes}.txnindex", 0)
        meta = CleanedTransactionMetadata(output_txn_index=index)
        last_records, out = self.last_records(), []
        segs = list(itertools.pairwise((*segments, self.next)))
        for b in self.log:
            while segs and segs[0][0] <= b.base:  # entering a segment: as LogCleaner does
                lo, hi = segs.pop(0)
                meta.add_aborted(
                    t for t in self.aborted if t.last_offset >= lo and t.first_offset < hi
                )
            d = batch_retention(
                b.view(), meta.should_discard_batch(b.view()), last_records, hw, now
            )
            if d.mode is DELETE:
                continue
            kept = tuple(
                (o, key)
                for o, key in b.records
                if not d.discard_batch_records and (b.control or o >= latest.get(key, -1))
            )
            if kept:
                stamp = d.contains_marker_for_empty_txn and b.horizon is None
                out.append(
                    dataclasses.replace(b, records=kept, horizon=now + DAY if stamp else b.horizon)
                )
            elif d.mode is RETAIN:
                out.append(dataclasses.replace(b, records=(), horizon=None))
        self.log, self.aborted = out, index.all_aborted()

    def two_pass(self, now: int = NOW) -> None:
        self.clean(now)
        self.clean(now + DAY + 1)

    def offsets(self) -> list[int]:
        return [o for b in self.log for o, _ in b.records]

    def keys(self) -> list[str]:
        return [key for b in self.log if b.control is None for _, key in b.records]

    def last_offsets(self) -> list[int]:
        return [b.last for b in self.log]


def test_basic_transaction_aware_cleaning(tmp_path: Path) -> None:
    """Kafka test 6: two producers, one aborted and two committed txns."""
    s = Sim(tmp_path)
    s.data("1", "2", pid=1)
    s.data("2", "3", pid=2)
    s.data("3", "4", pid=1)
    s.marker(ABORT, pid=1)
    s.marker(COMMIT, pid=2)
    s.data("2", pid=1)
    s.marker(COMMIT, pid=1)
    before = list(s.aborted)
    s.clean()
    assert s.keys() == ["3", "2"]
    assert s.offsets() == [3, 6, 7, 8, 9]
    assert s.aborted == before  # index unchanged


def test_abort_marker_removal(tmp_path: Path) -> None:
    """Kafka test 14: aborted data goes, the marker stays; two passes later it goes."""
    s = Sim(tmp_path)
    s.data("1")
    s.data("2", "3")
    s.marker(ABORT)
    s.data("3")
    s.marker(COMMIT)
    s.clean(hw=6)
    assert (s.keys(), s.offsets()) == (["3"], [3, 4, 5])
    assert s.aborted == [AbortedTxn(1, 0, 3, 4)]
    s.two_pass()
    assert (s.keys(), s.offsets()) == (["3"], [4, 5])
    assert s.aborted == []


def test_abort_marker_retention_with_empty_batch(tmp_path: Path) -> None:
    """Kafka test 16: the producer's last (aborted) batch stays empty, keeping its marker."""
    s = Sim(tmp_path)
    s.data("2", "3")
    s.marker(ABORT)
    for _ in range(2):
        s.clean()
        assert s.aborted == [AbortedTxn(1, 0, 2, 3)]
        assert (s.keys(), s.offsets(), s.last_offsets()) == ([], [2], [1, 2])
    s.data("1")
    s.clean()
    assert s.aborted == [AbortedTxn(1, 0, 2, 3)]
    assert (s.keys(), s.offsets(), s.last_offsets()) == (["1"], [2, 3], [2, 3])
    s.two_pass()
    assert (s.keys(), s.offsets(), s.last_offsets()) == (["1"], [3], [3])
    assert s.aborted == []


def test_last_sequence_retained_even_if_transaction_aborted(tmp_path: Path) -> None:
    """Kafka test 24."""
    s = Sim(tmp_path)
    for key in "123":
        s.data(key)
    s.marker(ABORT)
    s.clean(hw=4)
    assert (s.last_offsets(), s.keys(), s.offsets()) == ([2, 3], [], [3])
    s.data("1", "5")
    s.clean(hw=6)
    assert (s.last_offsets(), s.keys(), s.offsets()) == ([3, 5], ["1", "5"], [3, 4, 5])


def test_aborted_transaction_spanning_segments(tmp_path: Path) -> None:
    """Kafka test 13: the txn is added for both segments, indexed once, marker kept forever."""
    s = Sim(tmp_path)
    s.data("1")
    s.marker(ABORT)
    for now in (NOW, NOW + DAY + 1, 2**63 - 1):
        s.clean(now, segments=(0, 1))
        assert (s.last_offsets(), s.offsets()) == ([0, 1], [1])
        assert s.aborted == [AbortedTxn(1, 0, 1, 2)]


def test_committed_transaction_spanning_segments(tmp_path: Path) -> None:
    """Kafka test 12."""
    s = Sim(tmp_path)
    s.data("1")
    s.marker(COMMIT)
    s.two_pass()
    assert (s.last_offsets(), s.offsets()) == ([0, 1], [0, 1])


def test_commit_marker_removed_after_its_data(tmp_path: Path) -> None:
    """Kafka tests 8 and 10: kept while a batch of its txn is read (the producer's last batch
    counts, even emptied); once none is, stamped with a horizon; dropped when it passes."""
    s = Sim(tmp_path)
    s.data("1")
    s.data("2", "3")
    s.marker(COMMIT)
    s.data("2", "1", "3", pid=2, txn=False)
    s.clean()
    assert (s.offsets(), s.last_offsets()) == ([3, 4, 5, 6], [2, 3, 6])  # 1..2 kept empty
    s.clean()
    assert (s.offsets(), s.last_offsets()) == ([3, 4, 5, 6], [2, 3, 6])
    assert s.log[1].horizon is None  # the empty batch is still read: COMMIT needed
    s.data("4", txn=False)  # producer 1 writes again: its empty batch may go
    s.clean()
    assert (s.offsets(), s.last_offsets()) == ([3, 4, 5, 6, 7], [3, 6, 7])
    assert s.log[0].horizon is None  # read 1..2 in this pass
    s.clean()
    assert s.log[0].horizon == NOW + DAY
    s.clean(NOW + DAY - 1)
    assert s.offsets() == [3, 4, 5, 6, 7]
    s.clean(NOW + DAY)
    assert (s.offsets(), s.last_offsets()) == ([4, 5, 6, 7], [6, 7])


def test_clean_empty_control_batch(tmp_path: Path) -> None:
    """Kafka test 11: a lone COMMIT becomes an empty control batch kept for the epoch."""
    s = Sim(tmp_path)
    s.marker(COMMIT)
    s.two_pass()
    assert (s.last_offsets(), s.offsets()) == ([0], [])
    s.clean(2**63 - 1)
    assert (s.last_offsets(), s.offsets()) == ([0], [])


def test_empty_batch_removal_with_sequence_reuse(tmp_path: Path) -> None:
    """Kafka test 15: two committed one-record txns, then plain records."""
    s = Sim(tmp_path)
    s.data("1")
    s.marker(COMMIT)
    s.data("1")
    s.marker(COMMIT)
    s.data("1", pid=-1, txn=False)
    s.data("2", pid=-1, txn=False)
    s.clean()
    assert s.offsets() == [1, 3, 4, 5]
    s.two_pass()
    assert s.last_offsets() == [2, 3, 4, 5]


# --- last_records_of_active_producers --------------------------------------------------------
def test_last_records_of_active_producers_from_a_partition_log(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", clock=lambda: 0)
    rec = [Record(0, 1, b"k", b"v")]
    log.append(rec, producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)  # 0
    log.append(rec * 2, producer_id=2, producer_epoch=3, base_sequence=0, transactional=True)
    log.append_marker(commit=True, producer_id=1, producer_epoch=0, timestamp=1)  # 3
    log.append_marker(commit=False, producer_id=2, producer_epoch=3, timestamp=1)  # 4
    log.append_marker(commit=True, producer_id=5, producer_epoch=7, timestamp=1)  # 5: markers only
    log.append(rec)  # no producer id
    state = log.producer_state()
    last = last_records_of_active_producers(state, 10, DAY)  # written at 0 and 1: none expired
    assert last == {1: (0, 0), 2: (2, 3), 5: (None, 7)}
    # the decisions of one pass over the real batches
    meta = CleanedTransactionMetadata(state.aborted)
    modes = []
    for rb in log.read():
        kind = parse_control_key(rb.records()[0].key) if rb.header.is_control else None
        batch = BatchView.from_header(rb.header, kind)
        modes.append(batch_retention(batch, meta.should_discard_batch(batch), last, 7, 10).mode)
    assert modes == [RETAIN, RETAIN, DELETE_EMPTY, DELETE_EMPTY, RETAIN, RETAIN]
    log.close()
