"""Random logs for the property tests: hypothesis strategies of appends (keys, tombstones,
version headers, codecs; plain, idempotent and transactional producers), transaction ends and
rolls, and the ``Writer`` that applies them to a ``PartitionLog`` and keeps what the reference
model (``compaction_model``) needs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from hypothesis import strategies as st

from cleanerd.format import Compression, Header, Record, build_batch, build_end_txn_marker
from cleanerd.storage import PartitionLog
from cleanerd.topics import Strategy, StrategyConfig
from tests.support.compaction_model import ModelRecord

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


def strategy_config(name: str) -> StrategyConfig:
    """The strategy of that name; ``header`` reads ``VERSION_HEADER``."""
    return StrategyConfig(Strategy(name), VERSION_HEADER if name == "header" else "")
