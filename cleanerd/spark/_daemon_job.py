"""The daemon's side of Spark: its session, one partition's cleaning as a job group, progress.

``cleanerd run`` with ``cleanerd.engine.spark.master`` set hands partitions with enough dirty
bytes to Spark. A worker coroutine calls :meth:`SparkCleaner.clean` in a thread (everything here
is blocking); it is ``cleanerd spark compact`` of that one partition at the daemon's clock
(``choose``, then ``run_planned``: plan A or B by the task budget), so the files it leaves are
exactly the CLI's. Each cleaning runs under its own Spark job group, which the worker's
coroutine polls for progress (``statusTracker``) and cancels on pause or shutdown.

The session is built on first use (a JVM start takes seconds; a daemon that never meets a big
partition never starts one) and stopped with the daemon.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cleanerd.compaction import CleaningAbortedError
from cleanerd.spark._compact import Options, Outcome, PartitionJob, Plan, choose, run_planned
from cleanerd.topics import TopicSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME = "cleanerd-daemon"
DAEMON_CONF = {"spark.ui.showConsoleProgress": "false"}
"""The console progress bar would interleave with the daemon's JSON log lines on stderr."""


class SparkCleaningError(Exception):
    """A Spark cleaning failed; the partition is as plan A or B leaves a failed job."""


@dataclass(frozen=True)
class JobProgress:
    """Where one cleaning's Spark jobs are, summed over the stages they ran so far."""

    plan: str
    jobs: int = 0
    stages: int = 0
    tasks_total: int = 0
    tasks_done: int = 0
    tasks_running: int = 0
    tasks_failed: int = 0


class SparkCleaner:
    """The daemon's Spark session (built lazily, thread-safe) and its cleanings."""

    def __init__(self, master: str, conf: Mapping[str, str]) -> None:
        self.master = master
        self.conf = dict(conf)
        self._session: SparkSession | None = None
        self._lock = threading.Lock()
        self._plans: dict[str, Plan] = {}

    def session(self) -> SparkSession:
        """The session, started on the first call (the JVM, the master's executors)."""
        with self._lock:
            if self._session is None:
                from cleanerd.spark._session import build_session  # noqa: PLC0415 (a JVM start)

                try:
                    self._session = build_session(
                        self.master, {**DAEMON_CONF, **self.conf}, app_name=APP_NAME
                    )
                except Exception as e:  # the JVM's start: Java missing, a bad master URL, ...
                    raise SparkCleaningError(
                        f"cannot start the Spark session (cleanerd.engine.spark.master = "
                        f"{self.master!r}; the JVM's own error above on stderr): "
                        f"{type(e).__name__}: {e}"
                    ) from e
            return self._session

    @property
    def started(self) -> bool:
        return self._session is not None

    def clean(
        self,
        group: str,
        directory: Path,
        settings: TopicSettings,
        *,
        now_ms: int,
        task_budget_bytes: int,
        abort: Callable[[], bool],
    ) -> Outcome:
        """Compact the partition in ``directory`` at ``now_ms`` under job group ``group``.

        Raises :class:`SparkCleaningError` with plan A's or B's message when the partition
        failed; a cancelled group raises whatever Spark raised (the caller knows it cancelled),
        and ``abort`` true once the session is up raises ``CleaningAbortedError`` (a pause
        during the JVM's start).
        """
        spark = self.session()
        if abort():
            raise CleaningAbortedError(str(directory))
        sc = spark.sparkContext
        job = PartitionJob(directory, settings.log, settings.cleaner, settings.strategy)
        options = Options(now_ms=now_ms, task_budget_bytes=task_budget_bytes)
        plan, records = choose(job, options)  # its errors propagate, file and position named
        self._plans[group] = plan
        # job groups are per thread (pyspark's pinned threads): other workers' jobs are not ours
        sc.setJobGroup(group, f"cleanerd: compact {directory.name}", interruptOnCancel=True)
        try:
            [outcome] = run_planned(spark, [job], [Outcome(directory.name, plan, records)], options)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            self._plans.pop(group, None)
        if outcome.error is not None or outcome.summary is None:
            raise SparkCleaningError(f"plan {outcome.plan}: {outcome.error}")
        return outcome

    def progress(self, group: str) -> JobProgress | None:
        """The group's progress now; None before its first job or when no session runs."""
        plan = self._plans.get(group)
        if self._session is None or plan is None:
            return None
        tracker = self._session.sparkContext.statusTracker()
        jobs = [tracker.getJobInfo(i) for i in tracker.getJobIdsForGroup(group)]
        stage_ids = [s for j in jobs if j is not None for s in j.stageIds]
        stages = [s for s in map(tracker.getStageInfo, stage_ids) if s is not None]
        return JobProgress(
            plan=str(plan),
            jobs=len(jobs),
            stages=len(stages),
            tasks_total=sum(s.numTasks for s in stages),
            tasks_done=sum(s.numCompletedTasks for s in stages),
            tasks_running=sum(s.numActiveTasks for s in stages),
            tasks_failed=sum(s.numFailedTasks for s in stages),
        )

    def cancel(self, group: str) -> None:
        """Cancel the group's running jobs (their tasks are interrupted)."""
        if self._session is not None:
            self._session.sparkContext.cancelJobGroup(group)

    def stop(self) -> None:
        """Stop the session, if one was started (the daemon is shutting down)."""
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.stop()
