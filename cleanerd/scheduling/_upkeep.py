"""What the manager hands out besides cleanings: idle rolls, retention sweeps and snapshots.

A mixin of ``CleanerManager`` (its statuses and last survey are the state it reads): each job
marks its partition in progress while it runs (``reserve``/``release``), so no worker cleans a
log that is being rolled, swept or snapshotted. Snapshots (KIP-630) are worker jobs under the
shared dedupe budget; a worker asks for one only when no overdue log waits (``overdue_waiting``),
so they rank after overdue cleanings and before the others, and a partition waiting to be cleaned
is cleaned before its snapshot is taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from cleanerd.compaction import CleaningPlan, LogMeta
from cleanerd.scheduling._failures import FailureBook
from cleanerd.scheduling._grab import idle_roll_due, retention_due
from cleanerd.scheduling._sizing import map_bytes_for
from cleanerd.scheduling._snapshots import SnapshotGrab, snapshot_due
from cleanerd.scheduling._state import CleaningState, CleaningTotals, PartitionStatus
from cleanerd.scheduling._survey import PartitionSurvey
from cleanerd.storage import TopicPartition
from cleanerd.topics import TopicSettings

IDLE, IN_PROGRESS = CleaningState.IDLE, CleaningState.IN_PROGRESS


class Upkeep:
    """Idle rolls, retention and snapshots, over ``CleanerManager``'s state."""

    failures: FailureBook
    _config: tuple[Any, float, int]
    _clock: Callable[[], int]
    _statuses: dict[TopicPartition, PartitionStatus]
    _surveyed: dict[TopicPartition, PartitionSurvey]
    _stale: set[TopicPartition]
    totals: CleaningTotals

    def _candidates(self, now: int) -> list[tuple[PartitionStatus, PartitionSurvey]]:
        raise NotImplementedError

    def _let_go(self, tp: TopicPartition) -> PartitionStatus | None:
        raise NotImplementedError

    def settings_for(self, tp: TopicPartition) -> TopicSettings:
        """The topic settings of the partition's last survey (KeyError when it has none)."""
        settings = self._surveyed[tp].settings
        if settings is None:
            raise KeyError(f"{tp}: its topic config did not resolve")
        return settings

    def _maintainable(self) -> list[tuple[PartitionStatus, LogMeta, TopicSettings]]:
        """Compacted, idle, readable logs whose survey is current."""
        found = []
        for tp, st in sorted(self._statuses.items()):
            entry = self._surveyed.get(tp)
            if entry is None or entry.settings is None or entry.meta.log is None:
                continue
            if tp in self.failures.unreadable:
                continue
            if st.compacted and st.state is IDLE and not st.uncleanable and tp not in self._stale:
                found.append((st, entry.meta.log, entry.settings))
        return found

    def idle_rolls(self) -> list[PartitionStatus]:
        """Logs whose non-empty active segment's first batch is older than
        ``max.compaction.lag.ms``: rolled, their records become cleanable within the lag."""
        now = self._clock()
        found = self._maintainable()
        return [dataclasses.replace(st) for st, lm, ts in found if idle_roll_due(lm, ts, now)]

    def deletable(self) -> list[PartitionStatus]:
        """``compact,delete`` logs with segments retention would delete (Kafka's sweep); the
        caller ``reserve``s each one while it deletes."""
        now = self._clock()
        found = self._maintainable()
        return [dataclasses.replace(st) for st, lm, ts in found if retention_due(lm, ts, now)]

    def reserve(self, tp: TopicPartition) -> bool:
        """Mark an idle, cleanable-state log in progress for a roll or a retention sweep (as
        Kafka's sweep does), so no worker grabs it meanwhile; False when it is not idle."""
        st = self._statuses.get(tp)
        if st is None or st.state is not IDLE or st.uncleanable:
            return False
        st.state = IN_PROGRESS
        return True

    def release(self, tp: TopicPartition) -> None:
        """End a ``reserve`` (a pause meanwhile leaves it paused)."""
        self._let_go(tp)

    # --- snapshots (KIP-630) ------------------------------------------------------------------
    def overdue_waiting(self) -> bool:
        """An overdue log (KIP-354) waits for a worker: it goes before any snapshot."""
        plans: list[CleaningPlan | None] = [e.plan for _, e in self._candidates(self._clock())]
        return any(p is not None and p.need_compaction_now for p in plans)

    def grab_snapshot(self) -> SnapshotGrab | None:
        """A partition due a snapshot, marked in progress; the worker ``release``s it."""
        _, load_factor, budget = self._config
        for st, meta, settings in self._maintainable():
            # a log waiting to be cleaned is cleaned first: the snapshot then reads less, and a
            # busy partition's snapshots never keep its cleanings (and truncation) waiting
            snapshot_end = self._surveyed[st.tp].snapshot_end
            if not st.cleanable and snapshot_due(meta, settings, snapshot_end):
                st.state = IN_PROGRESS
                self._stale.add(st.tp)
                records = max(meta.log_end_offset - meta.log_start_offset, 1)
                size = map_bytes_for(records, settings.strategy, load_factor, budget)
                return SnapshotGrab(st.tp, st.directory, settings, size, records)
        return None

    def snapshot_taken(
        self, tp: TopicPartition, end_offset: int | None, size: int, seconds: float
    ) -> None:
        """Count a snapshot job and remember the partition's newest snapshot (``/status``,
        the metrics); ``end_offset`` None: nothing new to snapshot."""
        t = self.totals
        self.totals = dataclasses.replace(
            t,
            snapshots=t.snapshots + (end_offset is not None),
            snapshot_bytes=t.snapshot_bytes + size,
            snapshot_seconds=t.snapshot_seconds + seconds,
        )
        st = self._statuses.get(tp)
        if st is not None and end_offset is not None:
            st.latest_snapshot_end_offset, st.latest_snapshot_ms = end_offset, self._clock()

    def snapshot_failed(self, tp: TopicPartition) -> None:
        """Count a failed snapshot job (the worker logs why; the next survey may retry)."""
        self.totals = dataclasses.replace(
            self.totals, snapshot_failures=self.totals.snapshot_failures + 1
        )
