"""Deadline scheduling: how long a partition's next cleaning will take, and when to act on it.

A log's deadline (``compaction.compaction_deadline_ms``, on its plan) is when its oldest dirty
record must have been cleaned for ``max.compaction.lag.ms`` to hold. Acting at the deadline is
too late: the cleaning then ends after it. So the daemon works back from it by its lead: the
time the cleaning is expected to take, learned per partition (``CleaningTimes``), plus the time
the workers need for the logs due just before it (``queue_leads``: logs written together fall
due together, and two workers clean twenty partitions one after the other):

- the grab: from ``deadline - lead`` on, a log with cleanable bytes is due, whatever its dirty
  ratio, and due logs go first, earliest deadline first (``_grab.choose``);
- the roll: the active segment is rolled at its own deadline (first batch + the lag) minus the
  lead and ``min.compaction.lag.ms`` (a rolled segment is cleanable only that much later);
- the manager loop wakes at the next of these instants instead of sleeping a full backoff.

The lead is capped at half the lag: an estimate that grew too big (a slow cleaning, a lag set
shorter than a cleaning) must not turn into a roll and a cleaning every survey.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cleanerd.compaction import CleaningPlan, LogMeta, compaction_deadline_ms
from cleanerd.storage import TopicPartition
from cleanerd.topics import TopicSettings

DEFAULT_BYTES_PER_SECOND = 32 << 20
"""Before a partition's first cleaning, and for bytes beyond those of its recent cleanings: a
rate a twentieth of the engine's on one thread (docs/speed.md), for a loaded machine and a cold
page cache."""

DEFAULT_OVERHEAD_S = 0.25
"""Before a partition's first cleaning: open, plan, swap and checkpoint, whatever the size."""

MARGIN_FACTOR = 1.5
MARGIN_S = 1.0
"""The lead is ``MARGIN_FACTOR`` x the estimate + ``MARGIN_S``: the factor for a cleaning slower
than the slowest recent one, the constant for what is not the cleaning (the survey that sees the
log, a worker finishing its current log, the roll)."""

HISTORY = 8
"""Cleanings remembered per partition."""


@dataclass(frozen=True, slots=True)
class Cleaned:
    """One past cleaning: the log's size when it was grabbed and the job's wall time."""

    log_bytes: int
    seconds: float


class CleaningTimes:
    """The expected duration of each partition's next cleaning, learned from its last ones.

    The estimate for a log of ``b`` bytes is the slowest of the last ``HISTORY`` cleanings,
    each plus the bytes ``b`` has beyond what it covered at ``DEFAULT_BYTES_PER_SECOND`` (a
    cleaning reads the whole log below its bound, so its time follows the log's size); with no
    cleaning yet, ``DEFAULT_OVERHEAD_S`` + ``b`` at that rate. The slowest, not an average:
    being early costs a cleaning a little sooner, being late breaks the promise.
    """

    def __init__(self) -> None:
        self._seen: dict[TopicPartition, deque[Cleaned]] = {}

    def observe(self, tp: TopicPartition, log_bytes: int, seconds: float) -> None:
        """A successful cleaning of ``tp`` took ``seconds`` on a log of ``log_bytes``."""
        seen = self._seen.setdefault(tp, deque(maxlen=HISTORY))
        seen.append(Cleaned(max(log_bytes, 0), max(seconds, 0.0)))

    def forget(self, tp: TopicPartition) -> None:
        self._seen.pop(tp, None)

    def estimate_s(self, tp: TopicPartition, log_bytes: int) -> float:
        """Seconds the next cleaning of ``tp`` is expected to take, without the margin."""
        seen = self._seen.get(tp)
        if not seen:
            return DEFAULT_OVERHEAD_S + max(log_bytes, 0) / DEFAULT_BYTES_PER_SECOND
        return max(
            c.seconds + max(log_bytes - c.log_bytes, 0) / DEFAULT_BYTES_PER_SECOND for c in seen
        )

    def expected_ms(self, tp: TopicPartition, log_bytes: int) -> int:
        """The estimate with its margin, in ms: how long before a deadline a cleaning starts."""
        return round((MARGIN_FACTOR * self.estimate_s(tp, log_bytes) + MARGIN_S) * 1000)


