"""Writes a seeded workload into a log dir through ``PartitionLog`` (the reference writer path).

Same spec and seed give byte-identical partitions: every random draw comes from a generator
seeded by (seed, partition), timestamps start at a fixed instant, and the log's clock is the
generator's own, never the wall clock.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cleanerd.format import kernels as k
from cleanerd.storage import LogDir, PartitionLog, TopicPartition, segment_log_stats
from cleanerd.workload._producers import Producer, begin_if_idle, make_producers
from cleanerd.workload._source import RecordSource
from cleanerd.workload._spec import DEFAULT_START_TIMESTAMP, WorkloadError, WorkloadSpec
from cleanerd.workload._summary import PartitionResult, SegmentInfo, WorkloadResult
from cleanerd.workload._survivors import SurvivorTracker, expected_survivors

Progress = Callable[[int, int], None]
"""Called with (partition, data records written so far) after every batch."""


def partition_dirs(logdir: Path, spec: WorkloadSpec) -> list[Path]:
    """The ``<topic>-<partition>`` directories the spec writes."""
    return [Path(logdir) / TopicPartition(spec.topic, p).dir_name for p in range(spec.partitions)]


def has_data(directory: Path) -> bool:
    """Whether a partition directory holds any non-empty ``.log`` segment."""
    if not directory.is_dir():
        return False
    return any(st.st_size > 0 for _, st in segment_log_stats(directory).values())


def check_target(logdir: Path, spec: WorkloadSpec) -> None:
    """Refuse (before writing anything) to add to partitions holding data unless ``append``."""
    if Path(logdir).exists() and not Path(logdir).is_dir():
        raise WorkloadError("logdir", f"{logdir} exists and is not a directory")
    if spec.append:
        return
    busy = [d for d in partition_dirs(logdir, spec) if has_data(d)]
    if busy:
        names = ", ".join(d.name for d in busy[:5]) + (" ..." if len(busy) > 5 else "")
        raise WorkloadError(
            "append",
            f"partition directory {names} in {logdir} already holds data; "
            "pass --append to add to it, or choose another log dir or --topic",
        )


def generate(logdir: Path, spec: WorkloadSpec, progress: Progress | None = None) -> WorkloadResult:
    """Write every partition of the spec (one after another) and describe what was written."""
    logdir = Path(logdir)
    check_target(logdir, spec)
    logdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with LogDir(logdir).locked():  # a broker (or another cleanerd) owning the dir is refused
        results = [
            write_partition(directory, p, spec, progress)
            for p, directory in enumerate(partition_dirs(logdir, spec))
        ]
    return WorkloadResult(str(logdir), spec, results, time.perf_counter() - started)


class _Writer:
    """The per-partition loop state: log, record source, producers, tracker and counters."""

    def __init__(self, log: PartitionLog, source: RecordSource, rnd: random.Random) -> None:
        self.log = log
        self.source = source
        self.rnd = rnd
        self.tracker = SurvivorTracker()
        self.seen = np.zeros(source.spec.keys, dtype=np.bool_)

    def batch(self, writer: Producer, n: int, result: PartitionResult) -> None:
        """Append ``n`` records from ``writer``; its last planned batch ends its transaction."""
        spec = self.source.spec
        drawn = self.source.draw(n)
        info = self.log.append(
            drawn.records,
            compression=spec.compression,
            producer_id=writer.producer_id,
            producer_epoch=writer.epoch,
            base_sequence=writer.take_sequence(n),
            transactional=writer.transactional,
        )
        self.tracker.add_run(
            drawn.keys,
            info.first_offset,
            drawn.timestamps,
            drawn.tombstones,
            drawn.versions,
            producer_id=writer.producer_id,
            txn=writer.transactional,
        )
        self.seen[drawn.key_ids] = True
        result.records += n
        result.batches += 1
        result.tombstones += sum(drawn.tombstones)
        if writer.transactional:
            writer.txn_batches_left -= 1
            if writer.txn_batches_left <= 0:
                self.end_txn(writer, result)

    def end_txn(self, writer: Producer, result: PartitionResult) -> None:
        """COMMIT or ABORT (drawn with ``abort_ratio``) the writer's open transaction."""
        commit = self.rnd.random() >= self.source.spec.abort_ratio
        self.log.append_marker(
            commit=commit,
            producer_id=writer.producer_id,
            producer_epoch=writer.epoch,
            timestamp=self.source.now,
        )
        affected = self.tracker.end_transaction(writer.producer_id, commit=commit)
        writer.in_txn = False
        writer.txn_batches_left = 0
        if commit:
            result.commits += 1
        else:
            result.aborts += 1
            result.aborted_records += affected


class _Clock:
    """The log's clock is the generator's time, never the wall clock: runs must be reproducible."""

    def __init__(self) -> None:
        self.source: RecordSource | None = None

    def __call__(self) -> int:
        return DEFAULT_START_TIMESTAMP if self.source is None else self.source.now


def _start_timestamp(log: PartitionLog, spec: WorkloadSpec, existing: bool) -> int:
    """The spec's start, or (appending, none given) just after the newest timestamp in the log."""
    if spec.start_timestamp is not None:
        return spec.start_timestamp
    newest = -1
    if existing:
        for seg in log.segments:
            scan = seg.scan(check_crc=False)
            if len(scan):
                newest = max(newest, int(scan.batches[:, k.B_MAX_TIMESTAMP].max()))
    return max(DEFAULT_START_TIMESTAMP, newest + 1)


def write_partition(
    directory: Path, partition: int, spec: WorkloadSpec, progress: Progress | None = None
) -> PartitionResult:
    """Append the spec's records to one partition directory (created if missing)."""
    started = time.perf_counter()
    existing = has_data(directory)
    rng = np.random.default_rng([spec.seed, partition])
    rnd = random.Random(int(rng.integers(2**63)))
    clock = _Clock()
    log = PartitionLog.create(directory, spec.log_config(), clock=clock)
    result = PartitionResult(partition, directory.name, appended_to_existing=existing)
    try:
        source = RecordSource(spec, rng, _start_timestamp(log, spec, existing))
        clock.source = source
        writers = make_producers(spec, log.producer_state() if existing else None, rnd)
        w = _Writer(log, source, rnd)
        remaining = spec.records
        while remaining > 0:
            writer = writers[rnd.randrange(len(writers))]
            begin_if_idle(writer, rnd)
            n = min(spec.records_per_batch, remaining)
            w.batch(writer, n, result)
            remaining -= n
            if progress is not None:
                progress(partition, result.records)
        for writer in writers:
            if writer.in_txn and not spec.leave_open:
                w.end_txn(writer, result)
        result.open_transactions = sum(1 for x in writers if x.in_txn)
        result.distinct_keys = int(w.seen.sum())
        result.first_offset = log.log_start_offset
        result.last_offset = log.log_end_offset - 1
        if existing:
            result.expected = expected_survivors(log.read())
        else:
            result.expected = w.tracker.survivors()
    finally:
        log.close()
    result.segments = _segments(log)
    result.elapsed_s = time.perf_counter() - started
    return result


def _segments(log: PartitionLog) -> list[SegmentInfo]:
    out = []
    for seg in log.segments:
        scan = seg.scan(check_crc=False)
        b = scan.batches
        out.append(
            SegmentInfo(
                file=seg.log_path.name,
                base_offset=seg.base_offset,
                last_offset=int(b[-1, k.B_LAST_OFFSET]) if len(scan) else seg.base_offset - 1,
                bytes=seg.size,
                batches=len(scan),
                records=int(b[:, k.B_COUNT].sum()) if len(scan) else 0,
            )
        )
    return out
