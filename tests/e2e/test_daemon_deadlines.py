"""The daemon's promise (docs/daemon.md, "Deadline scheduling"): a record a writer supersedes
under the writer contract is gone from the ``.log`` files within ``max.compaction.lag.ms``.

A real daemon (a process) and a writer beside it (a thread here, appending through the storage
API with wall-clock timestamps) on three partitions; the backoff is a quarter of the lag, as in
the measurement that motivated deadline scheduling (its p99 went past the lag). The files are
read every few hundred milliseconds, while the writer writes and for a lag after it stops, and
every superseded record found must not have outlived its supersession by more than the lag.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cleanerd.storage import TopicPartition
from cleanerd.topics import LogConfig
from cleanerd.workload import LiveWriter
from tests.support.e2e_support import DaemonProcess, write_config
from tests.support.removal import Outlived, read_superseded

LAG_MS = 4_000
WRITE_S = 10.0
READ_EVERY_S = 0.25


@pytest.mark.slow
def test_superseded_records_are_gone_from_the_files_within_the_lag(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    # segments of 128 KiB: a partition's writer rolls one every few seconds by size, so both
    # the writer's rolls and the daemon's deadline rolls happen
    config = LogConfig(segment_bytes=128 << 10, compact=True, max_compaction_lag_ms=LAG_MS)
    writer = LiveWriter(
        logdir, ("orders",), partitions=3, keys=300, rate=2_000, log_config=config, seed=11
    )
    settings = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 1_000,
            "log.cleaner.threads": 2,
            "log.cleaner.max.compaction.lag.ms": LAG_MS,
        },
    )
    outlived = {tp: Outlived() for tp in writer.partitions}
    records: dict[TopicPartition, int] = {}
    try:
        with DaemonProcess(settings, tmp_path) as daemon:  # ready: kernels loaded
            writer.start(duration_s=WRITE_S)
            stop_reading = time.monotonic() + WRITE_S + (LAG_MS + 1_500) / 1000
            while time.monotonic() < stop_reading:
                for tp in writer.partitions:
                    records[tp] = read_superseded(logdir / tp.dir_name, outlived[tp])
                time.sleep(READ_EVERY_S)  # a sampling interval, not a wait for something
            assert writer.error is None
            status = daemon.status()
    finally:
        writer.close()
    assert status["totals"]["failures"] == 0
    assert status["totals"]["cleanings"] >= 3 * (WRITE_S * 1000 // LAG_MS)
    for tp, seen in outlived.items():
        # not a vacuous pass: many superseded records were read before their removal...
        assert len(seen.seen) > 1_000, (tp, len(seen.seen))
        # ...each one within the lag (the worst, with its offsets, if not)
        assert seen.worst_ms <= LAG_MS, (tp, seen.worst_ms, seen.worst_at)
        # and at the end (a lag and more after the last write) none is left: one per key
        assert records[tp] <= 300, (tp, records[tp])