def queue_leads(
    logs: Sequence[tuple[TopicPartition, int, float]], workers: int
) -> dict[TopicPartition, int]:
    """Each log's lead (ms): how long before its deadline it must be taken for every log to end
    by its deadline when ``workers`` workers take them earliest deadline first. ``logs`` are
    (partition, deadline in ms, ``CleaningTimes.estimate_s``).

    Worked backwards from the latest deadline: a log ends by its deadline, or by the time the
    logs after it need the workers from, whichever is sooner; it runs for ``MARGIN_FACTOR`` x
    its estimate, and takes that much of one worker's time, 1/``workers`` of all of it, from
    the later ones' start. ``MARGIN_S`` is added once to each lead: it stands for what is not
    cleaning (the survey, the grab), which does not add up along the queue.
    """
    workers = max(workers, 1)
    leads: dict[TopicPartition, int] = {}
    free_until: float | None = None  # the workers' time after this is the later logs'
    for tp, deadline, estimate_s in sorted(logs, key=lambda log: (log[1], log[0]), reverse=True):
        end = deadline if free_until is None else min(deadline, free_until)
        run_ms = MARGIN_FACTOR * estimate_s * 1000
        leads[tp] = round(deadline - end + run_ms + MARGIN_S * 1000)
        free_until = end - run_ms / workers
    return leads


@dataclass(frozen=True, slots=True)
class Leads:
    """How long before a deadline the daemon acts on one log: ``clean_ms`` before its deadline
    a grab takes it, ``roll_ms`` before its active segment's deadline that segment rolls."""

    clean_ms: int
    roll_ms: int

    @classmethod
    def of(cls, lead_ms: int, settings: TopicSettings) -> Leads:
        """From the lead (``queue_leads``, or the expected cleaning time with its margin),
        capped at half the lag; the roll adds ``min.compaction.lag.ms``, which holds a rolled
        segment back that long."""
        cap = max(settings.cleaner.max_compaction_lag_ms, 0) // 2
        min_lag = max(settings.cleaner.min_compaction_lag_ms, 0)
        return cls(min(lead_ms, cap), min(lead_ms + min_lag, cap))


def due_at_ms(plan: CleaningPlan, leads: Leads) -> int | None:
    """From when a grab takes the log ahead of the rest (None: it has no deadline)."""
    return None if plan.deadline_ms is None else plan.deadline_ms - leads.clean_ms


def is_due(plan: CleaningPlan, leads: Leads, now_ms: int) -> bool:
    """Nearly due or overdue, with something to clean now."""
    at = due_at_ms(plan, leads)
    return at is not None and at <= now_ms and plan.cleanable_bytes > 0


def roll_at_ms(log: LogMeta, settings: TopicSettings, leads: Leads) -> int | None:
    """When the active segment rolls: its own deadline (its first batch's timestamp + the lag)
    - the roll lead; None when it is empty or has no deadline."""
    active = log.active_segment.base_offset
    deadline = compaction_deadline_ms(log, active, settings.cleaner)
    return None if deadline is None else deadline - leads.roll_ms


def roll_due(log: LogMeta, settings: TopicSettings, leads: Leads, now_ms: int) -> bool:
    """The active segment's roll instant has passed (strictly, as ``storage``'s re-check)."""
    at = roll_at_ms(log, settings, leads)
    return at is not None and at < now_ms


@dataclass(frozen=True, slots=True)
class Roll:
    """An active segment to roll: which one (its base offset, so a writer's roll meanwhile is
    seen and not doubled) and the rule it is rolled by, re-checked under the writer lock."""

    tp: TopicPartition
    directory: Path
    active_base: int
    max_lag_ms: int
    lead_ms: int
