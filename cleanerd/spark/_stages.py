"""Plan B's Spark stages: scan, route, write, as one RDD job of numpy blobs.

1. scan: one task per source segment (``ScanJob.scan``): its keys, one row each, cut into
   ``buckets`` by key hash; a shuffle brings each bucket's rows together;
2. route: one task per bucket (``winners.route``): each dirty key's winner, for every group
   holding the key; a shuffle brings each group's winners together (partition = group);
3. write: one task per group (``WriteJob.write``, in ``plan_b``): its ``.cleaned`` segment and
   counters in the staging dir. The driver acts only after the job succeeded.

Between stages Spark moves a few large byte strings per task (the rows of numpy structured
arrays), never a row at a time: no Arrow or SQL rows, no JVM work per record. Memory stays
bounded per task (a segment's keys; a bucket's rows; a group's winners); nothing is collected
to the driver but each group's counters.

A task that fails raises ``StageError`` naming its stage, so the driver can say where the job
failed; ``StageClock`` (an accumulator) records each stage's first start and last end.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.accumulators import AccumulatorParam

from cleanerd.spark._winners import (
    ROWS,
    WINNERS,
    ScanJob,
    among,
    buckets,
    from_blobs,
    reduce_keys,
    route,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

STAGES = ("scan", "route", "write")
_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
DRAIN_TIMEOUT_S = 60.0  # how long a failed job's other tasks get to end before the driver goes on
_FAILED = re.compile(r"StageError: (scan|route|write) stage: (.*)")

Span = dict[str, tuple[float, float]]


class StageError(Exception):
    """A plan B task failed; the message starts with its stage."""


class StageClock(AccumulatorParam[Span]):
    """Per stage, the earliest task start and the latest task end (wall clock seconds)."""

    def zero(self, value: Span) -> Span:
        return {}

    def addInPlace(self, value1: Span, value2: Span) -> Span:  # noqa: N802 (pyspark's name)
        for stage, (start, end) in value2.items():
            was = value1.get(stage)
            value1[stage] = (start, end) if was is None else (min(was[0], start), max(was[1], end))
        return value1


def failed_stage(error: BaseException) -> tuple[str, str] | None:
    """``(stage, what went wrong)`` of a job that a ``StageError`` failed, else None."""
    found = _FAILED.search(str(error))
    return None if found is None else (found[1], found[2].strip())


def _fail(stage: str, e: Exception) -> StageError:
    return StageError(f"{stage} stage: {type(e).__name__}: {e}")


def _identity(key: int) -> int:
    return key


def _scan(
    job: ScanJob,
    sources: list[tuple[int, int]],
    tasks: list[list[int]],
    count: int,
    clock: Any,
    it: Iterable[int],
) -> Iterator[tuple[int, Any]]:
    """A scan task: its sources' keys, one row per key and group, cut into buckets."""
    t0 = time.time()
    wrong = 0
    try:
        for task in it:
            parts: list[Any] = []
            for n, i in enumerate(tasks[task]):
                index, group = sources[i]
                rows, found = job.scan(index, group)
                wrong += found
                parts.append(rows)
                following = tasks[task][n + 1] if n + 1 < len(tasks[task]) else None
                if following is None or sources[following][1] != group:
                    merged = parts[0] if len(parts) == 1 else np.concatenate(parts)
                    if len(parts) > 1:
                        merged = reduce_keys(merged, job.strategy.versioned)
                    parts = []
                    yield from buckets(merged, count)
    except Exception as e:
        raise _fail("scan", e) from e
    if wrong:
        yield 0, wrong
    clock.add({"scan": (t0, time.time())})


