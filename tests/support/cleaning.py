"""The cleaning engine's test kit, after Kafka's LogCleanerTest: its fake offset map, its clock
(``LARGE_TS``), ranges given by hand (``make_plan``), its record and producer helpers, and what
the tests read back from a log. Shared by the ``tests/compaction/test_cleaner*`` modules and the
other tests that clean real logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kafka.record.memory_records import MemoryRecords

from cleanerd.compaction import CleaningPlan, OffsetMap, plan_log, slot_bytes
from cleanerd.compaction._cleaner import Cleaner, CleanResult
from cleanerd.compaction._transactions import NEVER_EXPIRE
from cleanerd.format import Record, RecordBatch, kernels as k
from cleanerd.storage import (
    LOG_SUFFIX,
    REPLICATION_OFFSET_CHECKPOINT,
    AbortedTxn,
    PartitionLog,
    segment_file,
    update_offset_checkpoint,
)
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig

DAY = 86_400_000  # delete.retention.ms default
LARGE_TS = 2**63 - 1 - DAY - 1  # Kafka's largeTimestamp
LONG_MAX = 2**63 - 1
OFFSET = StrategyConfig()


def compacted_config(**settings: Any) -> TopicCleanerConfig:
    """Producers never expire unless a test says so: Kafka's LogCleanerTest cleans at
    ``largeTimestamp`` but never runs the producer-expiration check (docs/kafka-format.md §4.10)."""
    settings.setdefault("producer_id_expiration_ms", NEVER_EXPIRE)
    return TopicCleanerConfig(compact=True, delete=False, **settings)


def offset_map(
    capacity: int = 1 << 16, strategy: StrategyConfig = OFFSET, load_factor: float = 0.75
) -> OffsetMap:
    """Kafka's test map: ``capacity`` slots, ``floor(load_factor x capacity)`` keys."""
    return OffsetMap(capacity * slot_bytes(strategy), strategy, load_factor)


def make_plan(log: PartitionLog, first_dirty: int, first_uncleanable: int) -> CleaningPlan:
    """Kafka's ``LogToClean(log, firstDirty, firstUncleanable)``: a range given by hand."""
    return CleaningPlan(
        topic_partition=log.topic_partition,
        first_dirty_offset=first_dirty,
        checkpoint_invalid=False,
        first_uncleanable_dirty_offset=first_uncleanable,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=0,
        cleanable_bytes=0,
        compaction_delay_ms=0,
        must_clean_bytes=0,
        min_cleanable_dirty_ratio=0.0,
    )


def clean(
    log: PartitionLog,
    first_dirty: int = 0,
    upper: int | None = None,
    *,
    now: int = LARGE_TS,
    capacity: int = 1 << 16,
    strategy: StrategyConfig = OFFSET,
    config: TopicCleanerConfig | None = None,
    cleaner: Cleaner | None = None,
) -> CleanResult:
    """One ``doClean`` of [first_dirty, upper) (upper: the active segment's base by default)."""
    cleaner = cleaner or Cleaner(offset_map(capacity, strategy))
    bound = log.active_segment.base_offset if upper is None else upper
    cfg = config or compacted_config()
    return cleaner.clean(log, make_plan(log, first_dirty, bound), cfg, strategy, now)


def two_pass_clean(
    log: PartitionLog, first_dirty: int = 0, upper: int | None = None, now: int = LARGE_TS
) -> None:
    clean(log, first_dirty, upper, now=now)
    clean(log, first_dirty, upper, now=now + DAY + 1)


def clean_until_done(
    log: PartitionLog,
    omap: OffsetMap,
    strategy: StrategyConfig,
    config: TopicCleanerConfig,
    now: int,
) -> list[CleanResult]:
    """Plan and clean as the daemon does until nothing is left to clean."""
    cleaner = Cleaner(omap)
    results: list[CleanResult] = []
    for _ in range(10_000):
        _, p = plan_log(log, config, now)
        if p.first_dirty_offset >= p.first_uncleanable_offset:
            return results
        result = cleaner.clean(log, p, config, strategy, now)
        assert result.end_offset > p.first_dirty_offset, "a pass must make progress"
        results.append(result)
    raise AssertionError("cleaning did not finish")


def batches_of(log: PartitionLog) -> list[RecordBatch]:
    return list(log.read(0))


def data_records(log: PartitionLog) -> dict[int, Record]:
    return {r.offset: r for b in batches_of(log) if not b.header.is_control for r in b.records()}


def keys_in_log(log: PartitionLog) -> list[int]:
    """Kafka's ``keysInLog``: keys of data records that have a value."""
    return [
        int(r.key)
        for b in batches_of(log)
        if not b.header.is_control
        for r in b.records()
        if r.key is not None and r.value is not None
    ]


