"""The daemon's Spark engine: which grabs go to Spark, and one Spark cleaning as a worker runs it.

With ``cleanerd.engine.spark.master`` set, a grab whose cleanable (dirty) bytes reach
``cleanerd.engine.spark.min.partition.bytes`` is compacted on Spark (``spark._daemon_job``: plan A
or B by ``cleanerd.engine.spark.task.budget.bytes``) instead of by the worker's local cleaner.
The worker keeps the manager's lease on the partition for the whole job, exactly as for a local
cleaning: the partition stays ``in_progress``, a success or failure is reported the same way
(a failure retried with backoff, then uncleanable), and a pause or shutdown cancels the job's
Spark job group. It leases no dedupe memory: the offset maps live in the executors.

The job itself runs in one of the cleaning threads (``service._threads``), like a local cleaning;
the worker's coroutine polls its progress every ``POLL_S`` for ``/status`` and asks the abort
check meanwhile, with the progress and cancel calls in the service threads (a poll must not wait
behind the cleanings it watches).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cleanerd.compaction import CleanerStats, CleaningAbortedError, CompactionSummary
from cleanerd.config import CleanerdConfig
from cleanerd.scheduling import Grab
from cleanerd.service._clean_job import JobResult, apply_retention
from cleanerd.service._threads import Blocking, ThreadPool, in_default_pool

if TYPE_CHECKING:
    from cleanerd.spark import SparkCleaner

POLL_S = 0.5
"""How often a worker running a Spark cleaning reads its progress and the abort check."""
CANCEL_GRACE_S = 3.0
"""After a cancel, how long the lease is kept: Spark kills a cancelled task's Python worker
(a plan A task runs the local engine there) only ``spark.python.task.killTimeout`` (2 s) after
interrupting it, and a resumed partition must not be cleaned by two processes at once."""
SPARK = "spark"


class SparkEngine:
    """The thresholds (reloadable) and the Spark side (``SparkCleaner``, built at start)."""

    def __init__(self, config: CleanerdConfig) -> None:
        from cleanerd.spark import SparkCleaner  # noqa: PLC0415 (only when configured)

        assert config.spark_master is not None
        self.cleaner: SparkCleaner = SparkCleaner(config.spark_master, config.spark_conf)
        self.configure(config)

    @classmethod
    def of(cls, config: CleanerdConfig) -> SparkEngine | None:
        """The engine when ``cleanerd.engine.spark.master`` is set (else None: all local)."""
        return None if config.spark_master is None else cls(config)

    def configure(self, config: CleanerdConfig) -> None:
        """The settings a SIGHUP may change (the master and conf need a restart)."""
        self.min_partition_bytes = config.spark_min_partition_bytes
        self.task_budget_bytes = config.spark_task_budget_bytes

    def takes(self, grab: Grab) -> bool:
        """The grab's dirty bytes reach ``min.partition.bytes``."""
        return grab.plan.cleanable_bytes >= self.min_partition_bytes

    async def clean(
        self,
        grab: Grab,
        now_ms: int,
        abort: Callable[[], bool],
        on_progress: Callable[[dict[str, Any]], None],
        *,
        job: ThreadPool,
        poll: Blocking = in_default_pool,
    ) -> JobResult:
        """Run the cleaning in ``job``'s threads; polls progress and ``abort`` (in ``poll``'s)
        until it ends. A cleaning cancelled because ``abort`` said so raises
        ``CleaningAbortedError``; a cancelled coroutine (shutdown) cancels the job group and
        waits for the thread before it lets go."""
        group = f"cleanerd-{grab.tp}-{uuid.uuid4().hex[:8]}"
        running = job.submit(self._run, grab, group, now_ms, abort)
        cancelled = False
        try:
            while not running.done():
                await asyncio.wait({running}, timeout=POLL_S)
                if not running.done() and abort():
                    # again at every poll: a cancel reaches only the jobs running at the time
                    cancelled = True
                    await poll(self.cleaner.cancel, group)
                progress = await poll(self.cleaner.progress, group)
                if progress is not None:
                    on_progress(dataclasses.asdict(progress))
        except asyncio.CancelledError:
            # shutdown: cancel until the thread ends (a job submitted after a cancel runs on)
            while not running.done():
                await poll(self.cleaner.cancel, group)
                await asyncio.wait({running}, timeout=POLL_S)
            with contextlib.suppress(Exception):
                running.result()
            raise
        try:
            return running.result()
        except Exception as e:
            if cancelled:
                await asyncio.sleep(CANCEL_GRACE_S)
                raise CleaningAbortedError(str(grab.tp)) from e
            raise

    def _run(self, grab: Grab, group: str, now_ms: int, abort: Callable[[], bool]) -> JobResult:
        """In a thread: the Spark job, then retention as a local cleaning does."""
        started = time.monotonic()
        outcome = self.cleaner.clean(
            group,
            grab.directory,
            grab.settings,
            now_ms=now_ms,
            task_budget_bytes=self.task_budget_bytes,
            abort=abort,
        )
        assert outcome.summary is not None
        deleted, bytes_deleted = apply_retention(grab.directory, grab.settings, now_ms)
        summary = outcome.summary
        return JobResult(
            stats=stats_of(summary, started, time.monotonic()),
            first_dirty_offset=grab.plan.first_dirty_offset,
            end_offset=summary.first_uncleanable_offset
            if summary.checkpoint is None
            else summary.checkpoint,
            seconds=time.monotonic() - started,
            segments_deleted=deleted,
            bytes_deleted=bytes_deleted,
            engine=SPARK,
            plan=str(outcome.plan),
            ledger_error=summary.ledger_error,
        )

    async def stop(self, timeout_s: float, run: Blocking = in_default_pool) -> None:
        """Stop the Spark session (if one was started, in ``run``), waiting at most
        ``timeout_s``."""
        if self.cleaner.started:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run(self.cleaner.stop), timeout_s)


def stats_of(summary: CompactionSummary, started: float, ended: float) -> CleanerStats:
    """A Spark cleaning's counters in a local cleaning's terms: records and bytes read and
    written are the log's before and after (the totals and ``/status`` add them up alike), and
    its time (``time.monotonic``) is all cleaning (no separate map build to time)."""
    return CleanerStats(
        start_time=started,
        map_complete_time=started,
        end_time=ended,
        bytes_read=summary.bytes_in,
        messages_read=summary.records_in,
        bytes_written=summary.bytes_out,
        messages_written=summary.records_out,
        invalid_messages_read=summary.unkeyed_records_removed,
        buffer_utilization=summary.buffer_utilization,
        tombstones_expired=summary.tombstones_expired or 0,
        tombstones_superseded=summary.tombstones_superseded or 0,
        markers_removed=summary.markers_removed,
        aborted_records_removed=summary.aborted_records_removed,
        anomalous_version_headers=summary.anomalous_version_headers,
        passes=summary.passes,
        txn_indexes_rebuilt=len(summary.txn_index_problems),
        txn_index_problems=tuple(summary.txn_index_problems),
    )
