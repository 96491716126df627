"""How each removal landed against its compaction deadline, and the deadlines missed (metrics).

A compacted topic with ``max.compaction.lag.ms`` promises (KIP-354) that a record superseded by a
newer one is gone within the lag of the newer one's write. So a dirty record's *deadline* is its
write time plus the lag, and a cleaning meets the deadlines of the dirty records it takes into its
offset map when its swap lands. The rules have one home, compaction's ``segment_written_ms`` (a
segment's write time: its first batch's timestamp, capped by when the daemon first saw it
holding records, which only this watch tracks) and ``deadline_after`` (the earliest write time
plus the lag; none at Kafka's default lag), which the scheduler's ``compaction_deadline_ms``
uses too (docs/metrics.md, "Compaction deadlines"); everything else here counts against them.

``DeadlineWatch`` keeps, per partition, each segment's write time from the surveys, the next
deadline (of the dirty range: first dirty offset to log end), and counts a missed deadline once:
when a cleaning lands after it (``late``), or when a survey finds it passed while the partition
cannot be cleaned (``uncleanable``, ``paused``, ``failing``: backing off after a failure). The
counts live as long as the daemon, across reloads; topics keep their series once seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from cleanerd.compaction import CleaningPlan, SegmentMeta, deadline_after, segment_written_ms
from cleanerd.format import LONG_MAX
from cleanerd.scheduling import CleaningState, PartitionStatus, Survey
from cleanerd.storage import TopicPartition

LATE = "late"
BLOCKED_REASONS = ("uncleanable", "paused", "failing")
MISSED_REASONS = (LATE, *BLOCKED_REASONS)

_BUSY = (CleaningState.IN_PROGRESS, CleaningState.ABORTED)


class WrittenSegment(NamedTuple):
    """A segment holding records, and when they were written as far as deadlines go."""

    base_offset: int
    next_offset: int
    written_ms: int


def written_ms(first_batch_timestamp: int | None, first_seen_ms: int) -> int:
    """A segment's write time, by compaction's rule, for a segment the daemon has seen."""
    written = segment_written_ms(first_batch_timestamp, first_seen_ms)
    assert written is not None  # first_seen_ms is always known here
    return written


def deadline_ms(
    segments: Iterable[WrittenSegment], from_offset: int, to_offset: int, max_lag_ms: int
) -> int | None:
    """The compaction deadline of the records in [``from_offset``, ``to_offset``), by
    compaction's ``deadline_after`` over the segments holding them."""
    return deadline_after(
        (
            s.written_ms
            for s in segments
            if s.base_offset < to_offset and s.next_offset > max(from_offset, s.base_offset)
        ),
        max_lag_ms,
    )


def blocked_reason(st: PartitionStatus) -> str | None:
    """Why the daemon cannot clean the partition now (one of ``BLOCKED_REASONS``), or None."""
    if st.uncleanable:
        return "uncleanable"
    if st.paused_count > 0 or st.state is CleaningState.PAUSED:
        return "paused"
    if st.failures > 0 and st.state not in _BUSY:
        return "failing"
    return None


def _written(
    segments: Iterable[SegmentMeta], known: Mapping[int, WrittenSegment], seen_ms: int
) -> dict[int, WrittenSegment]:
    """The segments holding records, by base offset, with their write times: ``known`` ones
    keep theirs unless it comes out earlier now, new ones count as first seen at ``seen_ms``."""
    out = {}
    for s in segments:
        if s.next_offset <= s.base_offset:
            continue  # no records (an empty active segment): no write time yet
        written = written_ms(s.first_batch_timestamp, seen_ms)
        if (before := known.get(s.base_offset)) is not None:
            written = min(written, before.written_ms)
        out[s.base_offset] = WrittenSegment(s.base_offset, s.next_offset, written)
    return out


class _Taken(Protocol):
    """What a worker took (``scheduling.Grab``): the partition and the plan it was taken by."""

    @property
    def tp(self) -> TopicPartition: ...
    @property
    def plan(self) -> CleaningPlan: ...


class _Cleaned(Protocol):
    """What a cleaning cleaned (``service._clean_job.JobResult``): its range of offsets."""

    @property
    def first_dirty_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...


@dataclass(slots=True)
class _Partition:
    """What the watch knows of one partition."""

    max_lag_ms: int = LONG_MAX
    segments: dict[int, WrittenSegment] = field(default_factory=dict)  # by base offset
    deadline_ms: int | None = None  # of the dirty range, as last known
    counted_ms: int | None = None  # the last deadline counted as missed
    cleaned_ms: int | None = None  # when a cleaning last landed: older surveys are stale


