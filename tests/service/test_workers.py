"""The worker pool asks for a rescan only when a worker runs out of work after cleanings ended
(not after each cleaning: a survey holds the GIL the other workers need)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from cleanerd.compaction import Throttler, decompression_threads
from cleanerd.scheduling import CleanerManager, Grab
from cleanerd.service import _clean_job as clean_job, _workers as workers
from cleanerd.service._budget import DedupeBudget
from cleanerd.service._workers import PoolSettings, WorkerPool
from cleanerd.storage import TopicPartition
from tests.support.polling import until
from tests.support.scheduling import BUDGET, NOW, OLD, RECENT, Clock, _log, _settings


class CountingEvent(asyncio.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def _pool(
    manager: CleanerManager,
    cleaned: list[TopicPartition],
    group: asyncio.TaskGroup,
    threads: int = 1,
) -> tuple[WorkerPool, CountingEvent]:
    settings = PoolSettings(
        threads=threads,
        load_factor=0.9,
        backoff_s=0.02,
        processes=False,  # in threads, where the tests' stand-ins for run_clean reach
    )
    pool = WorkerPool(
        manager,
        DedupeBudget(BUDGET),
        Throttler(None),
        settings,
        group=group,
        clock_ms=lambda: NOW,
        on_cleaned=lambda _grab, _result: None,
    )
    starved = CountingEvent()
    pool.starved = starved
    real_done = manager.done

    def done(tp: TopicPartition, outcome: object) -> None:
        cleaned.append(tp)
        real_done(tp, outcome)  # type: ignore[arg-type]

    manager.done = done  # type: ignore[method-assign,assignment]
    return pool, starved


def _empty_grabs(manager: CleanerManager) -> Callable[[], int]:
    """Counts the grabs that find nothing to clean (each then backs off, or asks for a rescan)."""
    real = manager.grab
    empty = 0

    def grab() -> Grab | None:
        nonlocal empty
        got = real()
        if got is None:
            empty += 1
        return got

    manager.grab = grab  # type: ignore[method-assign]
    return lambda: empty


@pytest.mark.asyncio
async def test_starved_after_the_work_runs_out_not_after_each_cleaning(tmp_path: Path) -> None:
    for topic in ("a", "b", "c"):
        _log(tmp_path, topic, [OLD, OLD, RECENT])
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    cleaned: list[TopicPartition] = []
    async with asyncio.TaskGroup() as group:
        pool, starved = _pool(manager, cleaned, group)
        empty_grabs = _empty_grabs(manager)
        pool.survey_started()
        manager.apply(manager.scan())
        pool.resize(1)
        try:
            await until(pool.starved.is_set)
            assert len(cleaned) == 3  # all three cleaned back to back, then one rescan request
            assert starved.sets == 1
            # the manager's next cycle: a survey, after which nothing is left to clean
            pool.starved.clear()
            pool.survey_started()
            manager.apply(manager.scan())
            pool.wake()
            since = empty_grabs()
            await until(lambda: empty_grabs() >= since + 3)  # a worker found nothing, thrice
            assert not pool.starved.is_set()
            assert starved.sets == 1
            assert pool.cleanings_ended == 3
        finally:
            assert await pool.stop(10.0)


@pytest.mark.asyncio
async def test_no_rescan_request_when_nothing_was_cleaned(tmp_path: Path) -> None:
    _log(tmp_path, "plain-only", [OLD, RECENT])  # delete-only topic: never cleaned
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    async with asyncio.TaskGroup() as group:
        pool, starved = _pool(manager, [], group)
        empty_grabs = _empty_grabs(manager)
        pool.survey_started()
        manager.apply(manager.scan())
        pool.resize(1)
        try:
            await until(lambda: empty_grabs() >= 3)  # a worker found nothing, thrice
            assert not pool.starved.is_set()
            assert starved.sets == 0
            assert pool.cleanings_ended == 0
        finally:
            assert await pool.stop(10.0)


@pytest.mark.asyncio
async def test_a_job_failing_while_shutdown_aborts_it_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _log(tmp_path, "a", [OLD, OLD, RECENT])
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    started = threading.Event()

    def failing_clean(
        directory: Path, *_: object, abort_check: Callable[[], bool], **__: object
    ) -> None:
        started.set()
        while not abort_check():
            time.sleep(0.01)
        raise OSError(5, "disk gone", str(directory / "00000000000000000000.log"))

    monkeypatch.setattr(workers, "run_clean", failing_clean)
    manager.apply(manager.scan())
    with structlog.testing.capture_logs() as logs:
        async with asyncio.TaskGroup() as group:
            pool, _ = _pool(manager, [], group)
            pool.resize(1)
            await until(started.is_set)
            assert await pool.stop(30.0)
    failed = [e for e in logs if e["event"] == "cleaning failed while aborted"]
    assert len(failed) == 1
    assert "disk gone" in failed[0]["error"]
    assert failed[0]["file"].endswith("00000000000000000000.log")
    assert not [e for e in logs if e["event"] == "cleaning aborted"]
    status = manager.status(TopicPartition("a", 0))
    assert status is not None
    assert status.state.value == "idle"


@pytest.mark.asyncio
async def test_a_bug_in_a_workers_supervision_reaches_the_task_group(tmp_path: Path) -> None:
    """Not lost with its task: the group that owns the worker raises it (the daemon logs it
    and stops), and cancels the other tasks on the way."""
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    sibling_cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            sibling_cancelled.set()
            raise

    async def broken(_wid: int) -> None:
        raise RuntimeError("supervisor bug")

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(sibling())
            pool, _ = _pool(manager, [], group)
            pool._supervise = broken  # type: ignore[method-assign, assignment]
            pool.resize(1)

    with pytest.raises(ExceptionGroup) as raised:
        await run()
    assert [repr(e) for e in raised.value.exceptions] == ["RuntimeError('supervisor bug')"]
    assert sibling_cancelled.is_set()


@pytest.mark.asyncio
async def test_a_failing_cleaning_is_logged_with_its_error_and_the_worker_carries_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for topic in ("a", "b"):
        _log(tmp_path, topic, [OLD, OLD, RECENT])
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    cleaned: list[TopicPartition] = []
    real_clean = clean_job.run_clean
    failed_dirs: list[Path] = []

    def clean_failing_once(directory: Path, *args: object, **kwargs: object) -> object:
        if not failed_dirs:
            failed_dirs.append(directory)
            raise OSError(5, "disk gone", str(directory / "00000000000000000000.log"))
        return real_clean(directory, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(workers, "run_clean", clean_failing_once)
    manager.apply(manager.scan())
    with structlog.testing.capture_logs() as logs:
        async with asyncio.TaskGroup() as group:
            pool, _ = _pool(manager, cleaned, group)
            pool.resize(1)
            try:
                await until(lambda: len(cleaned) == 1)
            finally:
                assert await pool.stop(30.0)
    failed = [e for e in logs if e["event"] == "cleaning failed"]
    assert len(failed) == 1
    assert failed[0]["error"].startswith("OSError: [Errno 5] disk gone")
    assert failed[0]["directory"] == str(failed_dirs[0])
    assert failed[0]["file"].endswith("00000000000000000000.log")
    failed_tp = TopicPartition(failed_dirs[0].name.removesuffix("-0"), 0)
    assert cleaned[0] != failed_tp  # the worker went on with the other log
    assert pool.restarts == 0  # the partition failed, not the worker
    status = manager.status(failed_tp)
    assert status is not None
    assert status.failures == 1


@pytest.mark.asyncio
async def test_a_crashed_worker_is_logged_with_its_error_and_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _log(tmp_path, "a", [OLD, OLD, RECENT])
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    cleaned: list[TopicPartition] = []
    monkeypatch.setattr(workers, "RESTART_DELAY_S", 0.01)
    real_grab = manager.grab
    crashes: list[int] = []

    def grab_crashing_once() -> object:
        if not crashes:
            crashes.append(1)
            raise RuntimeError("grab bug")
        return real_grab()

    manager.grab = grab_crashing_once  # type: ignore[method-assign,assignment]
    manager.apply(manager.scan())
    with structlog.testing.capture_logs() as logs:
        async with asyncio.TaskGroup() as group:  # a crash inside the task does not end it
            pool, _ = _pool(manager, cleaned, group)
            pool.resize(1)
            try:
                await until(lambda: cleaned == [TopicPartition("a", 0)])
            finally:
                assert await pool.stop(30.0)
    crashed = [e for e in logs if e["event"] == "worker crashed; restarting it"]
    assert [(e["worker"], e["error"], e["restarts"]) for e in crashed] == [
        (0, "RuntimeError: grab bug", 1)
    ]
    assert pool.restarts == 1


@pytest.mark.asyncio
async def test_a_requested_clean_with_nothing_dirty_says_so(tmp_path: Path) -> None:
    """``cleanerd ctl clean`` on a log already clean: the cleaning runs (it was asked for) and
    logs "nothing to clean" with its range, never a "log cleaned" of 0 bytes."""
    _log(tmp_path, "a", [OLD, OLD, RECENT])
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    cleaned: list[TopicPartition] = []
    tp = TopicPartition("a", 0)
    async with asyncio.TaskGroup() as group:
        pool, _ = _pool(manager, cleaned, group)
        pool.survey_started()
        manager.apply(manager.scan())
        pool.resize(1)
        try:
            await until(lambda: len(cleaned) == 1)  # the first cleaning cleans it all
            pool.survey_started()
            manager.apply(manager.scan())
            with structlog.testing.capture_logs() as logs:
                manager.request_clean(tp)
                pool.wake()
                await until(lambda: len(cleaned) == 2)
        finally:
            assert await pool.stop(10.0)
    events = [e for e in logs if e.get("partition") == str(tp)]
    assert [e["event"] for e in events] == ["nothing to clean"], events
    assert events[0]["requested"] is True
    assert events[0]["first_dirty_offset"] == events[0]["end_offset"]


def test_decompression_threads_leave_the_cores_to_the_cleanings() -> None:
    assert decompression_threads(1, cores=2) == 1  # the second core helps the one cleaning
    assert decompression_threads(2, cores=2) == 0  # both busy: a third thread only takes turns
    assert decompression_threads(2, cores=8) == 1
    assert decompression_threads(1, cores=1) == 0


@pytest.mark.asyncio
async def test_the_decompression_pool_follows_the_worker_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    for topic in ("a", "b", "c"):
        _log(tmp_path, topic, [OLD, OLD, RECENT])
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    cleaned: list[TopicPartition] = []
    async with asyncio.TaskGroup() as group:
        pool, _ = _pool(manager, cleaned, group)
        try:
            assert pool.decompression is not None  # one worker on two cores
            pool.resize(2)
            assert pool.decompression is None
            manager.apply(manager.scan())
            pool.wake()
            await until(lambda: len(cleaned) == 3)  # cleaned without a pool
            pool.resize(1)
            assert pool.decompression is not None
        finally:
            assert await pool.stop(10.0)
