"""The two compaction oracles name the same survivors on any log.

``cleanerd/workload/_survivors.py`` judges the CLI tests and ``cleanerd gen``;
``tests/support/compaction_model.py`` judges the engine's property tests. Each is meant to be
obviously right, but they were written apart, take different inputs (decoded batches and markers
in log order, versus a flat list whose aborted records the caller marks) and say different things
about tombstones (kept with a flag, versus dropped below ``expired_below``). If they drifted
apart, one set of tests would be checking the engine against a wrong answer. Here hypothesis
writes random logs as real v2 batches and holds the oracles to one answer.

How the representations are mapped:

* the model gets every data record whose transaction ended (or that is not transactional), with
  ``aborted`` set for ABORTed ones; records of transactions still open at the end lie beyond the
  last stable offset, where the survivors oracle predicts nothing, so the model never sees them;
* the header version the model is given follows the engine's rule (``compaction/_strategy.py``):
  the last header with the name decides, and it must hold exactly 8 bytes;
* tombstones: the model with ``expired_below=0`` keeps every winner, as the survivors oracle
  does (flagged ``tombstone``); with every horizon passed it drops tombstone winners, which the
  survivors oracle leaves to its caller.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.format import Header, Record, build_batch, build_end_txn_marker, iter_batches
from cleanerd.workload import Survivor, SurvivorTracker, expected_survivors
from tests.support.compaction_model import ModelRecord, survivors

NAME = "v"  # the header strategy's header name in every log here
PLAIN, IDEMPOTENT, TXN = "plain", "idempotent", "txn"
FIRST_PID = {PLAIN: -1, IDEMPOTENT: 100, TXN: 200}

keys = st.sampled_from([b"a", b"b", b"c", b"d", None])  # None: a keyless record
versions = st.integers(-3, 3) | st.sampled_from([-(2**63), 2**63 - 1])
headers = st.one_of(
    st.just(()),
    versions.map(lambda v: ((NAME, struct.pack(">q", v)),)),
    st.just(((NAME, b"\x00\x01\x02\x03"),)),  # wrong length: no version
    st.just(((NAME, None),)),  # null value: no version
    st.just((("other", struct.pack(">q", 9)),)),  # another header's name
    versions.map(lambda v: ((NAME, struct.pack(">q", v)), (NAME, b"\x01"))),  # last one is bad
    versions.map(lambda v: ((NAME, b"\x01"), ("other", b""), (NAME, struct.pack(">q", v)))),
)
records = st.tuples(
    keys,
    st.sampled_from([b"x", b"y", None]),  # None: a tombstone
    st.integers(0, 4),  # a narrow range, so timestamps tie often
    headers,
)
appends = st.tuples(
    st.just("append"),
    st.sampled_from([PLAIN, IDEMPOTENT, TXN]),
    st.integers(0, 2),
    st.lists(records, min_size=1, max_size=4),
)
ends = st.tuples(st.just("end"), st.integers(0, 2), st.booleans())
logs = st.lists(st.one_of(appends, appends, ends), max_size=25)


def version_of(record_headers: tuple[Header, ...]) -> int | None:
    """The engine's rule, written again here: the last ``NAME`` header, if exactly 8 bytes."""
    found = [value for name, value in record_headers if name == NAME]
    if not found or found[-1] is None or len(found[-1]) != 8:
        return None
    return int.from_bytes(found[-1], "big", signed=True)