@dataclass(frozen=True)
class DeadlineFigures:
    """The watch at one instant, for the metrics and ``/status``."""

    missed: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (topic, reason)
    by_max_lag: Mapping[str, int] = field(default_factory=dict)  # topic -> cleanings
    next_ms: Mapping[TopicPartition, int] = field(default_factory=dict)  # each next deadline

    def to_json(self) -> dict[str, object]:
        missed: dict[str, dict[str, int]] = {}
        for (topic, reason), n in sorted(self.missed.items()):
            missed.setdefault(topic, {})[reason] = n
        return {
            "missed": missed,
            "compacted_by_max_lag": dict(sorted(self.by_max_lag.items())),
            "next_ms": {str(tp): ms for tp, ms in sorted(self.next_ms.items())},
        }


class DeadlineWatch:
    """Segment write times, next deadlines and missed-deadline counts, fed by the daemon's
    surveys and finished cleanings (on the event loop)."""

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._missed: dict[tuple[str, str], int] = {}
        self._by_max_lag: dict[str, int] = {}

    def _topic(self, topic: str) -> None:
        """Series at 0 for a topic with deadlines, so a first miss shows as an increase."""
        self._by_max_lag.setdefault(topic, 0)
        for reason in MISSED_REASONS:
            self._missed.setdefault((topic, reason), 0)

    def _count_miss(self, tp: TopicPartition, part: _Partition, deadline: int, why: str) -> None:
        if part.counted_ms != deadline:
            part.counted_ms = deadline
            self._missed[tp.topic, why] = self._missed.get((tp.topic, why), 0) + 1

    # --- surveys ----------------------------------------------------------------------------
    def surveyed(self, survey: Survey, statuses: Iterable[PartitionStatus], now_ms: int) -> None:
        """Take a survey the manager has applied (``statuses``: the manager's, after it), then
        count the deadlines passed by ``now_ms`` of partitions that cannot be cleaned."""
        by_tp = {st.tp: st for st in statuses}
        for tp in [tp for tp in self._partitions if tp not in by_tp]:
            del self._partitions[tp]  # gone; its topic's counts stay
        for tp, entry in survey.partitions.items():
            st = by_tp.get(tp)
            settings, meta, plan = entry.settings, entry.meta.log, entry.plan
            if st is None or settings is None or not settings.cleaner.compact:
                self._partitions.pop(tp, None)
                continue
            if meta is None or plan is None or st.state in _BUSY:
                continue  # unreadable, or being cleaned: keep what is known
            part = self._partitions.setdefault(tp, _Partition())
            if part.cleaned_ms is not None and part.cleaned_ms >= survey.now_ms:
                continue  # the survey may predate the cleaning's swap
            part.max_lag_ms = settings.cleaner.max_compaction_lag_ms
            part.segments = _written(meta.segments, part.segments, survey.now_ms)
            dirty = (plan.first_dirty_offset, meta.log_end_offset)
            part.deadline_ms = deadline_ms(part.segments.values(), *dirty, part.max_lag_ms)
            if part.max_lag_ms < LONG_MAX:
                self._topic(tp.topic)
        for tp, part in self._partitions.items():
            why = blocked_reason(by_tp[tp])
            if why is not None and part.deadline_ms is not None and part.deadline_ms < now_ms:
                self._count_miss(tp, part, part.deadline_ms, why)

    # --- cleanings --------------------------------------------------------------------------
    def cleaned(self, grab: _Taken, result: _Cleaned, now_ms: int) -> float | None:
        """A cleaning of ``grab`` landed at ``now_ms``: count it, and return how far past the
        deadline of the records it cleaned it landed (seconds; negative: ahead of it), or None
        when they have no deadline (nothing cleaned, no lag, segments never surveyed)."""
        tp = grab.tp
        if grab.plan.need_compaction_now:
            self._topic(tp.topic)
            self._by_max_lag[tp.topic] += 1
        part = self._partitions.get(tp)
        if part is None:
            return None
        part.cleaned_ms = now_ms
        segments = part.segments.values()
        start, end = result.first_dirty_offset, result.end_offset
        # the rest of the dirty range is as it was: its deadline is the next one until a survey
        part.deadline_ms = deadline_ms(segments, max(start, end), LONG_MAX, part.max_lag_ms)
        deadline = deadline_ms(segments, start, end, part.max_lag_ms) if end > start else None
        if deadline is None:
            return None
        if now_ms > deadline:
            self._count_miss(tp, part, deadline, LATE)
        return (now_ms - deadline) / 1000

    # --- reading ----------------------------------------------------------------------------
    def figures(self) -> DeadlineFigures:
        """Copies of the counts and each partition's next deadline."""
        return DeadlineFigures(
            missed=dict(self._missed),
            by_max_lag=dict(self._by_max_lag),
            next_ms={
                tp: p.deadline_ms for tp, p in self._partitions.items() if p.deadline_ms is not None
            },
        )
