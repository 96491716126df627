"""The engine against the reference model (``compaction_model``) on random logs.

Random logs: keys and unkeyed records, tombstones, out-of-order timestamps, version headers
(present, missing, wrong length), codecs, several segments, idempotent producers and
transactional producers with commits and aborts. Random offset maps down to two slots, so most
examples need several passes. Each example cleans to completion (a fresh plan per pass until
the first dirty offset reaches the first uncleanable one) and compares the data records left with
the model; then, past the delete horizon, appends more records and cleans again, which must
remove every tombstone of the first part.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleanerd.compaction import OffsetMap, slot_bytes
from cleanerd.format import Compression, Header, Record, build_batch, build_end_txn_marker
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig, Strategy, StrategyConfig
from tests.compaction.test_cleaner import (
    DAY,
    clean_until_done,
    compacted_config,
    data_records,
)
from tests.support.compaction_model import ModelRecord, survivors

VERSION_HEADER = "v"
NOW = 10_000_000
TXN_PIDS = (100, 101)
IDEM_PIDS = (200, 201)

record_st = st.tuples(
    st.one_of(st.none(), st.integers(0, 11), st.integers(0, 11)),  # key index, None: unkeyed
    st.booleans(),  # tombstone
    st.integers(1000, 1030),  # timestamp (out of order, with ties)
    st.sampled_from(["none", "ok", "ok", "bad"]),  # version header
    st.integers(-3, 3),  # version
)
append_st = st.tuples(
    st.just("append"),
    st.lists(record_st, min_size=1, max_size=4),
    st.sampled_from([Compression.NONE, Compression.NONE, Compression.LZ4, Compression.GZIP]),
    st.sampled_from(["plain", "plain", "idem", "txn"]),
    st.integers(0, 1),  # which producer
)
end_st = st.tuples(st.just("end"), st.integers(0, 1), st.booleans())
roll_st = st.tuples(st.just("roll"))
op_st = st.one_of(append_st, append_st, append_st, end_st, roll_st)


@dataclass
class Writer:
    """Appends ops to a log and records what the model needs."""

    log: PartitionLog
    replica: bool = False  # append ready-made batches (append_batches), as a replica does
    records: list[ModelRecord] = field(default_factory=list)
    txn_records: dict[int, list[int]] = field(default_factory=dict)  # pid -> record indexes
    sequences: dict[int, int] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)
    unkeyed: int = 0

    def append(
        self,
        recs: list[tuple[int | None, bool, int, str, int]],
        codec: Compression,
        kind: str,
        who: int,
    ) -> None:
        n = len(self.records)
        built = []
        for i, (key_index, tomb, ts, header, version) in enumerate(recs):
            key = None if key_index is None else b"k%d" % key_index
            value = None if tomb else b"v%d" % (n + i)
            headers: tuple[Header, ...] = ()
            if header == "ok":
                headers = ((VERSION_HEADER, struct.pack(">q", version)),)
            elif header == "bad":
                headers = ((VERSION_HEADER, b"\x00\x01"),)
            built.append(Record(0, ts, key, value, headers))
        extra: dict[str, object] = {}
        pid = -1
        if kind != "plain":
            pid = (TXN_PIDS if kind == "txn" else IDEM_PIDS)[who]
            seq = self.sequences.get(pid, 0)
            self.sequences[pid] = seq + len(built)
            extra = {"producer_id": pid, "producer_epoch": 0, "base_sequence": seq}
            if kind == "txn":
                extra["transactional"] = True
        if self.replica:
            placed = [
                Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(built)
            ]
            batch = build_batch(placed, compression=codec, **extra)  # type: ignore[arg-type]
            info = self.log.append_batches(batch)
        else:
            info = self.log.append(built, compression=codec, **extra)  # type: ignore[arg-type]
        for i, r in enumerate(built):
            if kind == "txn":
                self.txn_records.setdefault(pid, []).append(len(self.records))
            self.records.append(
                ModelRecord(
                    offset=info.first_offset + i,
                    key=r.key,
                    value=r.value,
                    timestamp=r.timestamp,
                    version=recs[i][4] if recs[i][3] == "ok" else None,
                )
            )

    def end(self, who: int, commit: bool) -> None:
        pid = TXN_PIDS[who]
        if pid not in self.txn_records:
            return
        if self.replica:
            marker = build_end_txn_marker(
                commit=commit, offset=0, timestamp=1000, producer_id=pid, producer_epoch=0
            )
            self.log.append_batches(marker)
        else:
            self.log.append_marker(commit=commit, producer_id=pid, producer_epoch=0, timestamp=1000)
        indexes = self.txn_records.pop(pid)
        if not commit:
            self.aborted.update(indexes)

    def run(self, ops: list[tuple[object, ...]]) -> None:
        for op in ops:
            if op[0] == "append":
                _, recs, codec, kind, who = op
                self.append(recs, codec, kind, who)  # type: ignore[arg-type]
            elif op[0] == "end":
                self.end(op[1], op[2])  # type: ignore[arg-type]
            else:
                self.log.roll()

    def finish(self, commits: list[bool]) -> None:
        for who, commit in enumerate(commits):
            self.end(who, commit)
        self.log.roll()

    def model(self) -> list[ModelRecord]:
        return [
            ModelRecord(r.offset, r.key, r.value, r.timestamp, r.version, i in self.aborted)
            for i, r in enumerate(self.records)
        ]


def _strategy(name: str) -> StrategyConfig:
    return StrategyConfig(Strategy(name), VERSION_HEADER if name == "header" else "")


def _check(log: PartitionLog, expected: dict[int, ModelRecord]) -> None:
    got = data_records(log)
    assert {o: (r.key, r.value) for o, r in got.items()} == {
        o: (r.key, r.value) for o, r in expected.items()
    }


@pytest.mark.slow
@settings(
    max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(op_st, min_size=10, max_size=50),
    commits=st.lists(st.booleans(), min_size=2, max_size=2),
    later=st.lists(append_st, min_size=1, max_size=6),
    strategy_name=st.sampled_from(["offset", "timestamp", "header"]),
    slots=st.integers(2, 8),
    load_factor=st.sampled_from([0.75, 0.9, 1.0]),
    segment_bytes=st.sampled_from([200, 400, 1000, 100_000]),
    replica=st.booleans(),
    lost=st.lists(st.sampled_from(["index", "timeindex", "txnindex"]), max_size=12),
)
def test_engine_matches_model(
    tmp_path_factory: object,
    ops: list[tuple[object, ...]],
    commits: list[bool],
    later: list[tuple[object, ...]],
    strategy_name: str,
    slots: int,
    load_factor: float,
    segment_bytes: int,
    replica: bool,
    lost: list[str],
) -> None:
    """Also through ``append_batches`` and with index files lost at random before cleaning (a
    log dir copied without them): recovery and the cleaner's check of each ``.txnindex``
    must leave no aborted record taken for committed."""
    directory: Path = tmp_path_factory.mktemp("log") / "t-0"  # type: ignore[attr-defined]
    seg_config = LogConfig(segment_bytes=segment_bytes)
    log = PartitionLog.create(directory, seg_config)
    writer = Writer(log, replica)
    writer.run(ops)
    writer.finish(commits)
    if lost:
        log.close()
        logs = sorted(directory.glob("*.log"))
        for i, suffix in enumerate(lost):  # segment i mod n loses that index
            logs[(i * 7) % len(logs)].with_suffix("." + suffix).unlink(missing_ok=True)
        log = writer.log = PartitionLog(directory, seg_config)
    strategy = _strategy(strategy_name)
    slots = max(slots, 2)
    omap = OffsetMap(slots * slot_bytes(strategy), strategy, load_factor)
    config = compacted_config(delete_retention_ms=DAY)

    results = clean_until_done(log, omap, strategy, config, NOW)
    _check(log, survivors(writer.model(), strategy_name))
    unkeyed = sum(
        1 for i, r in enumerate(writer.records) if r.key is None and i not in writer.aborted
    )
    assert sum(r.stats.invalid_messages_read for r in results) == unkeyed
    assert verify_partition(directory).problems == []

    # past the horizon: new data and a clean remove every tombstone of the first part
    boundary = log.log_end_offset
    writer.run(later)
    writer.finish([True, True])
    if strategy.versioned:
        # one pass: under timestamp/header a record that loses to a tombstone comes back if a
        # pass drops the expired tombstone before a later pass compares the two (Kafka's
        # tombstone semantics); which one survives then depends on where passes end
        omap = OffsetMap(64 * slot_bytes(strategy), strategy)
    clean_until_done(log, omap, strategy, config, NOW + DAY)
    expected = survivors(writer.model(), strategy_name, expired_below=boundary)
    _check(log, expected)
    assert verify_partition(directory).problems == []
    log.close()
    _check(PartitionLog(directory), expected)