@dataclass
class Log:
    """One log written three ways: as v2 batches, into a tracker, and as the model's records."""

    strategy: str
    data: bytearray = field(default_factory=bytearray)
    tracker: SurvivorTracker = field(init=False)
    model: list[ModelRecord] = field(default_factory=list)
    open_txn: dict[int, list[ModelRecord]] = field(default_factory=dict)
    offset: int = 0

    def __post_init__(self) -> None:
        self.tracker = SurvivorTracker(self.strategy)

    def append(self, kind: str, who: int, recs: list[tuple[object, ...]]) -> None:
        pid = FIRST_PID[kind] + (who if kind != PLAIN else 0)
        txn = kind == TXN
        built = [
            Record(self.offset + i, ts, key, value, hdrs)  # type: ignore[arg-type]
            for i, (key, value, ts, hdrs) in enumerate(recs)
        ]
        extra: dict[str, object] = {}
        if kind != PLAIN:
            extra = {"producer_id": pid, "producer_epoch": 0, "base_sequence": 0}
        self.data += build_batch(built, transactional=txn, **extra)  # type: ignore[arg-type]
        version_header = NAME if self.strategy == "header" else None
        feed = [(r, version_of(r.headers) if version_header else None) for r in built]
        if all(r.key is not None for r in built):
            # the way ``cleanerd gen`` feeds it: one call per appended batch
            self.tracker.add_run(
                [r.key for r in built],  # type: ignore[misc]
                self.offset,
                [r.timestamp for r in built],
                [r.value is None for r in built],
                [v for _r, v in feed],
                producer_id=pid,
                txn=txn,
            )
        else:
            for r, v in feed:
                survivor = Survivor(r.offset, r.timestamp, r.value is None, v)
                self.tracker.add(r.key, survivor, producer_id=pid, txn=txn)
        model = [
            ModelRecord(r.offset, r.key, r.value, r.timestamp, version_of(r.headers)) for r in built
        ]
        if txn:
            self.open_txn.setdefault(pid, []).extend(model)
        else:
            self.model.extend(model)
        self.offset += len(built)

    def end(self, who: int, commit: bool) -> None:
        pid = FIRST_PID[TXN] + who
        self.data += build_end_txn_marker(
            commit=commit, offset=self.offset, timestamp=0, producer_id=pid, producer_epoch=0
        )
        self.offset += 1
        self.tracker.end_transaction(pid, commit=commit)
        pending = self.open_txn.pop(pid, [])
        self.model.extend(
            ModelRecord(r.offset, r.key, r.value, r.timestamp, r.version, aborted=not commit)
            for r in pending
        )


def write(ops: list[tuple[object, ...]], strategy: str) -> Log:
    log = Log(strategy)
    for op in ops:
        if op[0] == "append":
            _, kind, who, recs = op
            log.append(kind, who, recs)  # type: ignore[arg-type]
        else:
            _, who, commit = op
            log.end(who, commit)  # type: ignore[arg-type]
    return log


def by_offset(found: dict[bytes, Survivor]) -> dict[int, tuple[object, ...]]:
    return {s.offset: (key, s.timestamp, s.tombstone, s.version) for key, s in found.items()}


def model_by_offset(found: dict[int, ModelRecord], strategy: str) -> dict[int, tuple[object, ...]]:
    return {
        offset: (r.key, r.timestamp, r.value is None, r.version if strategy == "header" else None)
        for offset, r in found.items()
    }


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(ops=logs, strategy=st.sampled_from(["offset", "timestamp", "header"]))
def test_oracles_name_the_same_survivors(ops: list[tuple[object, ...]], strategy: str) -> None:
    log = write(ops, strategy)
    decoded = expected_survivors(
        iter_batches(bytes(log.data)),
        strategy=strategy,
        version_header=NAME if strategy == "header" else None,
    )
    # the survivors oracle agrees with itself: decoding the batches, or fed as gen feeds it
    assert decoded == log.tracker.survivors()
    assert log.tracker.open_records == sum(
        r.key is not None for pending in log.open_txn.values() for r in pending
    )

    kept = by_offset(decoded)
    assert kept == model_by_offset(survivors(log.model, strategy), strategy)
    # every tombstone's horizon passed: the model drops tombstone winners, nothing else
    live = {offset: row for offset, row in kept.items() if not row[2]}
    assert live == model_by_offset(survivors(log.model, strategy, log.offset), strategy)


def test_a_committed_transaction_competes_where_it_was_written() -> None:
    """Pinned: a record committed later still competes at its own offset, so a plain write wins."""
    ops: list[tuple[object, ...]] = [
        ("append", TXN, 0, [(b"k", b"x", 0, ())]),  # offset 0, open
        ("append", PLAIN, 0, [(b"k", b"y", 0, ())]),  # offset 1
        ("end", 0, True),  # offset 2: the commit
    ]
    log = write(ops, "offset")
    decoded = expected_survivors(iter_batches(bytes(log.data)))
    assert by_offset(decoded) == {1: (b"k", 0, False, None)}
    assert model_by_offset(survivors(log.model, "offset"), "offset") == {1: (b"k", 0, False, None)}
