"""The daemon with its cleanings in processes (``cleanerd.cleaner.processes``, the default):
pause and stop reach a cleaning in its process, a process that will not stop is killed at the
shutdown timeout, and a process that dies fails one cleaning only."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
from pathlib import Path

import pytest
import structlog

from cleanerd.service import Daemon
from cleanerd.storage import TopicPartition
from tests.support.in_process import IN_THREADS, compacting_daemon
from tests.support.logs import tree_hash, two_partitions
from tests.support.polling import until

THROTTLED = {"log.cleaner.io.max.bytes.per.second": "1", "log.cleaner.backoff.ms": "50"}
"""One byte a second: a cleaning sleeps in its first chunk until aborted (the shared throttle
shows the daemon its bytes when it does)."""


class _ExitedError(Exception):
    """The daemon would have exited 1 here."""


def _cleaning_pids(daemon: Daemon) -> set[int]:
    """The workers' cleaning processes, as ``/status`` names them (once warm)."""
    return {w.pid for w in daemon.status().workers if w.pid is not None}


async def _throttled(daemon: Daemon) -> None:
    await until(lambda: daemon.throttler.bytes_total > 0 and bool(_cleaning_pids(daemon)))


@pytest.mark.asyncio
async def test_stop_aborts_a_cleaning_in_its_process_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    before = [tree_hash(logdir / name) for name in ("t-0", "t-1")]
    daemon = compacting_daemon(logdir, {**THROTTLED, "log.cleaner.threads": "2"})
    run = asyncio.create_task(daemon.run())
    await _throttled(daemon)
    await until(lambda: len(_cleaning_pids(daemon)) == 2)  # both warm: /status names each
    pids = _cleaning_pids(daemon)
    assert os.getpid() not in pids
    assert {p.pid for p in multiprocessing.active_children()} == pids
    body, _ = daemon.metrics.render()
    assert b"\ncleanerd_cleaning_processes 2.0\n" in body
    with structlog.testing.capture_logs() as logs:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
    assert any(e["event"] == "cleaning aborted" for e in logs)
    assert multiprocessing.active_children() == []
    # aborted in their first chunks: nothing swapped
    assert [tree_hash(logdir / name) for name in ("t-0", "t-1")] == before
    assert not list(logdir.rglob("*.cleaned"))


