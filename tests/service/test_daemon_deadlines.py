"""The daemon's loop under deadline scheduling: it sleeps until the next log falls due rather
than a full backoff, and no worker takes work before the kernels are loaded (a cleaning that
compiled them first would end seconds late)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cleanerd.format import Record
from cleanerd.service import (
    Daemon,
    _clean_job as clean_job,
    _daemon as daemon_module,
    _workers as workers,
)
from cleanerd.service._daemon import MIN_WAIT_S, wait_seconds
from cleanerd.storage import PartitionLog, wall_clock_ms
from cleanerd.topics import LogConfig
from tests.support.in_process import IN_THREADS, HeldKernelLoad, compacting_daemon
from tests.support.logs import two_partitions
from tests.support.polling import until


def test_the_loop_sleeps_until_the_next_due_instant_within_a_backoff() -> None:
    assert wait_seconds(15.0, 1_000, None) == 15.0  # nothing will fall due: a backoff
    assert wait_seconds(15.0, 1_000, 3_500) == 2.5
    assert wait_seconds(15.0, 1_000, 60_000) == 15.0
    assert wait_seconds(15.0, 1_000, 1_001) == MIN_WAIT_S  # many in a row: one survey each 0.1 s
    assert wait_seconds(0.05, 1_000, 1_001) == 0.05


def _segments(directory: Path) -> int:
    return len(list(directory.glob("*.log")))


def _deadline(daemon: Daemon) -> int | None:
    (status,) = daemon.manager.statuses()
    return status.deadline_ms


@pytest.mark.asyncio
async def test_the_loop_wakes_for_a_roll_well_within_its_backoff(tmp_path: Path) -> None:
    """A backoff of a minute, and an active segment whose deadline is 5 s away: the loop wakes
    for its roll (deadline minus the expected cleaning time), before the deadline."""
    lag_ms = 10_000
    logdir = tmp_path / "logs"
    directory = logdir / "t-0"
    log = PartitionLog.create(directory, LogConfig())
    first = wall_clock_ms() - lag_ms + 5_000
    log.append([Record(0, first, b"k", b"v")])
    log.close()
    daemon = compacting_daemon(
        logdir,
        {"log.cleaner.backoff.ms": "60000", "log.cleaner.max.compaction.lag.ms": str(lag_ms)},
    )
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.surveyed)
        (status,) = daemon.manager.statuses()
        assert status.deadline_ms == first + lag_ms
        lead = status.expected_clean_ms
        assert 0 < lead < 5_000
        await until(lambda: daemon.maintenance.rolled == 1, timeout=30)
        assert wall_clock_ms() >= first + lag_ms - lead
        assert _segments(directory) == 2
        # and cleaned once the workers run (how soon is the end-to-end test's to check; a cold
        # kernel cache takes a minute to compile): nothing dirty left
        await until(lambda: daemon.manager.totals.cleanings == 1, timeout=600)
        await until(lambda: _deadline(daemon) is None)
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_no_worker_takes_work_before_the_kernels_are_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldKernelLoad()
    monkeypatch.setattr(daemon_module, "load_kernels", held)
    cleaned: list[str] = []

    def recording(directory: Path, *args: Any, **kwargs: Any) -> Any:
        cleaned.append(directory.name)
        return clean_job.run_clean(directory, *args, **kwargs)

    monkeypatch.setattr(workers, "run_clean", recording)
    daemon = compacting_daemon(
        two_partitions(tmp_path), {"log.cleaner.backoff.ms": "20", **IN_THREADS}
    )
    run = asyncio.create_task(daemon.run())
    try:
        await until(held.started.is_set)
        cycles: set[float] = set()

        def cycled() -> bool:
            cycles.add(daemon.last_cycle)
            return len(cycles) >= 4

        await until(cycled)  # the manager loop ran meanwhile, with two dirty logs to give out
        assert cleaned == []
        status = daemon.status()
        assert (status.kernels, status.workers) == ("loading", ())
        assert status.to_json()["kernels"] == "loading"
        assert sum(p.cleanable for p in status.partitions) == 2
        held.release.set()
        # the stand-in loaded nothing: on a cold kernel cache the cleanings compile first
        await until(lambda: daemon.manager.totals.cleanings == 2, timeout=600)
        assert sorted(cleaned) == ["t-0", "t-1"]
        status = daemon.status()
        assert status.kernels == "loaded"
        assert len(status.workers) == 1
    finally:
        held.release.set()
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
