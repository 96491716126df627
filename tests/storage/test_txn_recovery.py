"""Transactions survive every path into the log (issue 13).

Transactional logs (several producers interleaved, commits and aborts, transactions spanning
segments, aborts with data in an earlier segment and with none at all) are written through the
record API and replica style (ready-made batches from kafka-python's builder, several per append).
The ``.txnindex`` entries they must hold come from an oracle written here from Kafka's rule
(docs/kafka-format.md §3.5, ``ProducerStateManager.lastStableOffset``), not from cleanerd's walk.
Then the indexes are deleted or damaged, and: reopening rebuilds them byte for byte, ``verify``
reports the damage, and compaction keeps exactly the model's survivors (no committed record lost, no
aborted record anywhere).
"""

from __future__ import annotations

import json
import random
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka.record.default_records import DefaultRecordBatchBuilder

from cleanerd.cli import cli
from cleanerd.compaction import Cleaner
from cleanerd.format import Record, build_end_txn_marker
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig
from cleanerd.workload import WorkloadSpec, expected_survivors, generate
from tests.support.cleaning import (
    DAY,
    LARGE_TS,
    OFFSET,
    clean_until_done,
    compacted_config,
    data_records,
    offset_map,
)
from tests.support.compaction_model import ModelRecord, survivors

PIDS = (101, 102, 103)
ENTRY = struct.Struct(">hqqqq")


def at_offset(batch: bytes | bytearray, base_offset: int) -> bytes:
    """A batch moved to ``base_offset`` (the first 8 bytes; not CRC-covered), as a leader would
    place it before a replica appends it."""
    return struct.pack(">q", base_offset) + bytes(batch[8:])


@dataclass
class TxnWriter:
    """Writes a random transactional workload and keeps what the oracles need."""

    log: PartitionLog
    replica: bool
    records: list[ModelRecord] = field(default_factory=list)
    open_txns: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    open_records: dict[int, list[int]] = field(default_factory=dict)  # pid -> record indexes
    aborted: set[int] = field(default_factory=set)
    entries: list[tuple[int, int, int, int]] = field(default_factory=list)  # Kafka's, oracle
    pending: list[bytes] = field(default_factory=list)  # replica style: batches not yet appended
    next_offset: int = 0

    def data(self, pid: int, keys: list[int]) -> None:
        """A batch of records; ``pid`` -1 is a plain producer, else transactional."""
        first = self.next_offset
        recs = [(b"k%d" % key, b"v%d" % (first + i)) for i, key in enumerate(keys)]
        if self.replica:
            builder = DefaultRecordBatchBuilder(
                magic=2,
                compression_type=0,
                is_transactional=pid >= 0,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=0 if pid >= 0 else -1,
                batch_size=1 << 20,
            )
            for i, (key, value) in enumerate(recs):
                builder.append(i, 1000 + first + i, key, value, [])
            self.pending.append(at_offset(builder.build(), first))
        else:
            extra = {"producer_id": pid, "producer_epoch": 0, "transactional": True}
            info = self.log.append(
                [Record(0, 1000 + first + i, k, v) for i, (k, v) in enumerate(recs)],
                **(extra if pid >= 0 else {}),  # type: ignore[arg-type]
            )
            assert info.first_offset == first
        for i, (key, value) in enumerate(recs):
            if pid >= 0:
                self.open_txns.setdefault(pid, first)
                self.open_records.setdefault(pid, []).append(len(self.records))
            self.records.append(ModelRecord(first + i, key, value, 1000 + first + i))
        self.next_offset += len(keys)

    def end(self, pid: int, commit: bool) -> None:
        """A COMMIT or ABORT marker (also for a producer with no open transaction)."""
        offset = self.next_offset
        if self.replica:
            self.pending.append(
                build_end_txn_marker(
                    commit=commit, offset=offset, timestamp=5000, producer_id=pid, producer_epoch=0
                )
            )
        else:
            info = self.log.append_marker(
                commit=commit, producer_id=pid, producer_epoch=0, timestamp=5000
            )
            assert info.first_offset == offset
        first = self.open_txns.pop(pid, None)
        indexes = self.open_records.pop(pid, [])
        if not commit:
            self.aborted.update(indexes)
            if first is not None:  # Kafka: LSO = oldest other open transaction, else after us
                lso = min(self.open_txns.values(), default=offset + 1)
                self.entries.append((pid, first, offset, lso))
        self.next_offset += 1

    def flush(self) -> None:
        """Replica style: append what is pending as one ``append_batches`` call."""
        if self.pending:
            info = self.log.append_batches(b"".join(self.pending))
            assert info.last_offset == self.next_offset - 1
            self.pending.clear()

    def roll(self) -> None:
        self.flush()
        self.log.roll()

    def model(self) -> list[ModelRecord]:
        return [
            ModelRecord(r.offset, r.key, r.value, r.timestamp, aborted=i in self.aborted)
            for i, r in enumerate(self.records)
        ]


