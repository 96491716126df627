"""A worker's cleaning process (``service._processes``): the same cleaning as in a thread, its
abort signal, a shared throttle, errors that keep their file and position, a death that fails
one cleaning only."""

from __future__ import annotations

import asyncio
import functools
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd.compaction import CleaningAbortedError, Throttler
from cleanerd.config import ConfigError, ConfigProblem
from cleanerd.format import Compression, CorruptRecordError
from cleanerd.format._codecs import DecompressedTooLargeError
from cleanerd.service._clean_job import CleanerSlot, run_clean
from cleanerd.service._processes import (
    CleaningJob,
    CleaningProcess,
    CleaningProcessDiedError,
    helper_threads,
)
from cleanerd.snapshot import SnapshotError
from cleanerd.storage import PartitionLog
from cleanerd.topics import InvalidTopicConfigError, LogConfig, TopicSettings
from cleanerd.workload import WorkloadError
from tests.support.cleaning import data_records
from tests.support.logs import tree_hash, two_partitions
from tests.support.polling import poll_until, until

NOW_MS = 1_700_000_000_000
SETTINGS = TopicSettings.from_kafka({"cleanup.policy": "compact"})


def _job(directory: Path) -> CleaningJob:
    return CleaningJob(directory, SETTINGS, 1 << 20, 0.9, NOW_MS)


def _records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    log = PartitionLog(directory, LogConfig())
    try:
        return [(r.offset, r.key, r.value) for r in data_records(log).values()]
    finally:
        log.close()


def _in_thread(directory: Path) -> None:
    run_clean(
        directory,
        SETTINGS,
        CleanerSlot(),
        map_bytes=1 << 20,
        load_factor=0.9,
        throttler=Throttler(None),
        now_ms=NOW_MS,
        abort_check=lambda: False,
    )


