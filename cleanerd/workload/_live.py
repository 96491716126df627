"""A continuous writer of updates and deletes for the daemon's demo and end-to-end tests.

``cleanerd gen`` writes a fixed workload and stops; a daemon has to be shown (and tested) against
partitions that keep growing while it cleans them. :class:`LiveWriter` appends batches of keyed
records (a seeded share of them tombstones) to a few compacted partitions through
``PartitionLog.append``, so it takes the same writer lock a broker's appends would, and rolls
small segments often so there is always something inactive to clean.

It keeps the model a fully compacted log must match (offset strategy, no transactions): per
partition, key -> the latest (offset, value), ``None`` for a tombstone. Every value starts with
``<topic>-<partition>:<sequence>:`` so an older value of a key can never pass for the newest.

Run it in a separate process beside the daemon with ``python -m cleanerd.workload._live``; it
writes the model as JSON when it stops (``--duration`` elapsed, SIGTERM or SIGINT), which
``check.load_model`` reads back. The partitions are opened (created if missing) up front: opening
runs swap recovery, which must not race a clean, so start the writer before the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import numpy as np

from cleanerd.format import Record
from cleanerd.storage import PartitionLog, TopicPartition, wall_clock_ms
from cleanerd.topics import LogConfig
from cleanerd.workload._check import MODEL_VERSION, PartitionModel
from cleanerd.workload._pacing import Pacer, run_paced

DEFAULT_TOPICS = ("live-a", "live-b")
DEFAULT_SEGMENT_BYTES = 16 * 1024
"""Small, so segments roll every few dozen batches and the cleaner always has inactive ones."""


class LiveWriter:
    """Appends seeded updates and tombstones to compacted partitions; thread-safe.

    Batches go round-robin over the partitions (every partition keeps growing). Keys are drawn
    uniformly from ``keys`` names; each batch's records share one timestamp, ``clock()`` at
    append time. ``rate`` (records/s, ``None`` = as fast as it can) only paces :meth:`run`.
    """

    def __init__(
        self,
        log_dir: Path,
        topics: Sequence[str] = DEFAULT_TOPICS,
        *,
        partitions: int = 1,
        keys: int = 200,
        value_bytes: int = 64,
        tombstone_ratio: float = 0.1,
        batch_records: int = 20,
        rate: float | None = 1000.0,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        log_config: LogConfig | None = None,
        seed: int = 0,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if not topics or partitions < 1 or keys < 1 or batch_records < 1 or value_bytes < 0:
            raise ValueError("need topics, partitions >= 1, keys >= 1, batch_records >= 1")
        if not 0.0 <= tombstone_ratio <= 1.0:
            raise ValueError(f"tombstone_ratio must be in [0, 1], got {tombstone_ratio}")
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be > 0 records/s (or None), got {rate}")
        self.log_dir = Path(log_dir)
        self.keys = keys
        self.value_bytes = value_bytes
        self.tombstone_ratio = tombstone_ratio
        self.batch_records = batch_records
        self.rate = rate
        self.clock = clock
        self.config = log_config or LogConfig(segment_bytes=segment_bytes, compact=True)
        self.partitions = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._model: dict[TopicPartition, dict[bytes, tuple[int, bytes | None]]] = {
            tp: {} for tp in self.partitions
        }
        self._records = dict.fromkeys(self.partitions, 0)
        self._end_offsets = dict.fromkeys(self.partitions, 0)
        self._next = 0  # index of the partition the next batch goes to
        self._sequence = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.records_written = 0
        self.batches_written = 0
        self.tombstones_written = 0
        self.error: BaseException | None = None  # what stopped run(), if anything did
        for tp in self.partitions:  # up front: a daemon started next sees every partition
            self._log(tp)

    # --- writing ---------------------------------------------------------------------------
    def _log(self, tp: TopicPartition) -> PartitionLog:
        """The open partition; opening runs swap recovery, so it must not race a running clean."""
        log = self._logs.get(tp)
        if log is None:
            directory = self.log_dir / tp.dir_name
            log = PartitionLog.create(directory, self.config, clock=self.clock)
            self._logs[tp] = log
        return log

    def _batch(self, tp: TopicPartition) -> None:
        n = self.batch_records
        key_ids = self._rng.integers(0, self.keys, size=n)
        deletes = self._rng.random(n) < self.tombstone_ratio
        pad = self._rng.integers(97, 123, size=self.value_bytes, dtype=np.uint8).tobytes()
        now = self.clock()
        keys = [b"key-%06d" % key_id for key_id in key_ids.tolist()]
        values: list[bytes | None] = []
        for delete in deletes.tolist():
            self._sequence += 1
            prefix = f"{tp.dir_name}:{self._sequence}:".encode()
            values.append(None if delete else (prefix + pad)[: self.value_bytes])
        records = [Record(0, now, key, value) for key, value in zip(keys, values, strict=True)]
        info = self._log(tp).append(records)
        model = self._model[tp]
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            model[key] = (info.first_offset + i, value)
        tombstones = int(deletes.sum())
        self._records[tp] += n
        self._end_offsets[tp] = info.last_offset + 1
        self.records_written += n
        self.batches_written += 1
        self.tombstones_written += tombstones

    def step(self, n_batches: int = 1) -> None:
        """Append ``n_batches`` batches now (round-robin over the partitions), unpaced."""
        for _ in range(n_batches):
            with self._lock:
                tp = self.partitions[self._next]
                self._next = (self._next + 1) % len(self.partitions)
                self._batch(tp)

    def run(self, stop: threading.Event, *, duration_s: float | None = None) -> None:
        """Append at ``rate`` until ``stop`` is set or ``duration_s`` has passed (paced by
        ``run_paced``). An append error ends the loop and is kept in ``error``. The duration
        counts only after one batch went to every partition, so even a short run on a slow
        start (numba loading its kernels) writes to all of them.
        """

        def one_batch() -> int:
            try:
                self.step(1)
            except Exception as e:
                self.error = e
            return self.batch_records

        run_paced(
            one_batch,
            Pacer(self.rate, duration_s),
            stop,
            finished=lambda: self.error is not None,
            ready_to_end=lambda: self.batches_written >= len(self.partitions),
        )

    def start(self, *, duration_s: float | None = None) -> threading.Thread:
        """Run :meth:`run` in a daemon thread; :meth:`stop` ends it."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the live writer is already running")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run,
            args=(self._stop,),
            kwargs={"duration_s": duration_s},
            name="cleanerd-live-writer",
            daemon=True,
        )
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread :meth:`start` began and wait for it (its last batch completes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        """Stop writing and close the partitions (flushing their active segments)."""
        self.stop()
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()

    def __enter__(self) -> LiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the model -------------------------------------------------------------------------
    def expected(self, tp: TopicPartition) -> dict[bytes, bytes]:
        """Live keys of ``tp`` -> their latest value (tombstoned keys left out)."""
        with self._lock:
            return {k: v for k, (_, v) in self._model[tp].items() if v is not None}

    def tombstoned(self, tp: TopicPartition) -> frozenset[bytes]:
        """Keys of ``tp`` whose latest write is a tombstone."""
        with self._lock:
            return frozenset(k for k, (_, v) in self._model[tp].items() if v is None)

    def model(self, tp: TopicPartition) -> PartitionModel:
        """A consistent copy of ``tp``'s model: every batch appended so far, none half-way."""
        with self._lock:
            rows = self._model[tp]
            return PartitionModel(
                expected={k: v for k, (_, v) in rows.items() if v is not None},
                tombstoned=frozenset(k for k, (_, v) in rows.items() if v is None),
                offsets={k: o for k, (o, _) in rows.items()},
                records=self._records[tp],
                log_end_offset=self._end_offsets[tp],
            )

    def to_json(self) -> dict[str, object]:
        """The whole model: ``{"partitions": {"<topic>-<partition>": {...}}, ...}``."""
        return {
            "version": MODEL_VERSION,
            "log_dir": str(self.log_dir),
            "records": self.records_written,
            "batches": self.batches_written,
            "tombstones": self.tombstones_written,
            "partitions": {tp.dir_name: self.model(tp).to_json() for tp in self.partitions},
        }

    def write_model(self, path: Path) -> None:
        """Write :meth:`to_json` atomically: a reader polling for the file sees it whole."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        os.replace(tmp, path)


# --- command line ------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cleanerd.workload._live",
        description="Append updates and deletes to compacted partitions until stopped.",
    )
    p.add_argument("log_dir", type=Path)
    p.add_argument("--topics", default=",".join(DEFAULT_TOPICS), help="comma-separated names")
    p.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    p.add_argument("--rate", type=float, default=1000.0, help="records/s; 0 = unpaced")
    p.add_argument("--duration", type=float, default=None, help="seconds (default: until SIGTERM)")
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--value-bytes", type=int, default=64)
    p.add_argument("--tombstone-ratio", type=float, default=0.1)
    p.add_argument("--batch-records", type=int, default=20)
    p.add_argument("--segment-bytes", type=int, default=DEFAULT_SEGMENT_BYTES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--expected-out", type=Path, default=None, help="write the model here (JSON)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Write until ``--duration`` passes or SIGTERM/SIGINT; then the model, then a summary."""
    args = _parser().parse_args(argv)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    args.log_dir.mkdir(parents=True, exist_ok=True)
    writer = LiveWriter(
        args.log_dir,
        topics,
        partitions=args.partitions,
        keys=args.keys,
        value_bytes=args.value_bytes,
        tombstone_ratio=args.tombstone_ratio,
        batch_records=args.batch_records,
        rate=args.rate or None,
        segment_bytes=args.segment_bytes,
        seed=args.seed,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        writer.run(stop, duration_s=args.duration)
    finally:
        writer.close()
    if args.expected_out is not None:
        writer.write_model(args.expected_out)
    summary = {k: v for k, v in writer.to_json().items() if k != "partitions"}
    print(json.dumps({**summary, "error": None if writer.error is None else str(writer.error)}))
    if writer.error is not None:
        print(f"live writer stopped: {writer.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
