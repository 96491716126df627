"""Which partition a worker cleans next, and each partition's cleaning state.

Kafka's ``LogCleanerManager`` under the daemon: the states (in progress, aborted, paused(n)),
the uncleanable mark and the grab. The grab goes by deadlines, which Kafka lacks: logs due
(overdue, or whose ``max.compaction.lag.ms`` deadline is nearer than their lead: the expected
cleaning time plus the workers' time for the logs due before them) first, earliest deadline
first, then the rest by dirty ratio (``plan.rank``); a log an admin asked to clean goes first
whatever its ratio. The expected cleaning times are learned here from each partition's
cleanings and the leads planned at each survey (``_deadlines``); ``next_wake_ms`` tells the
daemon's loop when the next log falls due. cleanerd also adds what Kafka lacks: a failed
clean, or a survey that cannot read the partition, is logged, counted and retried with exponential
backoff before the partition is marked uncleanable (``failures``), and the mark is lifted when the
partition's files change, when a survey reads it again, when its topic's settings change (a
reload: what KAFKA-19895 asks of Kafka), or on resume. The mark lives in memory only: a restart
starts every partition afresh, as Kafka's does.

Split in two so the event loop never reads files: ``scan`` (thread-safe, no status change) takes
a ``Survey`` in a thread; ``apply`` and everything else run on the loop thread.

The manager also hands out the upkeep besides cleanings: rolls, retention sweeps and
snapshots. Each such job marks its partition in progress while it runs (``reserve``/``release``),
so no worker cleans a log that is being rolled, swept or snapshotted. An active segment is
rolled at its deadline minus the expected cleaning time (``rolls``), so the cleaning that
follows ends by the deadline. Snapshots (KIP-630) are worker jobs under the shared dedupe
budget; a worker asks for one only when no due log waits (``due_waiting``), so they rank after
due cleanings and before the others, and a partition waiting to be cleaned is cleaned before
its snapshot is taken.

Admin pauses outlive the process (``storage`` keeps them in each log dir): the daemon hands the
recorded ones to ``restore_pauses`` before the first survey is applied, so a partition paused
before a restart is paused from the moment the manager knows it, and ``pauses`` says what to
record after each change.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from cleanerd.compaction import CleaningPlan, LogMeta
from cleanerd.logger import get_logger
from cleanerd.scheduling._deadlines import (
    CleaningTimes,
    Leads,
    Roll,
    due_at_ms,
    is_due,
    queue_leads,
    roll_at_ms,
    roll_due,
)
from cleanerd.scheduling._failures import FailureBook, RetryPolicy
from cleanerd.scheduling._grab import (
    CleanOutcome,
    Grab,
    GrabFigures,
    add_clean,
    choose,
    retention_due,
)
from cleanerd.scheduling._metadata import MetadataCache
from cleanerd.scheduling._queue import GrabQueue
from cleanerd.scheduling._sizing import map_bytes_for
from cleanerd.scheduling._snapshots import SnapshotGrab, snapshot_due
from cleanerd.scheduling._state import (
    CleaningState,
    CleaningTotals,
    PartitionStatus,
)
from cleanerd.scheduling._survey import PartitionSurvey, Resolve, Survey, take_survey
from cleanerd.storage import TopicPartition, wall_clock_ms
from cleanerd.topics import TopicSettings

IDLE, IN_PROGRESS = CleaningState.IDLE, CleaningState.IN_PROGRESS
ABORTED, PAUSED = CleaningState.ABORTED, CleaningState.PAUSED

__all__ = ["CleanOutcome", "CleanerManager", "Grab", "RetryPolicy"]

log = get_logger("cleanerd.manager")


class CleanerManager:
    """Partition states, the grab and the upkeep jobs; the only writer of ``PartitionStatus``
    records."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        resolve: Resolve,
        *,
        load_factor: float = 0.9,
        budget_bytes: int = 128 << 20,
        clock_ms: Callable[[], int] = wall_clock_ms,
        retry: RetryPolicy | None = None,
        workers: int = 1,
    ) -> None:
        """``workers``: how many cleanings run at once (the leads count on that many)."""
        self.log_dirs = tuple(Path(d) for d in log_dirs)
        self.workers = workers
        self.failures = FailureBook(retry or RetryPolicy())
        self._config = (resolve, load_factor, budget_bytes)
        self._clock = clock_ms
        self._cache = MetadataCache()
        self._scan_lock = threading.Lock()
        self._last_scan: Mapping[TopicPartition, PartitionSurvey] = {}  # under the lock
        self._statuses: dict[TopicPartition, PartitionStatus] = {}
        self._surveyed: dict[TopicPartition, PartitionSurvey] = {}
        self._stale: set[TopicPartition] = set()  # grabbed since the last fresh survey entry
        self._released: dict[TopicPartition, int] = {}  # epoch at which a worker let go
        self._epoch = 0
        self._config_bad: set[TopicPartition] = set()  # its topic config did not resolve
        self._settings: dict[TopicPartition, TopicSettings] = {}  # as last resolved
        # recorded pauses whose partition no survey has found yet: (its log dir, count)
        self._restored: dict[TopicPartition, tuple[Path, int]] = {}
        self.totals = CleaningTotals()
        self.times = CleaningTimes()  # each partition's expected cleaning time, learned
        self._lead_ms: dict[TopicPartition, int] = {}  # queue_leads at the last survey
        self._grabbed_bytes: dict[TopicPartition, int] = {}  # the log's size when grabbed
        self.survey_errors: tuple[str, ...] = ()
        # Kafka's LogCleanerManager gauges and KIP-354's PreCleanStats, from the last grab
        self.last_run_ms: int | None = None  # wall clock of the last grab attempt
        self.max_dirty_ratio = 0.0  # of the last grab attempt
        self.last_grab = GrabFigures(0.0, 0, 0, 0)  # of the last grab that returned a log
        self.last_success_ms: int | None = None
        # the grab's order and the snapshot candidates between surveys (``_queue``): None when
        # they must be built again, as a log may have joined or changed
        self._queue: GrabQueue | None = None
        self._snapshot_order: deque[TopicPartition] | None = None

    # --- configuration and scanning ---------------------------------------------------------
    def configure(
        self,
        resolve: Resolve,
        *,
        load_factor: float,
        budget_bytes: int,
        retry: RetryPolicy | None = None,
        workers: int | None = None,
    ) -> None:
        """New topic settings, sizing, retry rule and worker count (SIGHUP); the next scan
        plans with them."""
        self._config = (resolve, load_factor, budget_bytes)
        if retry is not None:
            self.failures.retry = retry
        if workers is not None:
            self.workers = workers
        self._reorder()

    @property
    def metadata(self) -> MetadataCache:
        return self._cache

    def scan(self) -> Survey:
        """Refresh metadata and plan every compacted log at now. Thread-safe; changes no status
        (run it with ``asyncio.to_thread`` and hand the result to ``apply``)."""
        resolve = self._config[0]
        with self._scan_lock:
            epoch = self._epoch
            survey = take_survey(
                self.log_dirs, resolve, self._cache, self._clock(), epoch, self._last_scan
            )
            self._last_scan = survey.partitions
            return survey

    def apply(self, survey: Survey) -> None:
        """Take a survey's figures into the statuses; drop partitions that went away."""
        for tp, entry in survey.partitions.items():
            self._apply_one(tp, entry, survey.epoch)
        for tp in list(self._statuses):
            st = self._statuses[tp]
            gone = tp not in survey.partitions and st.log_dir not in survey.unlisted_log_dirs
            if gone and st.state not in (IN_PROGRESS, ABORTED):
                self._forget(tp)
        for tp, (log_dir, _) in list(self._restored.items()):
            if log_dir not in survey.unlisted_log_dirs:  # listed, and the partition not in it
                del self._restored[tp]
                log.warning(
                    "a recorded pause names a partition the log dir does not hold; dropped",
                    partition=str(tp),
                    log_dir=str(log_dir),
                )
        for error in survey.errors:
            if error not in self.survey_errors:  # once while it lasts, not every survey
                log.error("log dir survey problem", error=error)
        self.survey_errors = survey.errors
        self._plan_leads()
        self._reorder()

    def _reorder(self) -> None:
        """Logs may have joined the candidates or changed: the next grab orders them afresh."""
        self._queue = None
        self._snapshot_order = None

    def _drop(self, tp: TopicPartition) -> None:
        """``tp`` stopped being a candidate (taken, reserved, paused)."""
        if self._queue is not None:
            self._queue.discard(tp)

    def _plan_leads(self) -> None:
        """Each log's lead from its expected time and the logs due before it (``queue_leads``),
        over the logs that may be cleaned (compacted, idle, with a deadline)."""
        logs = [
            (st.tp, st.deadline_ms, self.times.estimate_s(st.tp, st.size_bytes))
            for st, _, _ in self._maintainable()
            if st.deadline_ms is not None
        ]
        self._lead_ms = queue_leads(logs, self.workers)
        for st in self._statuses.values():
            st.lead_ms = self._lead_ms.get(st.tp, st.expected_clean_ms)

    def _forget(self, tp: TopicPartition) -> None:
        del self._statuses[tp]
        for found in (self._surveyed, self._released, self._grabbed_bytes):
            found.pop(tp, None)
        self.times.forget(tp)
        for marks in (self._stale, self._config_bad):
            marks.discard(tp)
        self._settings.pop(tp, None)
        self.failures.forget(tp)

    def _apply_one(self, tp: TopicPartition, entry: PartitionSurvey, epoch: int) -> None:
        st = self._statuses.get(tp)
        if st is None:
            st = self._statuses[tp] = PartitionStatus(tp, entry.log_dir, entry.directory)
            restored = self._restored.pop(tp, None)
            if restored is not None:  # paused before it can be grabbed, even once
                self._add_pauses(st, restored[1])
        busy = st.state in (IN_PROGRESS, ABORTED)
        if busy or self._released.get(tp, -1) > epoch:
            return  # the survey may predate the worker's changes: wait for a fresh one
        self._stale.discard(tp)
        self._surveyed[tp] = entry
        st.size_bytes = entry.meta.size_bytes
        if entry.settings is not None:
            before = self._settings.get(tp)
            self._settings[tp] = entry.settings
            if before is not None and before != entry.settings:
                self._settings_changed(st)
        if entry.config_error is not None:
            if tp not in self._config_bad:
                log.error("topic config invalid", partition=str(tp), error=entry.config_error)
            self._config_bad.add(tp)
            st.last_error = entry.config_error
            return
        if tp in self._config_bad:
            self._config_bad.discard(tp)
            st.last_error = None
        st.compacted = entry.compacted
        meta = entry.meta
        if meta.error is None:
            self.failures.read_ok(st, entry.fingerprint)
        elif self.failures.read_failed(
            st,
            meta.error,
            entry.fingerprint,
            self._clock(),
            file=meta.error_file,
            position=meta.error_position,
        ):
            self.totals = dataclasses.replace(self.totals, failures=self.totals.failures + 1)
        st.uncleanable = self.failures.uncleanable(tp)
        self._take_plan(st, entry.plan)
        st.expected_clean_ms = self.times.expected_ms(tp, st.size_bytes) if st.compacted else 0

    def _settings_changed(self, st: PartitionStatus) -> None:
        """The topic's settings differ from those of the last survey (a reload changed them):
        its failures may have been theirs, so it is tried again at once, as after ``resume``
        (KAFKA-19895 proposes the same for Kafka's uncleanable partitions)."""
        if st.failures == 0 and not self.failures.uncleanable(st.tp):
            return
        log.info(
            "topic settings changed; failures cleared",
            partition=str(st.tp),
            failures=st.failures,
            uncleanable=st.uncleanable,
        )
        self.failures.resume(st.tp)
        st.failures, st.retry_at_ms = 0, None
        st.uncleanable = False

    @staticmethod
    def _take_plan(st: PartitionStatus, p: CleaningPlan | None) -> None:
        if p is None:
            st.clean_bytes = st.cleanable_bytes = st.compaction_delay_ms = 0
            st.dirty_ratio = st.must_clean_ratio = 0.0
            st.overdue = st.cleanable = False
            st.deadline_ms = None
            return
        st.clean_bytes, st.cleanable_bytes = p.clean_bytes, p.cleanable_bytes
        st.dirty_ratio, st.must_clean_ratio = p.dirty_ratio, p.must_clean_ratio
        st.compaction_delay_ms = p.compaction_delay_ms
        st.first_dirty_offset = p.first_dirty_offset
        st.first_uncleanable_offset = p.first_uncleanable_offset
        st.overdue, st.cleanable = p.overdue, p.is_cleanable
        st.deadline_ms = p.deadline_ms

    def _leads(self, st: PartitionStatus, settings: TopicSettings) -> Leads:
        """How long before its deadlines the log is cleaned and rolled: its lead at the last
        survey, else its expected cleaning time from its size now."""
        lead = self._lead_ms.get(st.tp)
        if lead is None:
            lead = self.times.expected_ms(st.tp, st.size_bytes)
        return Leads.of(lead, settings)

    # --- grabbing -----------------------------------------------------------------------------
    def _candidates(self, now: int) -> list[tuple[PartitionStatus, PartitionSurvey]]:
        """Kafka's candidates: compacted, no cleaning state, not uncleanable; plus not backing
        off after a failure (unless asked to clean) and planned since their last cleaning."""
        out = []
        for tp, st in self._statuses.items():
            entry = self._surveyed.get(tp)
            if (
                entry is None
                or entry.plan is None
                or entry.settings is None
                or not st.compacted
                or st.state is not IDLE
                or st.uncleanable
                or tp in self._stale
                or tp in self._config_bad
                or tp in self.failures.unreadable
            ):
                continue
            if st.retry_at_ms is not None and st.retry_at_ms > now and not st.clean_requested:
                continue
            out.append((st, entry))
        return out

    def _ordered(self, now: int) -> GrabQueue | None:
        """The candidates in the grab's order (built when they may have changed); None while a
        clean request waits: ``choose`` then ranks them all, as requests go first."""
        queue = self._queue
        if queue is not None and queue.valid_at(now):
            return queue
        self._queue = None
        candidates = self._candidates(now)
        if any(st.clean_requested for st, _ in candidates):
            return None
        leads = {st.tp: self._leads(st, e.settings) for st, e in candidates if e.settings}
        backing_off = (
            st.retry_at_ms
            for st in self._statuses.values()
            if st.retry_at_ms is not None and st.retry_at_ms > now
        )
        plans = (e.plan for _, e in candidates if e.plan is not None)
        self._queue = GrabQueue(plans, leads, now, min(backing_off, default=None))
        return self._queue

    def _choose(self, now: int) -> tuple[TopicPartition | None, GrabFigures, bool]:
        """The log to grab, the grab's figures, and whether an admin asked for it."""
        queue = self._ordered(now)
        if queue is not None:
            return (*queue.choose(now), False)
        candidates = self._candidates(now)
        plans = [e.plan for _, e in candidates if e.plan is not None]
        requested = {st.tp for st, _ in candidates if st.clean_requested}
        leads = {st.tp: self._leads(st, e.settings) for st, e in candidates if e.settings}
        chosen, figures = choose(plans, requested, leads, now)
        return chosen, figures, chosen in requested

    def grab(self) -> Grab | None:
        """The next log to clean, marked in progress; None when nothing is cleanable."""
        now = self._clock()
        self.last_run_ms = now
        chosen, figures, requested = self._choose(now)
        self.max_dirty_ratio = figures.max_dirty_ratio
        if chosen is None:
            return None
        self.last_grab = figures  # Kafka keeps the PreCleanStats of grabs that found a log
        st, entry = self._statuses[chosen], self._surveyed[chosen]
        assert entry.plan is not None
        assert entry.settings is not None
        st.state = IN_PROGRESS
        st.clean_requested = False
        self._stale.add(chosen)
        self._drop(chosen)
        self._grabbed_bytes[chosen] = st.size_bytes
        _, load_factor, budget = self._config
        return Grab(
            tp=chosen,
            directory=entry.directory,
            log_dir=entry.log_dir,
            settings=entry.settings,
            plan=entry.plan,
            map_bytes=map_bytes_for(
                entry.dirty_records, entry.settings.strategy, load_factor, budget
            ),
            dirty_records=entry.dirty_records,
            max_compaction_delay_ms=figures.max_compaction_delay_ms,
            requested=requested,
        )

    @property
    def logs_compacted_by_max_lag(self) -> int:
        """KIP-354's num-logs-compacted-by-max-compaction-lag: of the last grab with a log."""
        return self.last_grab.logs_compacted_by_max_lag

    @property
    def last_grab_max_compaction_delay_ms(self) -> int:
        return self.last_grab.max_compaction_delay_ms

    # --- a worker lets go --------------------------------------------------------------------
    def _let_go(self, tp: TopicPartition) -> PartitionStatus | None:
        """In progress -> idle; aborted -> paused (Kafka's doneCleaning), or idle if resumed."""
        self._grabbed_bytes.pop(tp, None)
        self._drop(tp)
        st = self._statuses.get(tp)
        if st is None:
            return None
        if st.state in (IN_PROGRESS, ABORTED):
            st.state = PAUSED if st.paused_count > 0 else IDLE
        self._epoch += 1
        self._released[tp] = self._epoch
        self._stale.add(tp)
        return st

    def done(self, tp: TopicPartition, result: CleanOutcome) -> None:
        """A successful clean: history, totals, and no more failures or uncleanable mark."""
        grabbed = self._grabbed_bytes.get(tp)
        st = self._let_go(tp)
        now = self._clock()
        self.totals = add_clean(self.totals, result.stats, spark=result.engine == "spark")
        self.last_success_ms = now
        if st is None:
            return
        self.times.observe(tp, st.size_bytes if grabbed is None else grabbed, result.seconds)
        st.cleanings += 1
        st.last_clean_ms, st.last_clean_seconds = now, result.seconds
        st.last_clean_engine = result.engine
        st.first_dirty_offset = result.end_offset
        st.failures, st.retry_at_ms, st.last_error = 0, None, None
        self.failures.clean_ok(tp)
        st.uncleanable = self.failures.uncleanable(tp)

    def failed(self, tp: TopicPartition, error: str, *, engine: str = "local") -> dict[str, Any]:
        """A failed clean: retry after ``backoff * 2**(failures-1)`` (capped), and after
        ``cleanerd.retry.attempts`` retries mark it uncleanable until its files change or
        resume. Returns what happens next (failures, retry_in_ms or uncleanable) for the log."""
        st = self._let_go(tp)
        t = self.totals
        self.totals = dataclasses.replace(
            t, failures=t.failures + 1, spark_failures=t.spark_failures + (engine == "spark")
        )
        if st is None:
            return {}
        outcome = self.failures.clean_failed(st, error, self._clock())
        st.uncleanable = self.failures.uncleanable(tp)
        return outcome

    def aborted(self, tp: TopicPartition) -> None:
        """The worker stopped early (pause, abort, shutdown): no success, no failure."""
        self._let_go(tp)

    def should_abort(self, tp: TopicPartition) -> bool:
        """Whether the cleaning of ``tp`` was aborted (a pause); the worker pool then sets that
        cleaning's own abort signal, which its thread reads, so no thread reads this dict."""
        st = self._statuses.get(tp)
        return st is not None and st.state is ABORTED

    # --- upkeep: idle rolls and retention sweeps ----------------------------------------------
    def settings_for(self, tp: TopicPartition) -> TopicSettings:
        """The topic settings of the partition's last survey (KeyError when it has none)."""
        settings = self._surveyed[tp].settings
        if settings is None:
            raise KeyError(f"{tp}: its topic config did not resolve")
        return settings

    def _maintainable(self) -> list[tuple[PartitionStatus, LogMeta, TopicSettings]]:
        """Compacted, idle, readable logs whose survey is current."""
        found = []
        for tp in sorted(self._statuses):
            one = self._maintainable_one(tp)
            if one is not None:
                found.append(one)
        return found

    def _maintainable_one(
        self, tp: TopicPartition
    ) -> tuple[PartitionStatus, LogMeta, TopicSettings] | None:
        st, entry = self._statuses.get(tp), self._surveyed.get(tp)
        if st is None or entry is None or entry.settings is None or entry.meta.log is None:
            return None
        if tp in self.failures.unreadable:
            return None
        if st.compacted and st.state is IDLE and not st.uncleanable and tp not in self._stale:
            return st, entry.meta.log, entry.settings
        return None

    def rolls(self) -> list[Roll]:
        """Active segments whose roll instant has passed: their deadline (first batch +
        ``max.compaction.lag.ms``) minus the expected cleaning time and ``min.compaction.lag.ms``
        (``Leads``). Rolled, the segment is cleaned by its deadline; an idle topic's too (Kafka
        rolls only on an append)."""
        now = self._clock()
        found = []
        for st, lm, ts in self._maintainable():
            leads = self._leads(st, ts)
            if roll_due(lm, ts, leads, now):
                lag = ts.cleaner.max_compaction_lag_ms
                base = lm.active_segment.base_offset
                found.append(Roll(st.tp, st.directory, base, lag, leads.roll_ms))
        return found

    def next_wake_ms(self) -> int | None:
        """The next instant, after now, at which a log falls due or an active segment's roll
        does (None: none will without new data); the daemon's loop sleeps until then rather
        than a full backoff. Instants already passed are not waited for: those logs are
        grabbed, rolled, or wait for what holds them (a worker, an open transaction)."""
        now = self._clock()
        times = []
        for st, lm, ts in self._maintainable():
            entry = self._surveyed[st.tp]
            leads = self._leads(st, ts)
            at_due = None if entry.plan is None else due_at_ms(entry.plan, leads)
            for at in (at_due, roll_at_ms(lm, ts, leads)):
                if at is not None and at > now:
                    times.append(at)
        return min(times, default=None)

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
        self._drop(tp)
        return True

    def release(self, tp: TopicPartition) -> None:
        """End a ``reserve`` (a pause meanwhile leaves it paused)."""
        self._let_go(tp)

    # --- snapshots (KIP-630) ------------------------------------------------------------------
    def due_waiting(self) -> bool:
        """A due log (overdue, or nearly: ``_deadlines``) waits for a worker: it goes before
        any snapshot."""
        now = self._clock()
        queue = self._ordered(now)
        if queue is not None:
            return queue.any_due(now)
        return any(
            e.plan is not None
            and e.settings is not None
            and is_due(e.plan, self._leads(st, e.settings), now)
            for st, e in self._candidates(now)
        )

    def _snapshot_due(self, st: PartitionStatus, meta: LogMeta, settings: TopicSettings) -> bool:
        # a log waiting to be cleaned is cleaned first: the snapshot then reads less, and a
        # busy partition's snapshots never keep its cleanings (and truncation) waiting
        snapshot_end = self._surveyed[st.tp].snapshot_end
        return not st.cleanable and snapshot_due(meta, settings, snapshot_end)

    def grab_snapshot(self) -> SnapshotGrab | None:
        """A partition due a snapshot, marked in progress; the worker ``release``s it. The due
        ones are listed once per survey, by partition (what makes one due changes only with a
        survey); one that stopped being maintainable leaves the list."""
        order = self._snapshot_order
        if order is None:
            order = self._snapshot_order = deque(
                st.tp for st, meta, ts in self._maintainable() if self._snapshot_due(st, meta, ts)
            )
        while order:
            one = self._maintainable_one(order[0])
            order.popleft()
            if one is None:
                continue
            st, meta, settings = one
            _, load_factor, budget = self._config
            st.state = IN_PROGRESS
            self._stale.add(st.tp)
            self._drop(st.tp)
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

    # --- admin ---------------------------------------------------------------------------------
    def pause(self, tp: TopicPartition) -> None:
        """Kafka's abortAndPauseCleaning, counted: an in-progress log is aborted (paused when
        its worker lets go). An unknown partition is ignored."""
        st = self._statuses.get(tp)
        if st is not None:
            self._add_pauses(st, 1)

    def _add_pauses(self, st: PartitionStatus, count: int) -> None:
        self._drop(st.tp)
        st.paused_count += count
        if st.state is IN_PROGRESS:
            st.state = ABORTED
        elif st.state is IDLE:
            st.state = PAUSED

    def restore_pauses(self, log_dir: Path, pauses: Mapping[TopicPartition, int]) -> None:
        """Pauses recorded in ``log_dir`` by an earlier run. Each applies as soon as a survey
        finds its partition (so at once for a known one); one that a survey listing ``log_dir``
        does not find is dropped with a warning, as a pause goes with its partition."""
        for tp, count in pauses.items():
            st = self._statuses.get(tp)
            if st is None:
                self._restored[tp] = (Path(log_dir), count)
            else:
                self._add_pauses(st, count)

    def pauses(self) -> dict[Path, dict[TopicPartition, int]]:
        """Outstanding pauses to record, by the log dir holding each partition (every log dir
        listed, with no pause for some), restored ones not found yet included."""
        out: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, (log_dir, count) in self._restored.items():
            out.setdefault(log_dir, {})[tp] = count
        for tp, st in self._statuses.items():
            if st.paused_count > 0:
                out.setdefault(st.log_dir, {})[tp] = st.paused_count
        return out

    def resume(self, tp: TopicPartition) -> None:
        """Undo one pause (paused(n) -> paused(n-1), idle at 0); also clears the uncleanable
        mark, failures and backoff (an operator's "try again")."""
        st = self._statuses.get(tp)
        if st is None:
            return
        st.paused_count = max(st.paused_count - 1, 0)
        if st.state is PAUSED and st.paused_count == 0:
            st.state = IDLE
        self.failures.resume(tp)  # the next survey and grab try it again
        st.failures, st.retry_at_ms = 0, None
        st.uncleanable = False
        self._reorder()

    def request_clean(self, tp: TopicPartition) -> None:
        """Clean at the next grab whatever the ratio (not while paused or uncleanable)."""
        st = self._statuses.get(tp)
        if st is not None:
            st.clean_requested = True
            self._reorder()

    # --- reading ----------------------------------------------------------------------------
    def status(self, tp: TopicPartition) -> PartitionStatus | None:
        st = self._statuses.get(tp)
        return None if st is None else dataclasses.replace(st)

    def live_statuses(self) -> Collection[PartitionStatus]:
        """The records themselves, in no order, for a reader on the loop thread that changes
        none and keeps none past its call (the survey's deadline count, the status line):
        copying every partition's record at every survey cost the loop O(partitions)."""
        return self._statuses.values()

    def statuses(self) -> tuple[PartitionStatus, ...]:
        """Copies, by topic partition."""
        return tuple(dataclasses.replace(self._statuses[tp]) for tp in sorted(self._statuses))