def write_workload(directory: Path, *, replica: bool, seed: int) -> TxnWriter:
    """Interleaved producers over a few segments; every transaction ended, the log rolled."""
    rng = random.Random(seed)
    log = PartitionLog.create(directory, LogConfig(segment_bytes=1500))
    writer = TxnWriter(log, replica)
    for step in range(120):
        pid = rng.choice(PIDS)
        action = rng.random()
        if action < 0.55:
            writer.data(pid, [rng.randrange(12) for _ in range(rng.randint(1, 4))])
        elif action < 0.65:
            writer.data(-1, [rng.randrange(12)])
        elif action < 0.95 and pid in writer.open_txns:
            writer.end(pid, commit=rng.random() < 0.5)
        elif action < 0.97:
            writer.end(pid, commit=False)  # an abort with no data at all
        if (replica and rng.random() < 0.3) or step % 37 == 36:
            writer.flush()
        if step % 41 == 40:
            writer.roll()
    for pid in sorted(writer.open_txns):
        writer.end(pid, commit=rng.random() < 0.5)
    writer.roll()
    return writer


def oracle_indexes(directory: Path, writer: TxnWriter) -> dict[str, bytes]:
    """Each segment's ``.txnindex`` as Kafka writes it: entries by the marker's segment."""
    bases = sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
    out = {f"{b:020d}.txnindex": b"" for b in bases}
    for pid, first, last, lso in writer.entries:
        base = max(b for b in bases if b <= last)
        out[f"{base:020d}.txnindex"] += ENTRY.pack(0, pid, first, last, lso)
    return out


def indexes_on_disk(directory: Path) -> dict[str, bytes]:
    """Each segment's ``.txnindex`` bytes (b"" where there is none, as Kafka leaves it)."""
    return {
        f"{int(p.name.split('.')[0]):020d}.txnindex": (
            p.with_suffix(".txnindex").read_bytes() if p.with_suffix(".txnindex").exists() else b""
        )
        for p in directory.glob("*.log")
    }


def assert_model_survivors(log: PartitionLog, writer: TxnWriter) -> None:
    """Exactly the model's survivors: committed data of every key, no aborted record."""
    got = {o: (r.key, r.value) for o, r in data_records(log).items()}
    want = {o: (r.key, r.value) for o, r in survivors(writer.model(), "offset").items()}
    assert got == want
    aborted_offsets = {writer.records[i].offset for i in writer.aborted}
    assert not aborted_offsets & got.keys()


def compact(log: PartitionLog) -> int:
    """Clean until done; returns how many ``.txnindex`` files the cleanings rebuilt."""
    results = clean_until_done(log, offset_map(), OFFSET, compacted_config(), LARGE_TS)
    results += clean_until_done(log, offset_map(), OFFSET, compacted_config(), LARGE_TS + DAY)
    return sum(r.stats.txn_indexes_rebuilt for r in results)


def txn_problems(directory: Path) -> list[str]:
    return [
        f"{p.file}: {p.message}"
        for p in verify_partition(directory).problems
        if p.check == "txn-index"
    ]


