"""The worker coroutines: each grabs the top-ranked log, leases map memory, and cleans it in
a process of its own (``service._processes``) or, with ``cleanerd.cleaner.processes`` off, in a
thread of the daemon's pool.

``log.cleaner.threads`` workers share one dedupe budget and one throttler. A worker's cleaning
cannot be cancelled, so pause and shutdown work through the cleaning's abort signal (one message
on its process's pipe, or a ``threading.Event`` made when a worker takes the log for a thread), set
from the event loop (``signal_aborts`` after a pause, ``stop``, or the worker's own cancellation)
and read by the cleaner before every chunk: the cleaning stops at the next batch boundary, leaves
no ``.cleaned`` file, and the worker gives the lease back. A cancelled worker coroutine still
waits for its cleaning before it lets go of the lease, then closes its process. Snapshot jobs and
Spark cleanings run in the pool's ``log.cleaner.threads`` threads (``service._threads``).

Supervision: a failure of one cleaning is the partition's (logged with its error and the file and
byte position it names, counted, retried with backoff, then uncleanable: ``scheduling._failures``),
and the worker goes on with the next log. A crash of the worker coroutine itself is the worker's:
it is logged with its error and the restart count, shown as dead, and the worker is restarted.
Both are caught inside the worker's task, which lives in the daemon's ``asyncio.TaskGroup``: a
task ending with an error would cancel its siblings, so only a bug in the supervision itself
reaches the group (the daemon logs it and stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from cleanerd.compaction import (
    CleaningAbortedError,
    Throttler,
    decompression_pool,
    decompression_threads,
)
from cleanerd.config import CleanerdConfig
from cleanerd.scheduling import CleanerManager, CleanOutcome, Grab, SnapshotGrab, locate
from cleanerd.service._budget import DedupeBudget
from cleanerd.service._clean_job import CleanerSlot, JobResult, run_clean
from cleanerd.service._logging import get_logger
from cleanerd.service._processes import (
    EXIT_TIMEOUT_S,
    CleaningJob,
    CleaningProcess,
    helper_threads,
)
from cleanerd.service._snapshot_job import run_snapshot
from cleanerd.service._spark_engine import SparkEngine
from cleanerd.service._status import WorkerStatus
from cleanerd.service._threads import Blocking, ThreadPool, in_default_pool
from cleanerd.storage import TopicPartition

log = get_logger("cleanerd.worker")

RESTART_DELAY_S = 1.0
"""Pause before a crashed worker coroutine is started again (a crash loop stays cheap)."""


@dataclasses.dataclass
class PoolSettings:
    """What workers read on every cleaning, so a SIGHUP applies from the next one."""

    threads: int
    load_factor: float
    backoff_s: float
    processes: bool  # each worker cleans in a process of its own (else in a thread)

    @classmethod
    def of(cls, config: CleanerdConfig) -> PoolSettings:
        """``log.cleaner.threads`` (none when the cleaner is disabled), load factor, backoff."""
        return cls(
            threads=config.threads if config.cleaner_enable else 0,
            load_factor=config.load_factor,
            backoff_s=config.backoff_ms / 1000,
            processes=config.cleaner_processes,
        )


CLEAN_THREAD_PREFIX = "cleanerd-clean"
"""Name prefix of the threads that run cleanings (``ps -L``, ``py-spy``, the tests)."""


class WorkerPool:
    """Starts, supervises, resizes and stops the worker coroutines, as tasks of ``group``."""

    def __init__(
        self,
        manager: CleanerManager,
        budget: DedupeBudget,
        throttler: Throttler,
        settings: PoolSettings,
        *,
        group: asyncio.TaskGroup,
        clock_ms: Callable[[], int],
        on_cleaned: Callable[[Grab, JobResult], None],
        spark: SparkEngine | None = None,
        service: Blocking = in_default_pool,
        warm_up: Callable[[], object] | None = None,
    ) -> None:
        """``service`` runs the short blocking calls of a Spark cleaning (progress, cancel);
        ``warm_up`` loads the kernels in each new cleaning process (picklable)."""
        self.warm_up = warm_up
        self.manager = manager
        self.group = group
        self.service = service
        self.threads = ThreadPool(CLEAN_THREAD_PREFIX, settings.threads)
        # shared by every worker's cleanings; made again when the worker count changes it
        self.decompression = decompression_pool(settings.threads)
        self._pool_for = settings.threads  # the worker count the pool was sized for
        self.spark = spark  # big partitions go to Spark (service._spark_engine)
        self.budget = budget
        self.throttler = throttler
        self.settings = settings
        self.clock_ms = clock_ms
        self.on_cleaned = on_cleaned
        self.stopping = False
        self.restarts = 0
        self.status: dict[int, WorkerStatus] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._aborts: dict[TopicPartition, _Abort] = {}  # the running cleanings
        self._processes: set[CleaningProcess] = set()  # the workers' cleaning processes
        self._work = asyncio.Event()
        self._warm = asyncio.Condition()  # a worker's process has warmed up, or stopping
        self.starved = asyncio.Event()  # a worker found nothing after cleanings ended: rescan
        self.cleanings_ended = 0
        self._ended_at_survey = 0

    # --- lifecycle ----------------------------------------------------------------------------
    def resize(self, threads: int) -> None:
        """Start workers up to ``threads`` and size the cleaning threads to match; workers above
        it retire after their current log (nothing starts once the pool is stopping)."""
        if self.stopping:
            return
        self.settings.threads = threads
        self.threads.resize(threads)
        if decompression_threads(threads) != decompression_threads(self._pool_for):
            # running cleanings keep the old pool until they end (it shuts down once unused:
            # ThreadPoolExecutor's threads exit when it is collected); the next ones take this
            self.decompression = decompression_pool(threads)
            self._pool_for = threads
        for wid in range(threads):
            task = self._tasks.get(wid)
            if task is None or task.done():
                self.status[wid] = WorkerStatus(wid)
                worker = self._supervise(wid)
                self._tasks[wid] = self.group.create_task(worker, name=f"worker-{wid}")
        self.wake()

    def survey_started(self) -> None:
        """The manager begins a survey: cleanings ended so far are in it."""
        self._ended_at_survey = self.cleanings_ended

    def wake(self) -> None:
        """New work may be there (a rescan, an admin request): idle workers try to grab."""
        self._work.set()
        self._work.clear()

    def signal_aborts(self) -> None:
        """Set the abort signal of each running cleaning the manager marked aborted (a pause:
        Kafka's ``abortAndPauseCleaning``); the cleaning stops at its next batch boundary."""
        for tp, abort in self._aborts.items():
            if self.manager.should_abort(tp):
                abort.set()

    @property
    def alive(self) -> bool:
        return all(w.alive for w in self.status.values())

    async def stop(self, timeout_s: float) -> bool:
        """Abort running cleanings, wait for the workers, then close the cleaning threads, all
        within ``timeout_s``; False when some did not finish."""
        deadline = time.monotonic() + timeout_s
        self.stopping = True
        async with self._warm:
            self._warm.notify_all()
        for abort in self._aborts.values():
            abort.set()
        for task in self._tasks.values():
            task.cancel()
        tasks = [t for t in self._tasks.values() if not t.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            if pending:
                for process in self._processes:  # out of time: the swap protocol makes it safe
                    process.kill()
                return False
        ended = await self.threads.close(deadline - time.monotonic())
        if ended and self.decompression is not None:  # no cleaning left to submit to it
            self.decompression.shutdown(wait=False)
        return ended

    # --- one worker ---------------------------------------------------------------------------
    async def _supervise(self, wid: int) -> None:
        while not self.stopping and wid < self.settings.threads:
            try:
                await self._loop(wid)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.restarts += 1
                log.exception(
                    "worker crashed; restarting it",
                    worker=wid,
                    error=_message(e),
                    restarts=self.restarts,
                )
                self._set(wid, alive=False, partition=None)
                await asyncio.sleep(RESTART_DELAY_S)
                self._set(wid, alive=True)
            else:
                break
        self.status.pop(wid, None)
        self._tasks.pop(wid, None)

    async def _loop(self, wid: int) -> None:
        slot = CleanerSlot(self.decompression)
        process: CleaningProcess | None = None
        try:
            while not self.stopping and wid < self.settings.threads:
                if self.settings.processes != (process is not None):  # started, or a reload
                    process = await self._swap_process(wid, process)
                elif process is not None and not process.running:  # it died: warm a new one
                    await process.start()
                    self._set(wid, pid=process.pid)
                await self._step(wid, slot, process)
        finally:
            if process is not None:
                await self._close_process(process)

    async def _swap_process(
        self, wid: int, process: CleaningProcess | None
    ) -> CleaningProcess | None:
        """A new cleaning process when processes are on, none when off (closing the old)."""
        if process is not None:
            self._set(wid, pid=None)
            await self._close_process(process)
            return None
        helpers = helper_threads(self.settings.threads)
        process = CleaningProcess(self.throttler, helpers, self.warm_up)
        self._processes.add(process)
        try:
            await process.start()  # warm before the worker takes a log
        except BaseException:  # it died, or the daemon stops meanwhile: none left behind
            await self._close_process(process)
            raise
        self._set(wid, pid=process.pid)
        async with self._warm:
            self._warm.notify_all()
        return process

    async def warmed(self) -> None:
        """Return once every worker's cleaning process has loaded its kernels (at once with
        cleanings in threads, or stopping)."""
        async with self._warm:
            await self._warm.wait_for(self._all_warm)

    def _all_warm(self) -> bool:
        threads, processes = self.settings.threads, self.settings.processes
        if self.stopping or not processes:
            return True
        return all(w in self.status and self.status[w].pid is not None for w in range(threads))

    async def _close_process(self, process: CleaningProcess) -> None:
        self._processes.discard(process)
        await process.close(EXIT_TIMEOUT_S)

    async def _step(self, wid: int, slot: CleanerSlot, process: CleaningProcess | None) -> None:
        """One turn of a worker: a snapshot job, a cleaning, or a wait for work."""
        # snapshots rank after due cleanings and before the others (scheduling._manager)
        snap = None if self.manager.due_waiting() else self.manager.grab_snapshot()
        if snap is not None:
            await self._snapshot(wid, snap)
            return
        grab = self.manager.grab()
        if grab is None:
            if self.cleanings_ended != self._ended_at_survey:
                # a log cleaned since the survey may still be dirty (a full map): replan it
                self.starved.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._work.wait(), self.settings.backoff_s)
            return
        slot.decompression = self.decompression  # the pool for the worker count now
        await self._clean(wid, slot, grab, process)

    async def _clean(
        self, wid: int, slot: CleanerSlot, grab: Grab, process: CleaningProcess | None
    ) -> None:
        tp = grab.tp
        spark = self.spark if self.spark is not None and self.spark.takes(grab) else None
        engine = "local" if spark is None else "spark"
        bound = log.bind(partition=str(tp), worker=wid, run_id=uuid.uuid4().hex[:12], engine=engine)
        self._set(
            wid,
            partition=str(tp),
            engine=engine,
            last_max_compaction_delay_ms=grab.max_compaction_delay_ms,
        )
        abort: _Abort
        if spark is None and process is not None:
            abort = process.abort
            abort.begin()
        else:
            abort = threading.Event()
        self._aborts[tp] = abort
        if self.stopping:
            abort.set()
        try:
            if spark is not None:
                if abort.is_set():
                    raise CleaningAbortedError(str(tp))
                result = await spark.clean(
                    grab,
                    self.clock_ms(),
                    abort=abort.is_set,
                    on_progress=lambda progress: self._set(wid, spark_job=progress),
                    job=self.threads,
                    poll=self.service,
                )
            else:
                result = await self._clean_locally(slot, process, grab, abort, bound)
        except CleaningAbortedError:
            self.manager.aborted(tp)
            bound.info("cleaning aborted", reason="stopping" if self.stopping else "paused")
        except asyncio.CancelledError:
            if spark is not None:  # a local cleaning said so already (_clean_locally)
                self.manager.aborted(tp)
                bound.info("cleaning aborted", reason="shutdown")
            raise
        except Exception as e:
            outcome = self.manager.failed(tp, _message(e), engine=engine)
            _log_failure(bound, "cleaning failed", e, grab, **outcome)
        else:
            self._done(wid, grab, result, bound)
        finally:
            self._aborts.pop(tp, None)
            self._set(wid, partition=None, engine=None, spark_job=None)
            if process is not None:  # a new one if it died
                self._set(wid, pid=process.pid)
            self.cleanings_ended += 1

    async def _clean_locally(
        self,
        slot: CleanerSlot,
        process: CleaningProcess | None,
        grab: Grab,
        abort: _Abort,
        bound: Any,
    ) -> JobResult:
        """Lease map memory and run ``run_clean`` in the worker's process or a cleaning
        thread; on shutdown, set the abort signal and wait for the cleaning."""
        tp, settings = grab.tp, self.settings
        async with self.budget.lease(grab.map_bytes) as granted:
            if abort.is_set():
                raise CleaningAbortedError(str(tp))
            job: asyncio.Future[JobResult]
            if process is not None:
                work = CleaningJob(
                    grab.directory, grab.settings, granted, settings.load_factor, self.clock_ms()
                )
                job = asyncio.ensure_future(process.clean(work))
            else:
                job = self.threads.submit(
                    run_clean,
                    grab.directory,
                    grab.settings,
                    slot,
                    map_bytes=granted,
                    load_factor=settings.load_factor,
                    throttler=self.throttler,
                    now_ms=self.clock_ms(),
                    abort_check=abort.is_set,
                )
            try:
                return await asyncio.shield(job)
            except asyncio.CancelledError:
                # shutdown: the thread stops at its next batch boundary
                abort.set()
                error = await _job_error(job)
                self.manager.aborted(tp)
                if error is None:
                    bound.info("cleaning aborted", reason="shutdown")
                else:
                    _log_failure(bound, "cleaning failed while aborted", error, grab)
                raise

    async def _snapshot(self, wid: int, grab: SnapshotGrab) -> None:
        """A snapshot job: lease map memory, run ``run_snapshot`` in a thread, count it."""
        bound = log.bind(partition=str(grab.tp), worker=wid, job="snapshot")
        self._set(wid, partition=str(grab.tp))
        try:
            async with self.budget.lease(grab.map_bytes) as granted:
                job = self.threads.submit(
                    run_snapshot, grab.directory, grab.settings, map_bytes=granted
                )
                try:
                    result = await asyncio.shield(job)
                except asyncio.CancelledError:
                    await _job_error(job)  # the thread ends on its own; a snapshot is bounded
                    raise
        except Exception as e:
            self.manager.snapshot_failed(grab.tp)
            _log_failure(bound, "snapshot failed", e, grab)
        else:
            taken = result.taken
            end = None if taken.sid is None or taken.path is None else taken.sid.end_offset
            self.manager.snapshot_taken(grab.tp, end, taken.bytes, result.seconds)
            for warning in result.warnings:
                bound.warning("snapshot: a snapshot could not be used", problem=warning)
            fields: dict[str, Any] = {"seconds": round(result.seconds, 6)}
            if taken.path is None:
                bound.info("no new snapshot", reason=taken.skipped, **fields)
            else:
                fields.update(path=str(taken.path), records=taken.records, bytes=taken.bytes)
                fields.update(deleted=[str(p) for p in result.deleted])
                if result.truncated is not None:
                    fields.update(
                        segments_truncated=result.truncated.segments_deleted,
                        log_start_offset=result.truncated.log_start_offset,
                    )
                bound.info("snapshot taken", end_offset=end, **fields)
        finally:
            self.manager.release(grab.tp)
            self._set(wid, partition=None)

    def _done(self, wid: int, grab: Grab, result: JobResult, bound: Any) -> None:
        stats = result.stats
        self.manager.done(grab.tp, CleanOutcome.from_job(result))
        self._set(
            wid,
            last_buffer_utilization=stats.buffer_utilization,
            last_bytes_read=stats.bytes_read,
            last_bytes_written=stats.bytes_written,
            last_clean_seconds=result.seconds,
        )
        self.on_cleaned(grab, result)
        if result.end_offset <= result.first_dirty_offset and not result.segments_deleted:
            # asked for (``ctl clean``) on a log with no dirty range: nothing was read or written
            bound.info(
                "nothing to clean",
                requested=grab.requested,
                first_dirty_offset=result.first_dirty_offset,
                end_offset=result.end_offset,
            )
        else:
            fields = stats.summary(grab.tp, result.first_dirty_offset, result.end_offset)
            if result.plan is None:
                fields["map_bytes"] = grab.map_bytes
            else:
                fields["plan"] = result.plan
            if result.segments_deleted:
                fields["retention_segments_deleted"] = result.segments_deleted
            bound.info("log cleaned", **fields)
        for problem in stats.txn_index_problems:
            bound.warning("transaction index rebuilt from the ABORT markers", problem=problem)
        if result.ledger_error is not None:
            bound.warning("cleaned, but no erasure ledger entry", error=result.ledger_error)
        if stats.invalid_messages_read:
            bound.warning("unkeyed records removed", count=stats.invalid_messages_read)
        if stats.anomalous_version_headers:
            bound.warning(
                "version headers of the wrong length (treated as missing)",
                count=stats.anomalous_version_headers,
                header=grab.settings.strategy.header_name,
            )

    def _set(self, wid: int, **changes: Any) -> None:
        current = self.status.get(wid, WorkerStatus(wid))
        self.status[wid] = dataclasses.replace(current, **changes)


class _Abort(Protocol):
    """A cleaning's abort signal: a ``threading.Event`` or a cleaning process's event."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


def _message(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _log_failure(
    bound: Any, event: str, error: BaseException, grab: Grab | SnapshotGrab, **fields: Any
) -> None:
    """One error line naming the partition's directory and the file and position at fault."""
    file, position = locate(error)
    bound.error(
        event,
        error=_message(error),
        directory=str(grab.directory),
        file=file,
        position=position,
        **fields,
    )


async def _job_error(job: asyncio.Future[Any]) -> Exception | None:
    """Wait for an aborted job's thread; its error, unless it only stopped as asked."""
    try:
        await job
    except (CleaningAbortedError, asyncio.CancelledError):
        return None
    except Exception as e:
        return e
    return None