@pytest.mark.asyncio
async def test_a_process_cleans_as_a_thread_does_and_serves_one_cleaning_after_another(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    twin = tmp_path / "twin"
    shutil.copytree(logdir, twin)
    for name in ("t-0", "t-1"):
        _in_thread(twin / name)
    process = CleaningProcess(Throttler(None, shared=True), helpers=0)
    try:
        first = await process.clean(_job(logdir / "t-0"))
        pid = process.pid
        second = await process.clean(_job(logdir / "t-1"))
        assert pid is not None
        assert pid != os.getpid()
        assert process.pid == pid  # the same process, its map kept
    finally:
        assert await process.close(10.0)
    for result in (first, second):
        assert (result.stats.messages_read, result.stats.messages_written) == (21, 7)
    for name in ("t-0", "t-1"):
        assert _records(logdir / name) == _records(twin / name)
        assert len(_records(logdir / name)) < 40


@pytest.mark.asyncio
async def test_the_abort_signal_reaches_the_process_and_ends_its_throttle_sleep(
    tmp_path: Path,
) -> None:
    """A throttle of 1 byte/s puts the process to sleep on its first chunk (the shared state
    shows the parent its bytes); setting the abort event ends the sleep and the cleaning, with
    the log as it was and no ``.cleaned`` file."""
    logdir = two_partitions(tmp_path)
    before = tree_hash(logdir)
    throttler = Throttler(1.0, check_interval_s=0.0, shared=True)
    process = CleaningProcess(throttler, helpers=0)
    try:
        cleaning = process.clean(_job(logdir / "t-0"))
        job = asyncio.ensure_future(cleaning)
        await until(lambda: throttler.bytes_total > 0)
        assert not job.done()
        process.abort.set()
        with pytest.raises(CleaningAbortedError):
            await asyncio.wait_for(job, 30)
        assert throttler.slept_seconds < 30
    finally:
        assert await process.close(10.0)
    assert tree_hash(logdir) == before
    assert not list(logdir.rglob("*.cleaned"))


@pytest.mark.asyncio
async def test_a_process_killed_mid_cleaning_fails_that_cleaning_and_the_next_starts_afresh(
    tmp_path: Path,
) -> None:
    """The throttle holds the process on its first chunk for about 2 s (its pause, which the
    next process waits out too); it is killed meanwhile."""
    logdir = two_partitions(tmp_path)
    throttler = Throttler(2_500.0, check_interval_s=0.0, shared=True)
    process = CleaningProcess(throttler, helpers=0)
    try:
        job = asyncio.ensure_future(process.clean(_job(logdir / "t-0")))
        await until(lambda: throttler.bytes_total > 0)
        dead = process.pid
        assert dead is not None
        # SIGTERM and SIGINT are ignored: the daemon stops a cleaning by its abort signal
        assert {signal.SIGTERM, signal.SIGINT} <= _ignored_signals(dead)
        os.kill(dead, signal.SIGTERM)
        os.kill(dead, signal.SIGINT)
        assert not job.done()
        os.kill(dead, signal.SIGKILL)
        with pytest.raises(CleaningProcessDiedError, match=f"pid {dead}.*killed by SIGKILL"):
            await asyncio.wait_for(job, 30)
        result = await asyncio.wait_for(process.clean(_job(logdir / "t-0")), 60)
        assert process.pid not in (None, dead)
        assert result.stats.messages_written == 7
    finally:
        assert await process.close(10.0)
    assert not list(logdir.rglob("*.cleaned"))


@pytest.mark.asyncio
async def test_an_error_in_the_process_names_the_file_and_position_as_in_a_thread(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    segment = logdir / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[200] ^= 0xFF  # inside the third batch: its CRC no longer matches
    segment.write_bytes(bytes(data))
    twin = tmp_path / "twin"
    shutil.copytree(logdir, twin)
    with pytest.raises(CorruptRecordError) as in_thread:
        _in_thread(twin / "t-0")
    process = CleaningProcess(Throttler(None, shared=True), helpers=0)
    try:
        with pytest.raises(CorruptRecordError) as in_process:
            await process.clean(_job(logdir / "t-0"))
    finally:
        assert await process.close(10.0)
    theirs, ours = in_process.value, in_thread.value
    assert (theirs.position, theirs.last_good_offset) == (ours.position, ours.last_good_offset)
    assert theirs.path == str(segment)
    assert ours.path == str(twin / "t-0" / segment.name)
    assert str(theirs).replace(str(logdir), "") == str(ours).replace(str(twin), "")


@pytest.mark.parametrize(
    "error",
    [
        CorruptRecordError("bad crc", path="/x/0.log", position=61, last_good_offset=3),
        DecompressedTooLargeError(Compression.ZSTD, 2_000, 1_000),
        SnapshotError(Path("/x/1.checkpoint"), "truncated"),
        InvalidTopicConfigError("segment.bytes", -1, "must be positive"),
        WorkloadError("records", "must be positive"),
        ConfigError((ConfigProblem("log.cleaner.threads", "-1", "default", "must be >= 0"),)),
    ],
    ids=lambda e: type(e).__name__,
)
def test_cleanerds_errors_cross_a_pipe_whole(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_a_throttler_made_for_one_process_refuses_to_go_to_another() -> None:
    with pytest.raises(TypeError, match="shared=True"):
        pickle.dumps(Throttler(None))


@pytest.mark.parametrize(
    ("workers", "cores", "helpers"), [(1, 2, 1), (2, 2, 0), (2, 3, 0), (2, 4, 1), (1, 1, 0)]
)
def test_each_process_gets_a_helper_thread_when_its_share_of_the_cores_leaves_one(
    workers: int, cores: int, helpers: int
) -> None:
    assert helper_threads(workers, cores) == helpers


_ORPHAN_SCRIPT = """
import asyncio, sys
from pathlib import Path
from cleanerd.compaction import Throttler
from tests.service.test_processes import _job
from cleanerd.service._processes import CleaningProcess

async def main() -> None:
    throttler = Throttler(1.0, check_interval_s=0.0, shared=True)
    process = CleaningProcess(throttler, helpers=0)
    job = asyncio.ensure_future(process.clean(_job(Path(sys.argv[1]))))
    while not throttler.bytes_total:
        await asyncio.sleep(0.01)
    print(process.pid, flush=True)
    await job

if __name__ == "__main__":
    asyncio.run(main())
"""


def _ignored_signals(pid: int) -> set[int]:
    """The signals ``pid`` ignores (its ``SigIgn`` mask in /proc)."""
    line = next(
        x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:")
    )
    mask = int(line.split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # dead; its new parent has not reaped it yet


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_cleaning_process_dies_with_the_daemon_and_leaves_the_log_whole(
    tmp_path: Path,
) -> None:
    """SIGKILL to the daemon (here a script standing in for it) takes its cleaning process with
    it, mid-cleaning: no orphan goes on cleaning beside the next daemon."""
    logdir = two_partitions(tmp_path)
    before = tree_hash(logdir)
    script = tmp_path / "daemon.py"
    script.write_text(_ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    daemon = subprocess.Popen(
        [sys.executable, str(script), str(logdir / "t-0")], stdout=subprocess.PIPE, env=env
    )
    try:
        assert daemon.stdout is not None
        pid = int(daemon.stdout.readline())
        assert not _gone(pid)
        daemon.kill()
        daemon.wait()
        poll_until(lambda: _gone(pid), timeout=30)
    finally:
        daemon.kill()
    assert tree_hash(logdir) == before


@pytest.mark.asyncio
async def test_the_process_warms_up_before_its_first_cleaning_and_a_failed_warm_up_is_no_harm(
    tmp_path: Path,
) -> None:
    logdir = two_partitions(tmp_path)
    marker = tmp_path / "warmed"
    warmed = CleaningProcess(Throttler(None, shared=True), 0, functools.partial(marker.touch))
    failing = CleaningProcess(
        Throttler(None, shared=True), 0, functools.partial(os.remove, tmp_path / "absent")
    )
    try:
        await warmed.clean(_job(logdir / "t-0"))
        assert marker.is_file()
        result = await failing.clean(_job(logdir / "t-1"))
        assert result.stats.messages_written == 7
    finally:
        assert await warmed.close(10.0)
        assert await failing.close(10.0)
