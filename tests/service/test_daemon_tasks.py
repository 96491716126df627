"""The running daemon in-process: one task group owns its tasks, cleanings run in their own
threads, a pause reaches the running cleaning through its abort signal, and nothing is left
running when ``run`` returns."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from cleanerd.compaction import CleaningAbortedError
from cleanerd.config import load_config
from cleanerd.scheduling import Survey
from cleanerd.service import (
    Daemon,
    _clean_job as clean_job,
    _snapshot_routes as snapshot_routes,
    _workers as workers,
)
from cleanerd.service._workers import CLEAN_THREAD_PREFIX
from tests.support.in_process import IN_THREADS
from tests.support.logs import two_partitions
from tests.support.polling import until


def _daemon(logdir: Path, **settings: str) -> Daemon:
    """A daemon whose cleanings run in its threads, where ``_Cleanings`` reaches them."""
    overrides = {
        "log.dirs": str(logdir),
        "cleanerd.http.listen": "127.0.0.1:0",
        "log.cleanup.policy": "compact",
        **IN_THREADS,
        **settings,
    }
    loaded = load_config(env={}, overrides=overrides)
    return Daemon(loaded, lambda: loaded)


def _daemon_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("cleanerd-")]


class _Cleanings:
    """Stands in for ``run_clean``: records where each call ran and its abort check; holds the
    thread until the check says stop (then raises as the engine does) or ``release`` is set."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.threads: list[str] = []
        self.dirs: list[str] = []
        self.checks: list[Callable[[], bool]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, directory: Path, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        self.dirs.append(directory.name)
        check = kwargs["abort_check"]
        self.checks.append(check)
        self.started.set()
        while not self.release.wait(0.005):
            if check():
                raise CleaningAbortedError(directory.name)
        return self.real(directory, *args, **kwargs)


@pytest.mark.asyncio
async def test_cleanings_run_on_the_pool_sized_by_log_cleaner_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cleanings = _Cleanings(clean_job.run_clean)
    cleanings.release.set()
    monkeypatch.setattr(workers, "run_clean", cleanings)
    daemon = _daemon(two_partitions(tmp_path), **{"log.cleaner.threads": "3"})
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.manager.totals.cleanings == 2)
        assert daemon.pool is not None
        assert daemon.pool.threads.max_workers == 3
        assert len(cleanings.threads) == 2
        assert all(name.startswith(CLEAN_THREAD_PREFIX + "_") for name in cleanings.threads)
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_a_pause_sets_the_running_cleanings_abort_signal_and_it_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cleanings = _Cleanings(clean_job.run_clean)
    monkeypatch.setattr(workers, "run_clean", cleanings)
    daemon = _daemon(two_partitions(tmp_path), **{"log.cleaner.threads": "1"})
    run = asyncio.create_task(daemon.run())
    try:
        with structlog.testing.capture_logs() as logs:
            await until(cleanings.started.is_set)
            (check,) = cleanings.checks
            signal = getattr(check, "__self__", None)
            assert isinstance(signal, threading.Event)  # the cleaning's own Event's is_set
            assert not signal.is_set()
            tp = next(s.tp for s in daemon.manager.statuses() if s.state.value == "in_progress")
            status = await daemon.pause(tp)
            assert status is not None
            assert status.state.value == "aborted"
            assert signal.is_set()  # set from the loop, at once
            await until(lambda: daemon.manager.status(tp).state.value == "paused")  # type: ignore[union-attr]
        aborted = [e for e in logs if e["event"] == "cleaning aborted"]
        assert [(e["partition"], e["reason"]) for e in aborted] == [(str(tp), "paused")]
        assert daemon.manager.totals.cleanings == 0
        assert daemon.manager.totals.failures == 0
    finally:
        cleanings.release.set()
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_shutdown_aborts_the_running_cleaning_and_leaves_no_task_or_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cleanings = _Cleanings(clean_job.run_clean)
    monkeypatch.setattr(workers, "run_clean", cleanings)
    daemon = _daemon(two_partitions(tmp_path), **{"log.cleaner.threads": "2"})
    run = asyncio.create_task(daemon.run())
    await until(cleanings.started.is_set)
    assert _daemon_threads()  # the cleaning's, and the survey's
    daemon.request_stop("test")
    assert await asyncio.wait_for(run, 60) == 0
    assert all(check() for check in cleanings.checks)  # each cleaning was told to stop
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert daemon.http is not None
    assert daemon.http.closed
    assert daemon.pool is not None
    assert daemon.pool.threads.closed
    assert daemon.service.closed
    for thread in _daemon_threads():  # idle after close: each ends as soon as it wakes
        thread.join(10)
        assert not thread.is_alive(), thread.name


@pytest.mark.asyncio
async def test_a_crashed_manager_loop_stops_the_daemon_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = _daemon(two_partitions(tmp_path))

    async def broken() -> None:
        raise RuntimeError("manager bug")

    monkeypatch.setattr(daemon, "_manager_loop", broken)
    with structlog.testing.capture_logs() as logs:
        code = await asyncio.wait_for(daemon.run(), 60)
    assert code == 1
    crashed = [e for e in logs if e["event"] == "manager loop crashed"]
    assert [e["error"] for e in crashed] == ["RuntimeError('manager bug')"]
    assert logs[-1]["event"] == "stopped"
    assert asyncio.all_tasks() == {asyncio.current_task()}