def scan_tasks(sizes: list[int], count: int) -> list[list[int]]:
    """The sources (by their bytes, in order) cut into at most ``count`` runs of about equal
    bytes: one scan task each."""
    count = max(min(count, len(sizes)), 1)
    total = max(sum(sizes), 1)
    tasks: list[list[int]] = [[] for _ in range(count)]
    done = 0
    for i, size in enumerate(sizes):
        task = min(done * count // total, count - 1)
        tasks[task].append(i)
        done += size
    return [t for t in tasks if t]


def _gather(it: Iterable[tuple[int, Any]]) -> tuple[list[bytes], int]:
    """A task's blobs, and the sum of the anomaly counts travelling with them."""
    blobs: list[bytes] = []
    wrong = 0
    for _, value in it:
        if isinstance(value, bytes):
            blobs.append(value)
        else:
            wrong += int(value)
    return blobs, wrong


def _route(versioned: bool, clock: Any, it: Iterable[tuple[int, Any]]) -> Iterator[Any]:
    t0 = time.time()
    try:
        blobs, wrong = _gather(it)
        yield from route(from_blobs(blobs, ROWS), versioned)
    except Exception as e:
        raise _fail("route", e) from e
    if wrong:
        yield 0, wrong
    clock.add({"route": (t0, time.time())})


def _write(
    job: Any, groups: int, given: bytes | None, clock: Any, group: int, it: Iterable[Any]
) -> Iterator[int]:
    """A write task: the group's winners (shuffled to it, or ``given`` to every group)."""
    t0 = time.time()
    try:
        blobs, wrong = _gather(it) if given is None else ([given], 0)
        if group >= groups:  # a pass without groups still has one (empty) partition
            yield wrong
            return
        won = from_blobs(blobs, WINNERS)
        if given is None and len(won) and bool((won["grp"] != group).any()):
            raise RuntimeError(f"winners of another group reached group {group}'s task")
        hashes = np.stack([won["h1"], won["h2"]], axis=1)
        job.write(group, hashes, won["offset"], won["version"], won["has"])
    except Exception as e:
        raise _fail("write", e) from e
    clock.add({"write": (t0, time.time())})
    yield wrong


def run_stages(
    sc: SparkContext,
    scan: ScanJob,
    write: Any,
    groups: int,
    bucket_count: int,
    tasks: list[list[int]],
) -> tuple[int, Span]:
    """Run the job: every group's segment staged; returns the scan's count of wrong-length
    version headers and the ``StageClock``'s spans. Raises what the job raised. ``tasks``:
    the sources (indexes into ``scan.segments.sources()``) each scan task reads."""
    sources = scan.segments.sources()
    clock = sc.accumulator({}, StageClock())
    versioned = scan.strategy.versioned
    job = (
        sc.parallelize(range(len(tasks)), max(len(tasks), 1))
        .mapPartitions(partial(_scan, scan, sources, tasks, bucket_count, clock))
        .partitionBy(bucket_count, _identity)
        .mapPartitions(partial(_route, versioned, clock))
        .partitionBy(max(groups, 1), _identity)
        .mapPartitionsWithIndex(partial(_write, write, groups, None, clock))
    )
    wrong = sum(job.collect())
    return wrong, dict(clock.value)


def _scan_keys(
    job: ScanJob, sources: list[tuple[int, int]], keys: bytes | None, it: Iterable[int]
) -> Iterator[tuple[bytes, int]]:
    """A scan task of the small path: the segment's rows of the dirty keys (``keys``, ``ROWS``
    bytes), or with ``keys`` None its rows of keys dirty there, and its anomaly count."""
    try:
        for i in it:
            index, group = sources[i]
            rows, wrong = job.scan(index, group)
            if keys is None:
                rows = rows[rows["dirty"]]
            else:
                rows = rows[among(rows, from_blobs([keys], ROWS))]
            yield rows.tobytes(), wrong
    except Exception as e:
        raise _fail("scan", e) from e


def _collect_rows(
    sc: SparkContext, scan: ScanJob, sources: list[tuple[int, int]], keys: bytes | None
) -> tuple[Any, int]:
    found = (
        sc.parallelize(range(len(sources)), max(len(sources), 1))
        .mapPartitions(partial(_scan_keys, scan, sources, keys))
        .collect()
    )
    return from_blobs([b for b, _ in found], ROWS), sum(w for _, w in found)


def run_small(
    sc: SparkContext, scan: ScanJob, write: Any, groups: int, limit: int
) -> tuple[int, Span] | None:
    """The job for a pass with at most ``limit`` dirty keys (a sweep has one): no shuffle.
    The segments holding dirty records give the dirty keys (a few rows each, collected); under
    ``timestamp``/``header`` every source then gives its rows of those keys (a few again);
    the driver picks the winners, and every write task gets them all (a group's filter looks
    up only its own keys). None (nothing run) when more keys turn out dirty than ``limit``."""
    sources = scan.segments.sources()
    bases = scan.segments.bases
    t0 = time.time()
    dirty = [(i, g) for i, g in sources if bases[i + 1] > scan.start]
    rows, wrong = _collect_rows(sc, scan, dirty, None)
    keys = reduce_keys(rows, scan.strategy.versioned)
    if len(keys) > limit:
        return None
    if scan.strategy.versioned and len(keys):
        more, _ = _collect_rows(sc, scan, sources, keys.tobytes())
        keys = reduce_keys(np.concatenate([keys, more]), True)
    won = np.zeros(len(keys), dtype=WINNERS)
    for name in ("h1", "h2", "offset", "version", "has"):
        won[name] = keys[name]
    t1 = time.time()
    clock = sc.accumulator({}, StageClock())
    given = partial(_write, write, groups, won.tobytes(), clock)
    sc.parallelize(range(max(groups, 1)), max(groups, 1)).mapPartitionsWithIndex(given).collect()
    return wrong, {"scan": (t0, t1), "route": (t1, t1), **dict(clock.value)}


@contextmanager
def one_job_group(sc: SparkContext) -> Iterator[None]:
    """Run the block's Spark jobs in a job group; if the block fails, cancel the group and
    wait until none of its tasks still runs.

    Spark fails a job at its first failed task without waiting for the others: a write task
    still running would go on staging files after the driver removed the job's staging dir.
    The caller's group is used when it set one (the daemon sets one per cleaning, to cancel it
    on pause or shutdown), else a group of this block's own. The wait polls the status tracker
    (its task counts change when the tasks' end events arrive) and gives up after
    ``DRAIN_TIMEOUT_S``.
    """
    group = sc.getLocalProperty("spark.jobGroup.id")
    own = group is None
    if group is None:
        group = f"cleanerd-{uuid.uuid4().hex}"
        sc.setJobGroup(group, "cleanerd plan B", interruptOnCancel=True)
    try:
        yield
    except BaseException:
        sc.cancelJobGroup(group)
        _drain(sc, group)
        raise
    finally:
        if own:
            for key in _GROUP_PROPERTIES:
                sc.setLocalProperty(key, None)  # type: ignore[arg-type] # None unsets it


def _drain(sc: SparkContext, group: str) -> None:
    tracker = sc.statusTracker()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        running = 0
        for job_id in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job_id)
            for stage_id in info.stageIds if info is not None else ():
                stage = tracker.getStageInfo(stage_id)
                running += stage.numActiveTasks if stage is not None else 0
        if running == 0:
            return
        time.sleep(0.05)  # the tracker has no wait; tasks end within Spark's kill timeout