@pytest.fixture(params=[("records", 1), ("records", 2), ("replica", 1), ("replica", 3)])
def written(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, TxnWriter]:
    style, seed = request.param
    directory = tmp_path / "txn-0"
    writer = write_workload(directory, replica=style == "replica", seed=seed)
    writer.log.close()
    assert writer.entries, "the workload must abort transactions with data"
    newest = {r.key: i for i, r in enumerate(writer.records)}
    assert writer.aborted & set(newest.values()), "an aborted record must shadow committed data"
    assert len(list(directory.glob("*.log"))) >= 3
    return directory, writer


def test_every_append_path_writes_kafkas_txnindex(written: tuple[Path, TxnWriter]) -> None:
    directory, writer = written
    assert indexes_on_disk(directory) == oracle_indexes(directory, writer)
    assert txn_problems(directory) == []


def test_txnindex_rebuilt_byte_for_byte_when_the_indexes_are_gone(
    written: tuple[Path, TxnWriter],
) -> None:
    directory, writer = written
    for suffix in ("index", "timeindex", "txnindex"):
        for path in directory.glob(f"*.{suffix}"):
            path.unlink()
    log = PartitionLog(directory)
    assert log.report.rebuilt_txn_indexes
    assert indexes_on_disk(directory) == oracle_indexes(directory, writer)
    assert compact(log) == 0  # nothing left to distrust after the rebuild
    assert_model_survivors(log, writer)
    assert verify_partition(directory).problems == []
    log.close()


def _drop_txnindex(path: Path) -> None:
    path.unlink()


def _truncate_txnindex(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def _remove_first_entry(path: Path) -> None:
    path.write_bytes(path.read_bytes()[ENTRY.size :])


def _add_committed_range(path: Path) -> None:
    """An entry claiming a non-existent abort over the segment's data: it would hide data."""
    data = path.read_bytes()
    _, pid, _, last, _ = ENTRY.unpack_from(data, len(data) - ENTRY.size)
    path.write_bytes(data + ENTRY.pack(0, pid, 0, last + 1, last + 2))


def _widen_first_offset(path: Path) -> None:
    """The first entry starts at the segment's first offset: committed batches before it of
    the same producer would be taken for aborted."""
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, 10, 0)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "expect"),
    [
        (_drop_txnindex, "no .txnindex at all"),
        (_truncate_txnindex, "not a multiple of 34"),
        (_remove_first_entry, "no entry for the aborted transaction"),
        # at last + 1 there may be an ABORT marker of the producer: then the range is what is wrong
        (_add_committed_range, "names no ABORT marker|has first offset 0;"),
    ],
)
def test_damaged_txnindex_is_reported_and_never_loses_committed_data(
    written: tuple[Path, TxnWriter], damage: object, expect: str
) -> None:
    directory, writer = written
    for damaged in sorted(p for p in directory.glob("*.txnindex") if p.stat().st_size):
        damage(damaged)  # type: ignore[operator]
        problems = verify_partition(directory).problems
        found = [p for p in problems if p.file == str(damaged) and re.search(expect, p.message)]
        assert found, problems
    log = PartitionLog(directory)
    compact(log)
    assert_model_survivors(log, writer)
    assert verify_partition(directory).problems == []
    log.close()


def test_cleaner_rebuilds_a_wrong_index_and_says_which(tmp_path: Path) -> None:
    """Only the ``.txnindex`` is gone (Kafka would not recover the segment): the cleaner's
    cross-check finds the missing entries, rebuilds, counts it, and names the file."""
    directory = tmp_path / "txn-0"
    writer = write_workload(directory, replica=False, seed=5)
    writer.log.close()
    want = oracle_indexes(directory, writer)
    for path in directory.glob("*.txnindex"):
        path.unlink()
    log = PartitionLog(directory)
    assert log.report.rebuilt_txn_indexes == []  # .index and .timeindex are there
    problems = log.check_txn_indexes(repair=False)
    assert {p.kind for p in problems} == {"missing"}
    cleaner = Cleaner(offset_map())
    results = clean_until_done(log, cleaner.map, OFFSET, compacted_config(), LARGE_TS)
    first = results[0].stats
    assert first.txn_indexes_rebuilt == sum(1 for v in want.values() if v)
    assert any("no entry for the aborted transaction" in p for p in first.txn_index_problems)
    assert all(".txnindex" in p for p in first.txn_index_problems)
    assert "txn_index_problems" in first.summary(log.topic_partition, 0, 0)
    assert_model_survivors(log, writer)
    log.close()


