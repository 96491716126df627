"""What of a log the cleaner may clean now, how dirty it is, and how overdue (KIP-354).

Pure functions over segment metadata: ``LogMeta.from_log`` reads a log once, everything else is
arithmetic, so the daemon can rank many logs cheaply and tests can build logs by hand. The rules are
Kafka's, function for function (docs/kafka-format.md §4.1 to §4.4): ``cleanable_offsets`` is
LogCleanerManager's ``cleanableOffsets``, ``log_to_clean`` is ``LogToClean`` with
``calculateCleanableBytes``, ``max_compaction_delay`` is ``maxCompactionDelay``. The must-clean
ratio and ``rank`` are KIP-354's proposal, which Kafka never shipped (it only makes overdue logs
eligible; cleanerd cleans them first). ``compaction_deadline_ms`` is cleanerd's: the instant by
which the log's oldest dirty record must have been cleaned for ``max.compaction.lag.ms`` to hold,
which the scheduler works back from (docs/daemon.md, "Deadline scheduling").
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from cleanerd.compaction._batches import fold_producers
from cleanerd.format import LONG_MAX
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LogSegment,
    PartitionLog,
    TopicPartition,
    checkpointed_offset,
    pages_kept,
)
from cleanerd.topics import TopicCleanerConfig


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """What planning needs of one segment; cheap to cache and to build by hand."""

    base_offset: int
    size_bytes: int
    largest_timestamp: int  # Kafka's largestTimestamp (last time-index entry, else file mtime)
    first_batch_timestamp: int | None  # max timestamp of the first batch; None or < 0: unknown
    next_offset: int

    @classmethod
    def from_segment(cls, segment: LogSegment) -> SegmentMeta:
        next_offset = segment.next_offset()  # stats the file, so the size below is current
        return cls(
            base_offset=segment.base_offset,
            size_bytes=segment.size,
            largest_timestamp=segment.largest_timestamp,
            first_batch_timestamp=segment.first_batch_timestamp(),
            next_offset=next_offset,
        )


def _base(segment: SegmentMeta) -> int:
    return segment.base_offset


@dataclass(frozen=True, slots=True)
class LogMeta:
    """One partition log as planning sees it: its segments (the active one last) and offsets."""

    topic_partition: TopicPartition
    segments: tuple[SegmentMeta, ...]
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    checkpoint: int | None = None  # the cleaner-offset-checkpoint entry (first dirty offset)
    # ``PartitionLog.begin_checks``'s token for the walk, if one ran: which walk, not what the
    # log is, so two metadata of one log compare equal whoever made them
    checks: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError(f"{self.topic_partition}: a log has at least its active segment")
        bases = [s.base_offset for s in self.segments]
        if any(a >= b for a, b in itertools.pairwise(bases)):
            raise ValueError(f"{self.topic_partition}: segment base offsets must rise: {bases}")

    @property
    def active_segment(self) -> SegmentMeta:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    @classmethod
    def from_log(
        cls,
        log: PartitionLog,
        checkpoint: int | None,
        *,
        last_stable_offset: int | None = None,
    ) -> LogMeta:
        """Snapshot a log's metadata; ``last_stable_offset`` skips the producer-state walk.

        The segment list is taken first and the LSO capped at that snapshot's log end, so a
        writer appending or rolling meanwhile can only make the plan more conservative. The
        walk goes a chunk at a time through the segments' kept maps, releasing the pages behind
        it (resident memory stays about a chunk) unless the log is small enough for the clean
        to find them mapped (storage's ``pages_kept``), and ``log`` keeps its result, which the
        clean reuses (``PartitionLog.producer_state``).
        """
        segments = tuple(SegmentMeta.from_segment(s) for s in list(log.segments))
        leo = segments[-1].next_offset
        checks = None
        if last_stable_offset is None:
            checks = log.begin_checks()  # the clean skips the CRCs this walk checks
            with pages_kept(sum(s.size_bytes for s in segments)):
                last_stable_offset = log.last_stable_offset(fold_producers)
        return cls(
            topic_partition=log.topic_partition,
            segments=segments,
            log_start_offset=log.log_start_offset,
            log_end_offset=leo,
            last_stable_offset=min(last_stable_offset, leo),
            checkpoint=checkpoint,
            checks=checks,
        )


def cleaner_checkpoint(log: PartitionLog) -> int | None:
    """The log's entry in its log dir's ``cleaner-offset-checkpoint``, None when absent."""
    return checkpointed_offset(log.directory.parent, CLEANER_OFFSET_CHECKPOINT, log.topic_partition)


# --- Kafka's segment-range helpers (LogSegments.values, UnifiedLog.nonActiveLogSegmentsFrom) ------
def segments_between(log: LogMeta, from_offset: int, to_offset: int) -> tuple[SegmentMeta, ...]:
    """Segments from the one holding ``from_offset`` (else the first) with base < ``to_offset``."""
    if from_offset == to_offset:
        return ()
    if to_offset < from_offset:
        raise ValueError(f"{log.topic_partition}: segment range from {from_offset} to {to_offset}")
    start = max(bisect.bisect_right(log.segments, from_offset, key=_base) - 1, 0)
    end = bisect.bisect_left(log.segments, to_offset, key=_base)
    return log.segments[start:end]


def non_active_segments_from(log: LogMeta, offset: int) -> tuple[SegmentMeta, ...]:
    """Inactive segments from the one holding ``offset``; none when it is past the active base."""
    active_base = log.active_segment.base_offset
    if offset > active_base:
        return ()
    return segments_between(log, offset, active_base)


# --- docs/kafka-format.md §4.2: the cleanable range ----------------------------------------------
class OffsetsToClean(NamedTuple):
    """Kafka's OffsetsToClean; the upper bound is not yet rounded to a segment boundary."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool


def cleanable_offsets(log: LogMeta, config: TopicCleanerConfig, now_ms: int) -> OffsetsToClean:
    """First dirty offset (checkpoint, corrected) and the first offset that may not be cleaned."""
    start = log.log_start_offset
    checkpoint = start if log.checkpoint is None else log.checkpoint
    if checkpoint < start or checkpoint > log.log_end_offset:
        # Truncated or corrupted log, or retention moved the start: clean it all, rewrite the entry.
        first_dirty, force = start, True
    else:
        first_dirty, force = checkpoint, False
    bounds = [log.last_stable_offset, log.active_segment.base_offset]
    min_lag = max(config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        for segment in non_active_segments_from(log, first_dirty):
            if segment.largest_timestamp > now_ms - min_lag:
                bounds.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(bounds)), force)


