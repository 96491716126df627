"""Admin pauses outlive the daemon: a pause is recorded in its log dir before the request is
answered, a restarted daemon has the partition paused before its first grab (so it is never
cleaned, not even once), a resume is recorded too, and a damaged record stops the start."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cleanerd.scheduling import CleaningState, Grab
from cleanerd.service import Daemon, _clean_job as clean_job, _workers as workers
from cleanerd.storage import (
    PAUSES_FILE,
    LogDir,
    PauseFileError,
    TopicPartition,
    read_pauses,
    write_pauses,
)
from tests.support.in_process import IN_THREADS, compacting_daemon
from tests.support.logs import two_partitions
from tests.support.polling import until

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


async def _stop(daemon: Daemon, run: asyncio.Task[int]) -> None:
    daemon.request_stop("test")
    assert await asyncio.wait_for(run, 60) == 0


@pytest.mark.asyncio
async def test_a_pause_is_recorded_before_it_is_answered_and_a_resume_too(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    daemon = compacting_daemon(logdir, {"log.cleaner.threads": "0"})  # nothing cleans
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.surveyed)
        status = await daemon.pause(T0)
        assert status is not None
        assert status.state is CleaningState.PAUSED
        assert read_pauses(logdir) == {T0: 1}  # on disk when the call returns
        await daemon.pause(T0)
        assert read_pauses(logdir) == {T0: 2}
        await daemon.resume(T0)
        assert read_pauses(logdir) == {T0: 1}
        await daemon.resume(T0)
        assert not (logdir / PAUSES_FILE).exists()
        assert await daemon.pause(TopicPartition("nope", 0)) is None
        assert not (logdir / PAUSES_FILE).exists()
    finally:
        await _stop(daemon, run)


class _Grabs:
    """Wraps ``manager.grab``: each grab's result, and the paused partition's state at each."""

    def __init__(self, daemon: Daemon, watched: TopicPartition) -> None:
        self.real = daemon.manager.grab
        self.manager = daemon.manager
        self.watched = watched
        self.results: list[TopicPartition | None] = []
        self.watched_states: list[CleaningState | None] = []

    def __call__(self) -> Grab | None:
        status = self.manager.status(self.watched)
        self.watched_states.append(None if status is None else status.state)
        grab = self.real()
        self.results.append(None if grab is None else grab.tp)
        return grab


@pytest.mark.asyncio
async def test_after_a_restart_the_paused_partition_is_never_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir = two_partitions(tmp_path)
    first = compacting_daemon(logdir, {"log.cleaner.threads": "0"})
    run = asyncio.create_task(first.run())
    try:
        await until(lambda: first.surveyed)
        await first.pause(T0)
    finally:
        await _stop(first, run)

    cleaned: list[str] = []
    real_clean = clean_job.run_clean

    def recording_clean(directory: Path, *args: Any, **kwargs: Any) -> Any:
        cleaned.append(directory.name)
        return real_clean(directory, *args, **kwargs)

    monkeypatch.setattr(workers, "run_clean", recording_clean)
    second = compacting_daemon(logdir, {"log.cleaner.threads": "1", **IN_THREADS})
    grabs = _Grabs(second, T0)
    second.manager.grab = grabs  # type: ignore[method-assign]
    run = asyncio.create_task(second.run())
    try:
        await until(lambda: second.manager.totals.cleanings == 1)
        await second.clean(T0)  # asked to clean: a paused partition still is not
        # the worker has asked again since, and found nothing to clean
        await until(lambda: grabs.results[grabs.results.index(T1) + 1 :].count(None) >= 2)
        status = second.manager.status(T0)
        assert status is not None
        assert (status.state, status.paused_count) == (CleaningState.PAUSED, 1)
    finally:
        await _stop(second, run)
    assert cleaned == ["t-1"]
    assert T0 not in grabs.results
    assert set(grabs.watched_states) == {CleaningState.PAUSED}  # at every grab, the first too
    assert read_pauses(logdir) == {T0: 1}


@pytest.mark.asyncio
async def test_a_damaged_record_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    logdir = two_partitions(tmp_path)
    (logdir / PAUSES_FILE).write_text('{"version": 1, "paused": [{"topic": "t"}]}\n')
    daemon = compacting_daemon(logdir)
    with pytest.raises(PauseFileError, match=str(logdir / PAUSES_FILE)):
        await asyncio.wait_for(daemon.run(), 60)
    assert daemon.http is None
    assert not daemon.surveyed
    with LogDir(logdir).locked():  # released on the way out
        pass


@pytest.mark.asyncio
async def test_a_recorded_pause_of_a_partition_gone_is_dropped_from_the_record(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    write_pauses(logdir, {T1: 1, TopicPartition("gone", 4): 2})
    daemon = compacting_daemon(logdir, {"log.cleaner.threads": "0"})
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.surveyed)
        await until(lambda: read_pauses(logdir) == {T1: 1})
    finally:
        await _stop(daemon, run)