def offsets_in_log(log: PartitionLog) -> list[int]:
    """Kafka's ``offsetsInLog``: every record, markers included."""
    return [r.offset for b in batches_of(log) for r in b.records()]


def last_offsets_per_batch(log: PartitionLog) -> list[int]:
    return [b.header.last_offset for b in batches_of(log)]


def last_sequences(log: PartitionLog) -> dict[int, int]:
    return {
        b.header.producer_id: b.header.last_sequence
        for b in batches_of(log)
        if b.header.has_producer_id and not b.header.is_control
    }


def aborted_txns(log: PartitionLog) -> list[AbortedTxn]:
    return [t for s in log.segments for t in s.txn_index.all_aborted()]


def horizons(log: PartitionLog) -> list[int | None]:
    return [b.header.delete_horizon_ms for b in batches_of(log)]


def rec(key: int | None, value: int | None = 0, ts: int = 0) -> Record:
    """Kafka's ``record(key, value)``: decimal strings; value None is a tombstone."""
    return Record(
        0, ts, None if key is None else str(key).encode(), None if value is None else b"%d" % value
    )


class Producer:
    """Kafka's ``appendTransactionalAsLeader`` / idempotent appends with running sequences."""

    def __init__(self, log: PartitionLog, pid: int, epoch: int = 0, txn: bool = True) -> None:
        self.log, self.pid, self.epoch, self.txn = log, pid, epoch, txn
        self.seq = 0

    def __call__(self, *keys: int, tombstone: bool = False) -> None:
        records = [rec(key, None if tombstone else key) for key in keys]
        self.log.append(
            records,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional=self.txn,
        )
        self.seq += len(records)

    def commit(self) -> None:
        self.log.append_marker(
            commit=True, producer_id=self.pid, producer_epoch=self.epoch, timestamp=0
        )

    def abort(self) -> None:
        self.log.append_marker(
            commit=False, producer_id=self.pid, producer_epoch=self.epoch, timestamp=0
        )


def new_log(tmp_path: Path, **config: Any) -> PartitionLog:
    return PartitionLog.create(tmp_path / "t-0", LogConfig(**config), clock=lambda: 0)


def fill_segments(log: PartitionLog, count: int, make: Callable[[int], Record]) -> None:
    """Append one-record batches until the log has ``count`` segments."""
    while len(log.segments) < count:
        log.append([make(log.log_end_offset)])


def write_segment(directory: Path, base: int, batches: Iterable[bytes]) -> None:
    """A ``.log`` file written by hand (the log rebuilds its indexes when opened)."""
    directory.mkdir(parents=True, exist_ok=True)
    segment_file(directory, base, LOG_SUFFIX).write_bytes(b"".join(batches))


def files_snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def no_temp_files(directory: Path) -> bool:
    return not any(p.name.endswith((".cleaned", ".swap", ".deleted")) for p in directory.iterdir())


def hashes_of(keys: Sequence[bytes]) -> np.ndarray[Any, Any]:
    return np.array(
        [
            [int(h) for h in k.murmur3_128(np.frombuffer(x, dtype=np.uint8), 0, len(x))]
            for x in keys
        ],
        dtype=np.uint64,
    ).reshape(-1, 2)


HEADER_ONLY = 61  # bytes of a batch with no records (docs/kafka-format.md §2.1)


def kafka_python_batches(log: PartitionLog, below: int) -> list[tuple[int, int, int]]:
    """(last offset, record count, size) of each batch below ``below``, as kafka-python reads
    the segment files (CRC checked)."""
    out: list[tuple[int, int, int]] = []
    for seg in log.segments:
        records = MemoryRecords(seg.log_path.read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            if batch.last_offset < below:
                out.append((batch.last_offset, batch.records_count, batch.size_in_bytes))
    return out


def set_high_watermark(log: PartitionLog, offset: int) -> None:
    path = log.directory.parent / REPLICATION_OFFSET_CHECKPOINT
    update_offset_checkpoint(path, {log.topic_partition: offset})


def unkeyed_tail(tmp_path: Path, active_records: int, hw: int | None) -> PartitionLog:
    """Offsets 0 and 1 keyed, 2 unkeyed (every cleaning drops it), then a roll at 3 and
    ``active_records`` records in the active segment; ``hw`` checkpointed when given."""
    log = new_log(tmp_path)
    log.append([rec(0, 0)])
    log.append([rec(1, 1)])
    log.append([rec(None, 2)])
    log.roll()
    for i in range(active_records):
        log.append([rec(10 + i, i)])
    if hw is not None:
        set_high_watermark(log, hw)
    return log