# --- docs/kafka-format.md §4.1: bytes and the dirty ratio ----------------------------------------
class LogToClean(NamedTuple):
    """Kafka's LogToClean sizes; ``first_uncleanable_offset`` is rounded down to a segment base."""

    clean_bytes: int
    first_uncleanable_offset: int
    cleanable_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        """Kafka divides by zero here (NaN, never cleanable); 0.0 says the same without NaN."""
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


def log_to_clean(log: LogMeta, first_dirty_offset: int, uncleanable_offset: int) -> LogToClean:
    """Clean and cleanable bytes; a segment holding the first dirty offset counts in both."""
    nonactive = non_active_segments_from(log, uncleanable_offset)
    first_uncleanable = (nonactive[0] if nonactive else log.active_segment).base_offset
    cleanable = segments_between(log, min(first_dirty_offset, first_uncleanable), first_uncleanable)
    clean = segments_between(log, -1, first_dirty_offset)
    return LogToClean(
        clean_bytes=sum(s.size_bytes for s in clean),
        first_uncleanable_offset=first_uncleanable,
        cleanable_bytes=sum(s.size_bytes for s in cleanable),
    )


# --- docs/kafka-format.md §4.4: KIP-354 as Kafka implements it, plus the KIP's must-clean bytes --
def _clean_until(config: TopicCleanerConfig, now_ms: int) -> int:
    return now_ms - max(config.max_compaction_lag_ms, 0)


def _known_first_timestamp(segment: SegmentMeta) -> int | None:
    """Kafka ignores first-batch timestamps that are unknown, negative or zero."""
    return segment_written_ms(segment.first_batch_timestamp)