@pytest.mark.asyncio
async def test_a_pause_aborts_the_cleaning_in_its_process_and_the_worker_goes_on(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    daemon = compacting_daemon(logdir, THROTTLED)  # one worker
    run = asyncio.create_task(daemon.run())
    try:
        await _throttled(daemon)
        pool = daemon.pool
        assert pool is not None
        (running,) = pool._aborts
        pid = _cleaning_pids(daemon)
        with structlog.testing.capture_logs() as logs:
            await daemon.pause(running)
            await until(lambda: any(e["event"] == "cleaning aborted" for e in logs))
        (aborted,) = [e for e in logs if e["event"] == "cleaning aborted"]
        assert (aborted["partition"], aborted["reason"]) == (str(running), "paused")
        assert daemon.manager.totals.cleanings == 0
        # the worker kept its process for its next cleaning (the other partition)
        await until(lambda: bool(pool._aborts) and running not in pool._aborts)
        assert _cleaning_pids(daemon) == pid
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_a_process_that_will_not_stop_is_killed_at_the_shutdown_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped (SIGSTOP) process cannot see its abort signal: the daemon exits 1 at its
    timeout and kills it, rather than wait or leave it behind."""
    logdir = two_partitions(tmp_path)
    daemon = compacting_daemon(logdir, {**THROTTLED, "cleanerd.shutdown.timeout.ms": "1000"})

    exits: list[bool] = []

    def exit_now() -> None:  # the daemon's os._exit(1), which would end the test run too
        exits.append(True)
        raise _ExitedError

    monkeypatch.setattr(daemon, "_exit_now", exit_now)
    run = asyncio.create_task(daemon.run())
    await _throttled(daemon)
    (pid,) = _cleaning_pids(daemon)
    os.kill(pid, signal.SIGSTOP)
    daemon.request_stop("test")
    assert await asyncio.wait_for(run, 60) == 1
    assert exits == [True]
    await until(lambda: multiprocessing.active_children() == [])  # killed, and reaped
    assert not list(logdir.rglob("*.cleaned"))


@pytest.mark.asyncio
async def test_a_cleaning_process_killed_by_the_kernel_is_that_partitions_failure_only(
    tmp_path: Path,
) -> None:
    """SIGKILL (as the OOM killer sends) fails that cleaning, names the exit, and the retry in a
    new process cleans the partition; the other partition is cleaned all along."""
    logdir = two_partitions(tmp_path)
    daemon = compacting_daemon(
        logdir, {**THROTTLED, "cleanerd.retry.backoff.ms": "50", "cleanerd.retry.attempts": "3"}
    )
    run = asyncio.create_task(daemon.run())
    try:
        with structlog.testing.capture_logs() as logs:
            await _throttled(daemon)
            (pid,) = _cleaning_pids(daemon)
            daemon.throttler.set_rate(None)  # from the next check on: the retry runs freely
            os.kill(pid, signal.SIGKILL)
            await until(lambda: daemon.manager.totals.cleanings == 2, timeout=120)
        failed = [e for e in logs if e["event"] == "cleaning failed"]
        assert len(failed) == 1
        assert f"pid {pid}" in failed[0]["error"]
        assert "killed by SIGKILL" in failed[0]["error"]
        assert failed[0]["failures"] == 1
        assert pid not in _cleaning_pids(daemon)
        cleaned = {e["partition"] for e in logs if e["event"] == "log cleaned"}
        assert cleaned == {str(TopicPartition("t", 0)), str(TopicPartition("t", 1))}
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_a_reload_moves_the_cleanings_between_processes_and_threads(tmp_path: Path) -> None:
    logdir = two_partitions(tmp_path)
    settings = {"log.cleaner.backoff.ms": "50", "log.cleaner.threads": "2"}
    daemon = compacting_daemon(logdir, settings)
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.ready and daemon.manager.totals.cleanings == 2)
        assert len(_cleaning_pids(daemon)) == 2  # ready: every process warm
        in_threads = compacting_daemon(logdir, {**settings, **IN_THREADS}).loaded
        daemon._reload_config = lambda: in_threads
        daemon.reload()
        await until(lambda: multiprocessing.active_children() == [])
        await until(lambda: all(w.pid is None for w in daemon.status().workers))
        daemon._reload_config = lambda: compacting_daemon(logdir, settings).loaded
        daemon.reload()
        await until(lambda: len(multiprocessing.active_children()) == 2)
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
    assert multiprocessing.active_children() == []


@pytest.mark.asyncio
async def test_ready_once_every_workers_process_has_loaded_its_kernels(tmp_path: Path) -> None:
    """READY means full speed from the first cleaning: each process has loaded the kernels."""
    daemon = compacting_daemon(two_partitions(tmp_path), {"log.cleaner.threads": "3"})
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.ready)
        status = daemon.status()
        assert status.kernels == "loaded"
        assert len(status.workers) == 3
        assert all(w.pid is not None for w in status.workers)
        assert len(multiprocessing.active_children()) == 3
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_after_a_process_died_its_worker_warms_a_new_one_before_any_retry(
    tmp_path: Path,
) -> None:
    """One partition, whose retry is a minute away: the new process is there (and warm) long
    before it, so the retry's cleaning does not pay for a start-up."""
    logdir = two_partitions(tmp_path)
    shutil.rmtree(logdir / "t-1")  # no other log for the worker to take meanwhile
    daemon = compacting_daemon(logdir, {**THROTTLED, "cleanerd.retry.backoff.ms": "60000"})
    run = asyncio.create_task(daemon.run())
    try:
        await _throttled(daemon)
        (dead,) = _cleaning_pids(daemon)
        daemon.throttler.set_rate(None)
        os.kill(dead, signal.SIGKILL)
        await until(lambda: bool(_cleaning_pids(daemon) - {dead}))
        (new,) = _cleaning_pids(daemon)
        assert new in {p.pid for p in multiprocessing.active_children()}
        assert daemon.manager.totals.failures == 1
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
