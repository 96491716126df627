"""One look at every partition of the log dirs: metadata, settings and a cleaning plan each.

``take_survey`` is the manager's heavy half: it runs in a thread (``asyncio.to_thread``), reads
files through the metadata cache and touches no partition status; the manager applies the
resulting ``Survey`` on the event loop. A partition whose metadata the cache kept (its files
unchanged), under the same topic settings, keeps its last entry when its plan cannot change
with time (Kafka's default lags: no ``min.compaction.lag.ms``, no ``max.compaction.lag.ms``; no
snapshots, whose files the entry reads): nothing planned again, no new objects. A bad partition
or topic config becomes an error in its entry, never an exception, so one bad partition cannot
stop the others.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cleanerd.compaction import CleaningPlan, plan
from cleanerd.format import LONG_MAX
from cleanerd.scheduling._metadata import MetadataCache, PartitionMeta
from cleanerd.scheduling._snapshots import latest_snapshot_end
from cleanerd.storage import TopicPartition, parse_partition_dir_name
from cleanerd.topics import TopicSettings

Resolve = Callable[[str], TopicSettings]


@dataclass(frozen=True, slots=True)
class PartitionSurvey:
    """One partition at survey time; ``plan`` only for compacted topics that could be read."""

    tp: TopicPartition
    log_dir: Path
    directory: Path
    meta: PartitionMeta
    settings: TopicSettings | None  # None: the topic's config did not resolve (config_error)
    plan: CleaningPlan | None = None
    dirty_records: int = 0  # records in the dirty segments (sizes the offset map)
    config_error: str | None = None
    snapshot_end: int | None = None  # newest snapshot's end offset (topics with snapshots on)

    @property
    def compacted(self) -> bool:
        return self.settings is not None and self.settings.cleaner.compact

    @property
    def read_error(self) -> str | None:
        """The partition's files could not be read (corrupt segment, unreadable checkpoint)."""
        return self.meta.error

    @property
    def fingerprint(self) -> int:
        return self.meta.fingerprint


@dataclass(frozen=True, slots=True)
class Survey:
    """Every partition found, by topic partition, as of ``now_ms``."""

    now_ms: int
    epoch: int  # the manager's release counter when the survey began (tells stale entries)
    partitions: Mapping[TopicPartition, PartitionSurvey]
    errors: tuple[str, ...] = ()  # log-dir level problems
    unlisted_log_dirs: frozenset[Path] = frozenset()  # could not be listed: keep their partitions
    seconds: float = 0.0


_Named = dict[str, tuple[TopicPartition, Path] | None]


def _partition_dirs(log_dir: Path, named: dict[Path, _Named]) -> list[tuple[TopicPartition, Path]]:
    """The partition dirs of ``log_dir``; ``named`` keeps each entry's parse and ``Path``
    between surveys (a ``Path`` costs more to make than the stat that follows), for the entries
    the listing found."""
    before = named.get(log_dir, {})
    now: _Named = {}
    found = []
    with os.scandir(log_dir) as entries:
        for entry in entries:
            key = entry.name
            if key in before:
                one = now[key] = before[key]
            else:
                tp = parse_partition_dir_name(key)
                one = now[key] = None if tp is None else (tp, Path(entry.path))
            if one is not None and entry.is_dir():
                found.append(one)
    named[log_dir] = now
    return sorted(found)


class _Settings:
    """``resolve`` once per topic per survey; an error is remembered as text."""

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve
        self._found: dict[str, TopicSettings | str] = {}

    def __call__(self, topic: str) -> TopicSettings | str:
        if topic not in self._found:
            try:
                self._found[topic] = self._resolve(topic)
            except Exception as e:  # a bad topic config is that topic's problem alone
                self._found[topic] = f"topic config: {e}"
        return self._found[topic]


def _time_free(settings: TopicSettings) -> bool:
    """Whether a plan under ``settings`` is the same at any time for the same files: no
    minimum lag (segments held back by age) and no maximum lag (overdue bytes, delays), and no
    snapshot files to look at."""
    cleaner = settings.cleaner
    return (
        cleaner.min_compaction_lag_ms <= 0
        and cleaner.max_compaction_lag_ms >= LONG_MAX
        and not settings.snapshot.enable
    )


def _survey_one(
    tp: TopicPartition,
    log_dir: Path,
    directory: Path,
    found: TopicSettings | str,
    meta: PartitionMeta,
    now_ms: int,
) -> PartitionSurvey:
    if isinstance(found, str):
        return PartitionSurvey(tp, log_dir, directory, meta, None, config_error=found)
    if meta.log is None or not found.cleaner.compact:
        return PartitionSurvey(tp, log_dir, directory, meta, found)
    # read here, in the survey's thread: the manager decides on the event loop, which reads no files
    snap_end = latest_snapshot_end(directory) if found.snapshot.enable else None
    try:
        p = plan(meta.log, found.cleaner, now_ms)
    except ValueError as e:
        bad = PartitionMeta(tp, directory, meta.size_bytes, meta.fingerprint, error=f"plan: {e}")
        return PartitionSurvey(tp, log_dir, directory, bad, found, snapshot_end=snap_end)
    records = meta.records_between(p.first_dirty_offset, p.first_uncleanable_offset)
    return PartitionSurvey(tp, log_dir, directory, meta, found, p, records, snapshot_end=snap_end)


def take_survey(
    log_dirs: Sequence[Path],
    resolve: Resolve,
    cache: MetadataCache,
    now_ms: int,
    epoch: int,
    previous: Mapping[TopicPartition, PartitionSurvey] | None = None,
) -> Survey:
    """List the log dirs, refresh each partition's metadata and plan the compacted ones;
    ``previous``: the last survey's entries, kept where nothing they say can have changed."""
    last = previous or {}
    started = time.monotonic()
    settings = _Settings(resolve)
    partitions: dict[TopicPartition, PartitionSurvey] = {}
    errors: list[str] = []
    unlisted: set[Path] = set()
    cache.begin_scan()
    for log_dir in log_dirs:
        try:
            dirs = _partition_dirs(log_dir, cache.dir_names)
        except OSError as e:
            errors.append(f"log dir {log_dir}: cannot list: {e.strerror or e}")
            unlisted.add(log_dir)
            continue
        checkpoints = cache.checkpoints(log_dir)
        if checkpoints.error is not None:
            errors.append(checkpoints.error)
        for tp, directory in dirs:
            if tp in partitions:
                errors.append(f"{tp} is in {partitions[tp].log_dir} and in {log_dir}: skipped")
                continue
            found = settings(tp.topic)
            walk = not isinstance(found, str) and found.cleaner.compact
            meta = cache.read(directory, tp, checkpoints, walk=walk)
            before = last.get(tp)
            if (
                before is not None
                and before.meta is meta  # the cache kept it: same files, same checkpoints
                and before.settings is found  # resolved once per topic until a reload
                and before.log_dir == log_dir
                and not isinstance(found, str)
                and _time_free(found)
            ):
                partitions[tp] = before
                continue
            partitions[tp] = _survey_one(tp, log_dir, directory, found, meta, now_ms)
    cache.end_scan()
    return Survey(
        now_ms=now_ms,
        epoch=epoch,
        partitions=partitions,
        errors=tuple(errors),
        unlisted_log_dirs=frozenset(unlisted),
        seconds=time.monotonic() - started,
    )