def segment_written_ms(
    first_batch_timestamp: int | None, first_seen_ms: int | None = None
) -> int | None:
    """When a segment's records were written, as compaction deadlines count it: its first
    batch's timestamp (KIP-354's clock: the broker's append time for LogAppendTime topics, the
    producer's for CreateTime ones), never later than ``first_seen_ms`` (when the daemon first
    saw the segment holding records, if it tracks that: a producer clock running ahead cannot
    push a deadline out); ``first_seen_ms`` alone when the timestamp is unknown or not positive
    (Kafka ignores those). None when neither is known."""
    ts = first_batch_timestamp
    if ts is None or ts <= 0:
        return first_seen_ms
    return ts if first_seen_ms is None else min(ts, first_seen_ms)


def deadline_after(written: Iterable[int], max_lag_ms: int) -> int | None:
    """The compaction deadline of records written at ``written``: the earliest plus
    ``max.compaction.lag.ms``; None with none, or with no maximum lag (Kafka's default, which
    overflows a long)."""
    earliest = min(written, default=None)
    if earliest is None or max_lag_ms >= LONG_MAX:
        return None
    deadline = earliest + max(max_lag_ms, 0)
    return deadline if deadline <= LONG_MAX else None


def max_compaction_delay(
    log: LogMeta, first_dirty_offset: int, config: TopicCleanerConfig, now_ms: int
) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty inactive segment is (0 if not)."""
    stamps = [
        ts
        for s in non_active_segments_from(log, first_dirty_offset)
        if (ts := _known_first_timestamp(s)) is not None
    ]
    earliest = min(stamps, default=LONG_MAX)
    clean_until = _clean_until(config, now_ms)
    return clean_until - earliest if earliest < clean_until else 0


def must_clean_bytes(
    log: LogMeta,
    first_dirty_offset: int,
    first_uncleanable_offset: int,
    config: TopicCleanerConfig,
    now_ms: int,
) -> int:
    """Bytes of cleanable segments holding records older than ``max.compaction.lag.ms``.

    A segment is overdue when its first batch's timestamp is before ``now - max lag``: KIP-354
    starts a record's clock when it is written and promises compaction of every segment that
    *contains* an overdue record, and the first batch is the segment's oldest record as Kafka
    tracks it. The largest timestamp would call a segment overdue only once *all* its records are,
    too late for the guarantee. It is also the timestamp ``max_compaction_delay`` uses, so a
    must-clean byte always comes with a positive delay. Unknown (or non-positive) timestamps never
    make a segment overdue, as in Kafka.
    """
    clean_until = _clean_until(config, now_ms)
    start = min(first_dirty_offset, first_uncleanable_offset)
    return sum(
        s.size_bytes
        for s in segments_between(log, start, first_uncleanable_offset)
        if (ts := _known_first_timestamp(s)) is not None and ts < clean_until
    )


def compaction_deadline_ms(
    log: LogMeta, first_dirty_offset: int, config: TopicCleanerConfig
) -> int | None:
    """When the log's dirty data must have been cleaned: the earliest known first-batch
    timestamp among the segments holding dirty offsets (from ``first_dirty_offset``, the active
    segment included) plus ``max.compaction.lag.ms``; None when no such segment has a known
    timestamp, or with no maximum lag (Kafka's default, which overflows a long).

    A record superseded at time t is superseded by a record stamped about t, in a segment whose
    first batch is no newer; cleaning that segment by its first timestamp + the lag removes the
    older record by t + the lag. The first batch's timestamp is the segment's oldest record as
    Kafka tracks it (``max_compaction_delay``'s, and a roll's); unknown or non-positive ones are
    skipped, as Kafka skips them. Time-free: a survey's plan keeps it until the files change.
    """
    stamps = (
        ts
        for s in segments_between(log, first_dirty_offset, LONG_MAX)
        if s.next_offset > first_dirty_offset and (ts := _known_first_timestamp(s)) is not None
    )
    return deadline_after(stamps, config.max_compaction_lag_ms)


# --- the plan -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """Everything the manager ranks by and the cleaner is bounded by, for one log at one time."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    checkpoint_invalid: bool  # the checkpoint was outside the log: rewrite it with first dirty
    first_uncleanable_dirty_offset: int  # Kafka's bound before rounding (LSO, active, min lag)
    first_uncleanable_offset: int  # the cleaning bound: rounded down to a segment base
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int
    must_clean_bytes: int
    min_cleanable_dirty_ratio: float
    deadline_ms: int | None = None  # compaction_deadline_ms: None, no deadline
    # LogMeta.checks: the clean claims what the plan's walk checked (not part of the plan)
    checks: int | None = field(default=None, compare=False)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        """cleanable / (clean + cleanable) bytes; 0.0 for an empty range."""
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def must_clean_ratio(self) -> float:
        """Overdue cleanable bytes / (clean + cleanable) bytes (KIP-354's proposal)."""
        total = self.total_bytes
        return self.must_clean_bytes / total if total else 0.0

    @property
    def need_compaction_now(self) -> bool:
        """Kafka's flag: some dirty inactive segment is past ``max.compaction.lag.ms``."""
        return self.compaction_delay_ms > 0

    @property
    def overdue(self) -> bool:
        """Cleaning now would clean records past ``max.compaction.lag.ms``."""
        return self.must_clean_bytes > 0

    @property
    def is_cleanable(self) -> bool:
        """Kafka's test: overdue with something to clean, or dirtier than the minimum (strictly)."""
        return (
            self.need_compaction_now and self.cleanable_bytes > 0
        ) or self.dirty_ratio > self.min_cleanable_dirty_ratio

    def summary(self) -> dict[str, object]:
        """The plan as plain values (fields and derived figures) for the CLI and log lines."""
        return {
            "partition": str(self.topic_partition),
            "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "checkpoint_invalid": self.checkpoint_invalid,
            "clean_bytes": self.clean_bytes,
            "cleanable_bytes": self.cleanable_bytes,
            "total_bytes": self.total_bytes,
            "dirty_ratio": self.dirty_ratio,
            "must_clean_ratio": self.must_clean_ratio,
            "compaction_delay_ms": self.compaction_delay_ms,
            "deadline_ms": self.deadline_ms,
            "need_compaction_now": self.need_compaction_now,
            "is_cleanable": self.is_cleanable,
        }


def plan(log: LogMeta, config: TopicCleanerConfig, now_ms: int) -> CleaningPlan:
    """Plan one log at ``now_ms`` exactly as Kafka's grab step would, plus the must-clean bytes."""
    offsets = cleanable_offsets(log, config, now_ms)
    sizes = log_to_clean(log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
    return CleaningPlan(
        topic_partition=log.topic_partition,
        first_dirty_offset=offsets.first_dirty_offset,
        checkpoint_invalid=offsets.force_update_checkpoint,
        first_uncleanable_dirty_offset=offsets.first_uncleanable_dirty_offset,
        first_uncleanable_offset=sizes.first_uncleanable_offset,
        clean_bytes=sizes.clean_bytes,
        cleanable_bytes=sizes.cleanable_bytes,
        compaction_delay_ms=max_compaction_delay(log, offsets.first_dirty_offset, config, now_ms),
        must_clean_bytes=must_clean_bytes(
            log, offsets.first_dirty_offset, sizes.first_uncleanable_offset, config, now_ms
        ),
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
        deadline_ms=compaction_deadline_ms(log, offsets.first_dirty_offset, config),
        checks=log.checks,
    )


def rank_key(p: CleaningPlan) -> tuple[int, float, float, int, TopicPartition]:
    """``rank``'s order as a key (unique: it ends with the topic partition)."""
    if p.overdue:
        return (0, -p.must_clean_ratio, -p.dirty_ratio, -p.compaction_delay_ms, p.topic_partition)
    return (1, -p.dirty_ratio, 0.0, -p.compaction_delay_ms, p.topic_partition)


def rank(plans: Iterable[CleaningPlan]) -> list[CleaningPlan]:
    """Cleanable plans in the order to clean them: overdue first, then the dirtiest.

    Overdue logs (``must_clean_bytes > 0``) come first by must-clean ratio, then the rest by dirty
    ratio, both descending; ties go to the longer compaction delay, then the topic partition, so
    the order is deterministic (Kafka's is unspecified). Callers pass only candidates: compacted
    logs that are not in progress, paused or marked uncleanable.
    """
    return sorted((p for p in plans if p.is_cleanable), key=rank_key)