def test_widened_first_offset_is_found_by_the_cleaner(tmp_path: Path) -> None:
    directory = tmp_path / "txn-0"
    writer = write_workload(directory, replica=True, seed=7)
    writer.log.close()
    damaged = sorted(p for p in directory.glob("*.txnindex") if p.stat().st_size)[-1]
    _widen_first_offset(damaged)
    log = PartitionLog(directory)
    kinds = {p.kind for p in log.check_txn_indexes(repair=False)}
    assert "first-offset" in kinds
    assert compact(log) >= 1
    assert_model_survivors(log, writer)
    log.close()


def test_writer_that_died_before_the_index_entry_is_repaired_on_the_next_append(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "txn-0"
    log = PartitionLog.create(directory)
    log.append([Record(0, 1, b"k", b"v")], producer_id=7, producer_epoch=0, transactional=True)
    log.append_marker(commit=False, producer_id=7, producer_epoch=0, timestamp=2)
    index = log.active_segment.txn_index.path
    entry = index.read_bytes()
    log.close()
    index.unlink()  # the marker reached the log, its entry did not
    log = PartitionLog(directory)
    log.append([Record(0, 3, b"k", b"w")], producer_id=8, producer_epoch=0, transactional=True)
    log.append_marker(commit=False, producer_id=8, producer_epoch=0, timestamp=4)
    log.close()
    assert index.read_bytes() == entry + ENTRY.pack(0, 8, 2, 3, 4)


def test_append_batches_tracks_transactions_across_calls_and_rolls(tmp_path: Path) -> None:
    """A transaction opened in one replica append, aborted in a later one after a roll, while
    another producer's transaction stays open: the entry and its LSO are Kafka's."""
    log = PartitionLog.create(tmp_path / "txn-0")
    writer = TxnWriter(log, replica=True)
    writer.data(101, [1, 2])
    writer.flush()
    writer.data(102, [3])
    writer.roll()
    writer.end(101, commit=False)
    writer.flush()
    writer.end(102, commit=False)
    writer.data(103, [4])
    writer.end(103, commit=True)
    writer.flush()
    log.close()
    assert writer.entries == [(101, 0, 3, 2), (102, 2, 4, 5)]
    assert indexes_on_disk(tmp_path / "txn-0") == oracle_indexes(tmp_path / "txn-0", writer)


def test_compact_cli_warns_about_each_rebuilt_txnindex_and_keeps_committed_data(
    tmp_path: Path,
) -> None:
    """A log dir copied without its ``.txnindex`` files, compacted as a user would."""
    logdir = tmp_path / "L"
    generate(
        logdir,
        WorkloadSpec(
            topic="ftxn",
            records=600,
            keys=40,
            records_per_batch=10,
            segment_bytes=4000,
            transactional_producers=2,
            abort_ratio=0.5,
            seed=8,
        ),
    )
    part = logdir / "ftxn-0"
    log = PartitionLog(part)
    log.roll()
    want = {k: s.offset for k, s in expected_survivors(log.read()).items() if not s.tombstone}
    log.close()
    lost = sorted(p for p in part.glob("*.txnindex") if p.stat().st_size)
    assert lost
    for path in lost:
        path.unlink()
    args = ["compact", str(logdir), "--delete-retention-ms", "0", "--now", "9999999999999"]
    result = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (summary,) = [json.loads(line) for line in result.stdout.splitlines()]
    for path in lost:
        assert f"transaction index rebuilt: {path}: no entry" in result.stderr
        assert any(str(path) in p for p in summary["txn_index_problems"])
    log = PartitionLog(part)
    got = {
        r.key: r.offset
        for b in log.read(0)
        if not b.header.is_control
        for r in b.records()
        if r.value is not None
    }
    log.close()
    assert got == want
