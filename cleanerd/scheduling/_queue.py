"""The grab's order kept between surveys, so a grab costs O(log n), not a pass over every log.

``_grab.choose`` ranks every candidate at each grab: O(n log n) per cleaning, O(n² log n) for a
pass over n logs, which a daemon with thousands of partitions felt (bench/daemon.py, sweep).
Between two surveys the candidates' plans and leads do not change; the set only shrinks (a log
is grabbed, reserved, paused), and the logs due grow as time passes their due instant. So
``GrabQueue`` sorts them once, into heaps, and answers each grab with ``choose``'s answer:

- the logs due, earliest deadline first (``_grab.due_key``): a heap of the not yet due ones by
  their due instant (``_deadlines.due_at_ms``), moved to a heap by ``due_key`` as time reaches
  them;
- the rest in ``rank``'s order (``compaction.rank_key``);
- Kafka's grab figures (max dirty ratio, max compaction delay, logs past the max lag, cleanable
  logs) over the logs still in it: two max-heaps and three counts.

A log leaves by ``discard``; heap entries of logs gone are dropped when they reach the top. The
manager builds a new queue whenever a log may have joined the candidates or changed (a survey,
a resume, a clean request, a reload, a backoff's end) and when the clock went back; while an
admin's clean request waits it asks ``choose`` itself (requests are rare, and go first).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from cleanerd.compaction import CleaningPlan, rank_key
from cleanerd.scheduling._deadlines import Leads, due_at_ms
from cleanerd.scheduling._grab import GrabFigures, due_key
from cleanerd.storage import TopicPartition


class GrabQueue:
    """The candidates of one survey in ``choose``'s order, as of ``now_ms`` and until
    ``until_ms`` (exclusive; when a log backing off after a failure becomes a candidate)."""

    def __init__(
        self,
        plans: Iterable[CleaningPlan],
        leads: Mapping[TopicPartition, Leads],
        now_ms: int,
        until_ms: int | None = None,
    ) -> None:
        self._plans = {p.topic_partition: p for p in plans}
        self._now = now_ms
        self.until_ms = until_ms
        self._pending: list[tuple[int, TopicPartition]] = []  # (due instant, log), not due yet
        self._due: list[tuple[Any, ...]] = []  # due_key
        self._is_due: set[TopicPartition] = set()
        self._ranked = [rank_key(p) for p in self._plans.values() if p.is_cleanable]
        self._ratios = [(-p.dirty_ratio, tp) for tp, p in self._plans.items() if p.total_bytes]
        self._delays = [(-p.compaction_delay_ms, tp) for tp, p in self._plans.items()]
        self._lagged = sum(1 for p in self._plans.values() if p.need_compaction_now)
        self._cleanable = len(self._ranked)
        self._due_not_ranked = 0  # due, and not cleanable by Kafka's test: listed once more
        for tp, p in self._plans.items():
            at = due_at_ms(p, leads[tp]) if tp in leads and p.cleanable_bytes > 0 else None
            if at is not None:
                self._pending.append((at, tp))
        heapq.heapify(self._pending)
        heapq.heapify(self._ranked)
        heapq.heapify(self._ratios)
        heapq.heapify(self._delays)
        self._advance(now_ms)

    def __len__(self) -> int:
        return len(self._plans)

    def valid_at(self, now_ms: int) -> bool:
        """Whether the queue still answers at ``now_ms``: not before its last use (a clock that
        went back), not from ``until_ms`` on."""
        return now_ms >= self._now and (self.until_ms is None or now_ms < self.until_ms)

    def _advance(self, now_ms: int) -> None:
        """Move the logs whose due instant has come to the due heap (``is_due``)."""
        self._now = now_ms
        pending = self._pending
        while pending and pending[0][0] <= now_ms:
            _, tp = heapq.heappop(pending)
            p = self._plans.get(tp)
            if p is None:
                continue
            heapq.heappush(self._due, due_key(p))
            self._is_due.add(tp)
            self._due_not_ranked += not p.is_cleanable

    def _top(self, heap: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
        """The heap's first entry of a log still in the queue (entries of logs gone dropped)."""
        while heap and heap[0][-1] not in self._plans:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def discard(self, tp: TopicPartition) -> None:
        """``tp`` is no longer a candidate (grabbed, reserved, paused)."""
        p = self._plans.pop(tp, None)
        if p is None:
            return
        self._lagged -= p.need_compaction_now
        self._cleanable -= p.is_cleanable
        if tp in self._is_due:
            self._is_due.discard(tp)
            self._due_not_ranked -= not p.is_cleanable

    def any_due(self, now_ms: int) -> bool:
        """A log is due at ``now_ms`` (``_grab.choose`` would put it first)."""
        self._advance(now_ms)
        return self._top(self._due) is not None

    def choose(self, now_ms: int) -> tuple[TopicPartition | None, GrabFigures]:
        """``_grab.choose`` over the logs in the queue, with no clean request, at ``now_ms``."""
        self._advance(now_ms)
        first = self._top(self._due) or self._top(self._ranked)
        ratio, delay = self._top(self._ratios), self._top(self._delays)
        figures = GrabFigures(
            max_dirty_ratio=0.0 if ratio is None else -ratio[0],
            max_compaction_delay_ms=0 if delay is None else -delay[0],
            logs_compacted_by_max_lag=self._lagged,
            cleanable_logs=self._cleanable + self._due_not_ranked,
        )
        return (None if first is None else first[-1]), figures