@pytest.mark.asyncio
async def test_a_failed_task_of_the_group_is_logged_and_the_daemon_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a worker's own supervision ends the group, which cancels and awaits the other
    tasks; the error is logged, not lost with its task."""

    async def broken(_self: workers.WorkerPool, _wid: int) -> None:
        raise RuntimeError("supervisor bug")

    monkeypatch.setattr(workers.WorkerPool, "_supervise", broken)
    daemon = _daemon(two_partitions(tmp_path))
    with structlog.testing.capture_logs() as logs:
        code = await asyncio.wait_for(daemon.run(), 60)
    assert code == 1
    failed = [e for e in logs if e["event"] == "a daemon task failed"]
    assert [e["error"] for e in failed] == ["RuntimeError('supervisor bug')"]
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert daemon.http is not None
    assert daemon.http.closed


@pytest.mark.asyncio
async def test_a_reload_to_more_threads_grows_the_cleaning_pool(tmp_path: Path) -> None:
    logdir = two_partitions(tmp_path)
    daemon = _daemon(logdir, **{"log.cleaner.threads": "1"})
    more = load_config(
        env={},
        overrides={
            "log.dirs": str(logdir),
            "cleanerd.http.listen": "127.0.0.1:0",
            "log.cleanup.policy": "compact",
            "log.cleaner.threads": "2",
        },
    )
    daemon._reload_config = lambda: more
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.ready)
        assert daemon.pool is not None
        assert daemon.pool.threads.max_workers == 1
        daemon.reload()
        assert daemon.pool.threads.max_workers == 2
        assert daemon.pool.settings.threads == 2
        await until(lambda: len(daemon.pool.status) == 2)  # type: ignore[union-attr]
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_a_pause_while_the_worker_waits_for_memory_takes_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paused while its worker waits for map memory: the abort signal is set already when the
    lease comes, so the cleaning never reaches a thread."""
    cleanings = _Cleanings(clean_job.run_clean)
    cleanings.release.set()
    monkeypatch.setattr(workers, "run_clean", cleanings)
    daemon = _daemon(two_partitions(tmp_path), **{"log.cleaner.threads": "1"})
    held = await daemon.budget.acquire(daemon.budget.total)  # nothing left to lend
    run = asyncio.create_task(daemon.run())
    try:
        with structlog.testing.capture_logs() as logs:
            await until(lambda: daemon.budget.waiting > 0)
            (tp,) = [s.tp for s in daemon.manager.statuses() if s.state.value == "in_progress"]
            await daemon.pause(tp)
            daemon.budget.release(held)
            await until(lambda: daemon.manager.status(tp).state.value == "paused")  # type: ignore[union-attr]
        assert tp.dir_name not in cleanings.dirs
        aborted = [e for e in logs if e["event"] == "cleaning aborted"]
        assert [(e["partition"], e["reason"]) for e in aborted] == [(str(tp), "paused")]
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_surveys_and_http_file_reads_run_on_the_service_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = _daemon(two_partitions(tmp_path))
    ran: list[tuple[str, str]] = []
    real_scan, real_listing = daemon.manager.scan, snapshot_routes._listing

    def scan() -> Survey:
        ran.append(("survey", threading.current_thread().name))
        return real_scan()

    def listing(directory: Path) -> list[dict[str, Any]]:
        ran.append(("listing", threading.current_thread().name))
        return real_listing(directory)

    daemon.manager.scan = scan  # type: ignore[method-assign]
    monkeypatch.setattr(snapshot_routes, "_listing", listing)
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.ready)
        assert daemon.http is not None
        url = f"http://127.0.0.1:{daemon.http.port}/partitions/t/0/snapshots"
        async with aiohttp.ClientSession() as client, client.get(url) as response:
            assert response.status == 200
            assert await response.json() == []
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
    assert {what for what, _ in ran} == {"survey", "listing"}
    assert all(thread.startswith("cleanerd-service_") for _, thread in ran), ran


@pytest.mark.asyncio
async def test_a_reload_that_changes_a_topics_settings_lifts_its_uncleanable_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cleanings that fail mark both partitions uncleanable (no retries); a SIGHUP reload that
    changes the topic's settings (its broker-level default here) clears the marks and the
    failure counts, and the partitions are tried again without a restart (KAFKA-19895). A
    reload that leaves the settings as they were keeps the marks: the manager's test."""
    tried: list[str] = []

    def failing(directory: Path, *args: Any, **kwargs: Any) -> Any:
        tried.append(directory.name)
        raise RuntimeError("boom")

    monkeypatch.setattr(workers, "run_clean", failing)
    logdir = two_partitions(tmp_path)
    base = {
        "log.dirs": str(logdir),
        "cleanerd.http.listen": "127.0.0.1:0",
        "log.cleanup.policy": "compact",
        "cleanerd.retry.attempts": "0",
        **IN_THREADS,
    }
    changed = load_config(env={}, overrides={**base, "log.cleaner.delete.retention.ms": "1000"})
    daemon = Daemon(load_config(env={}, overrides=base), lambda: changed)

    def marked() -> list[bool]:
        return [s.uncleanable for s in daemon.manager.statuses()]

    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: marked() == [True, True])
        assert sorted(tried) == ["t-0", "t-1"]
        with structlog.testing.capture_logs() as logs:
            daemon.reload()
            await until(lambda: len(tried) >= 4)  # tried again, and failed again
        cleared = [e["partition"] for e in logs if e["event"].startswith("topic settings")]
        assert sorted(cleared) == ["t-0", "t-1"]
        assert sorted(tried[2:4]) == ["t-0", "t-1"]
        await until(lambda: marked() == [True, True])
        assert [s.failures for s in daemon.manager.statuses()] == [1, 1]
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
