"""Writes a seeded workload into a log dir through ``PartitionLog`` (the reference writer path).

Same spec and seed give byte-identical partitions: every random draw comes from a generator
seeded by (seed, partition), timestamps start at a fixed instant, and the log's clock is the
generator's own, never the wall clock. So the order in which partitions get their batches (one
after another, or round-robin in a paced stream) changes nothing in them.

A run may be a stream (a rate, a duration) and may write beside a running daemon under the
writer contract; ``generate`` says how.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cleanerd.format import kernels as k
from cleanerd.storage import (
    Holding,
    LogDir,
    LogDirHolder,
    LogDirLockedError,
    PartitionLog,
    TopicPartition,
    segment_log_stats,
)
from cleanerd.workload._pacing import Pacer, run_paced
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


def generate(
    logdir: Path,
    spec: WorkloadSpec,
    progress: Progress | None = None,
    *,
    rate: float | None = None,
    duration_s: float | None = None,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    wait: Callable[[float], object] | None = None,
) -> WorkloadResult:
    """Write the spec's partitions and describe what was written.

    Without ``rate`` and ``duration_s``, each partition gets ``spec.records`` in turn, as fast
    as it can. With either, batches go round-robin over the partitions at ``rate`` records/s
    (all partitions together; None: unpaced), for ``duration_s`` seconds when given (then
    ``spec.records`` is no limit), else until every partition has its ``spec.records``.
    Setting ``stop`` ends the run at the next batch boundary. Either way the run ends as a
    complete one does: open transactions closed (unless ``leave_open``), logs flushed.
    ``clock`` and ``wait`` (default ``stop.wait``) pace it; tests pass their own pair.

    The log dir's ``.lock`` is held for the run when it is free. When a cleanerd daemon holds
    it and welcomes writers (``LogDir.holder``), the run writes beside it under the writer
    contract: partition writer locks only, no swap recovery (the daemon's), and before every
    batch a check that no other kind of process took the dir meanwhile. Anything else holding
    the dir is refused before anything is written.
    """
    logdir = Path(logdir)
    check_target(logdir, spec)
    logdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    held, beside = _claim(LogDir(logdir))
    stop = stop or threading.Event()
    stream = rate is not None or duration_s is not None
    try:
        run = _Run(
            LogDir(logdir),
            spec,
            progress,
            beside,
            counted=duration_s is None,
            one_at_a_time=not stream,
        )
        with run:
            pacer = Pacer(rate, duration_s, clock=clock)
            ended = run_paced(run.step, pacer, stop, finished=run.finished, wait=wait)
            results = run.finish()
    finally:
        if held is not None:
            held.unlock()
    elapsed = time.perf_counter() - started
    return WorkloadResult(str(logdir), spec, results, elapsed, ended=ended, beside=beside)


_SETTLE_S = 0.5
"""How long a holder that looks exclusive is watched before it is believed: a daemon takes
``.lock`` a moment before its writers' lock (and lets go of it a moment after)."""


def _settled_holder(logdir: LogDir) -> LogDirHolder:
    """``logdir.holder()``, re-read for up to ``_SETTLE_S`` while it says exclusive."""
    deadline = time.monotonic() + _SETTLE_S
    while True:
        holder = logdir.holder()
        if holder.holding is not Holding.EXCLUSIVE or time.monotonic() >= deadline:
            return holder
        time.sleep(0.01)


def _refusal(logdir: LogDir, holder: LogDirHolder, doing: str) -> WorkloadError:
    return WorkloadError(
        "logdir",
        f"log dir {logdir.path} is locked by {holder.describe()} ({logdir.lock_file}), which "
        "does not let writers append beside it: a Kafka broker, `cleanerd compact` or another "
        f"`cleanerd gen` owns the dir, and gen {doing} while that process runs",
    )


def _claim(logdir: LogDir) -> tuple[LogDir | None, bool]:
    """(the LogDir whose ``.lock`` this run took, or None; whether it writes beside a daemon)."""
    for _ in range(3):  # a holder may come or go between a refused lock and the look at it
        try:
            logdir.lock()
        except LogDirLockedError:
            holder = _settled_holder(logdir)
            if holder.holding is Holding.WELCOMING:
                return None, True
            if holder.holding is Holding.EXCLUSIVE:
                raise _refusal(logdir, holder, "must not write") from None
        else:
            return logdir, False
    raise WorkloadError("logdir", f"log dir {logdir.path}: its .lock keeps changing hands")


class _Run:
    """The partitions being written: opened lazily one at a time (a plain run, as few files
    open as can be) or all up front and fed round-robin (a stream, every partition growing)."""

    def __init__(
        self,
        logdir: LogDir,
        spec: WorkloadSpec,
        progress: Progress | None,
        beside: bool,
        *,
        counted: bool,
        one_at_a_time: bool,
    ) -> None:
        self.logdir = logdir
        self.dirs = partition_dirs(logdir.path, spec)
        self.spec = spec
        self.progress = progress
        self.beside = beside
        self.counted = counted
        self.one_at_a_time = one_at_a_time
        self.open: list[_PartitionWriter] = []
        self.done: list[PartitionResult] = []
        self._to_open = 0  # one at a time: the next partition to open
        self._turn = 0  # round-robin: the index in ``open`` whose turn it is

    def __enter__(self) -> _Run:
        if not self.one_at_a_time:
            try:
                for p in range(len(self.dirs)):
                    self._open(p)
            except BaseException:
                self.__exit__()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Close what is still open without writing more (an error ended the run)."""
        for w in self.open:
            w.log.close()
        self.open = []

    def _open(self, p: int) -> _PartitionWriter:
        w = _PartitionWriter(self.dirs[p], p, self.spec, recover=not self.beside)
        self.open.append(w)
        return w

    def _current(self) -> _PartitionWriter | None:
        """The writer the next batch goes to (asking twice gives the same one); None when
        every partition has its records."""
        if self.one_at_a_time:
            while not self.open or self.open[0].remaining == 0:
                if self.open:
                    self.done.append(self.open.pop().finish())
                if self._to_open == len(self.dirs):
                    return None
                self._open(self._to_open)
                self._to_open += 1
            return self.open[0]
        for i in range(len(self.open)):
            turn = (self._turn + i) % len(self.open)
            w = self.open[turn]
            if not self.counted or w.remaining > 0:
                self._turn = turn
                return w
        return None

    def finished(self) -> bool:
        """Whether every partition has its records (never, when the run is not counted)."""
        return self._current() is None

    def step(self) -> int:
        """One batch to the next partition; the records written."""
        w = self._current()
        if w is None:
            raise RuntimeError("step after the run finished")
        if self.beside:
            holder = _settled_holder(self.logdir)
            if holder.holding is Holding.EXCLUSIVE:
                raise _refusal(self.logdir, holder, "stopped writing (every batch is whole)")
        n = w.step(self.counted)
        if not self.one_at_a_time:
            self._turn = (self._turn + 1) % len(self.open)
        if self.progress is not None:
            self.progress(w.result.partition, w.result.records)
        return n

    def finish(self) -> list[PartitionResult]:
        """End every partition still open as a complete run ends; results in partition order."""
        while self.open:
            self.done.append(self.open.pop().finish())
        return sorted(self.done, key=lambda r: r.partition)


class _PartitionWriter:
    """One partition being written: its log, record source, producers, tracker and counters."""

    def __init__(self, directory: Path, partition: int, spec: WorkloadSpec, *, recover: bool):
        self.started = time.perf_counter()
        self.spec = spec
        self.existing = has_data(directory)
        rng = np.random.default_rng([spec.seed, partition])
        self.rnd = random.Random(int(rng.integers(2**63)))
        clock = _Clock()
        self.log = PartitionLog.create(directory, spec.log_config(), clock=clock, recover=recover)
        self.result = PartitionResult(partition, directory.name, appended_to_existing=self.existing)
        try:
            with self.log.writer_lock:  # a daemon's swap must not change the files read here
                self.source = RecordSource(
                    spec, rng, _start_timestamp(self.log, spec, self.existing)
                )
                state = self.log.producer_state() if self.existing else None
            clock.source = self.source
            self.writers = make_producers(spec, state, self.rnd)
        except BaseException:
            self.log.close()
            raise
        self.tracker = SurvivorTracker()
        self.seen = np.zeros(spec.keys, dtype=np.bool_)
        self.remaining = spec.records

    def step(self, counted: bool) -> int:
        """Append one batch from a writer picked at random; the records it held."""
        writer = self.writers[self.rnd.randrange(len(self.writers))]
        begin_if_idle(writer, self.rnd)
        n = (
            min(self.spec.records_per_batch, self.remaining)
            if counted
            else self.spec.records_per_batch
        )
        self.batch(writer, n)
        if counted:
            self.remaining -= n
        return n

    def batch(self, writer: Producer, n: int) -> None:
        """Append ``n`` records from ``writer``; its last planned batch ends its transaction."""
        spec = self.source.spec
        result = self.result
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
                self.end_txn(writer)

    def end_txn(self, writer: Producer) -> None:
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
            self.result.commits += 1
        else:
            self.result.aborts += 1
            self.result.aborted_records += affected

    def finish(self) -> PartitionResult:
        """Close the transactions still open (unless ``leave_open``), describe, close the log."""
        result = self.result
        try:
            for writer in self.writers:
                if writer.in_txn and not self.spec.leave_open:
                    self.end_txn(writer)
            result.open_transactions = sum(1 for x in self.writers if x.in_txn)
            result.distinct_keys = int(self.seen.sum())
            with self.log.writer_lock:  # the files as they are now, not mid-swap
                result.first_offset = self.log.log_start_offset
                result.last_offset = self.log.log_end_offset - 1
                if self.existing:
                    result.expected = expected_survivors(self.log.read())
                else:
                    result.expected = self.tracker.survivors()
                result.segments = _segments(self.log)
        finally:
            self.log.close()
        result.elapsed_s = time.perf_counter() - self.started
        return result


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
