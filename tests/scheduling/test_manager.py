"""The cleaner manager: KIP-354 grab order, Kafka's cleaning states, retries and uncleanable.

Real log dirs built with ``PartitionLog`` appends and explicit timestamps; the manager's clock
is injected, so backoffs and lags are exact.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cleanerd.compaction import CleanerStats, walk_segment
from cleanerd.format import Record
from cleanerd.scheduling import (
    CleanerManager,
    CleaningState,
    CleanOutcome,
    Grab,
    RetryPolicy,
    _metadata as metadata,
)
from cleanerd.scheduling._sizing import map_bytes_for
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    TopicPartition,
    write_offset_checkpoint,
)
from cleanerd.topics import TopicSettings
from tests.support.scheduling import (
    BUDGET,
    HOUR,
    LAG,
    NOW,
    OLD,
    PER_SEGMENT,
    RECENT,
    Clock,
    _log,
    _settings,
    _tp,
)


def _checkpoints(log_dir: Path, segments_clean: Mapping[str, int]) -> None:
    """Cleaner checkpoints at the base of each topic's given segment number."""
    write_offset_checkpoint(
        log_dir / CLEANER_OFFSET_CHECKPOINT,
        {_tp(t): k * PER_SEGMENT for t, k in segments_clean.items()},
    )


def _manager(
    log_dir: Path, clock: Clock | None = None, retry: RetryPolicy | None = None
) -> CleanerManager:
    return CleanerManager(
        [log_dir], _settings, budget_bytes=BUDGET, clock_ms=clock or Clock(), retry=retry
    )


def _refresh(manager: CleanerManager) -> None:
    manager.apply(manager.scan())


def _state(manager: CleanerManager, topic: str) -> CleaningState:
    status = manager.status(_tp(topic))
    assert status is not None
    return status.state


def _grab(manager: CleanerManager) -> Grab:
    grab = manager.grab()
    assert grab is not None
    return grab


def _outcome(end_offset: int = 0) -> CleanOutcome:
    stats = CleanerStats(clock=lambda: 0.0)
    stats.read_messages(10, 1000)
    stats.recopy_messages(4, 400)
    stats.add(tombstones_expired=1, tombstones_superseded=1)
    return CleanOutcome(stats=stats, end_offset=end_offset, seconds=0.5)


# --- ranking -------------------------------------------------------------------------------------
@pytest.fixture
def ranked_dir(tmp_path: Path) -> Path:
    """Ten inactive segments each. a: dirty 0.5, must-clean 0.3; b: dirty 0.8, must-clean 0.6;
    c: dirty 0.9; d: dirty 0.7; e: dirty 0.2 (below min.cleanable.dirty.ratio 0.5)."""
    recent = [RECENT] * 10
    _log(tmp_path, "a", recent[:5] + [OLD] * 3 + recent[:2])
    _log(tmp_path, "b", recent[:2] + [OLD] * 6 + recent[:2])
    for topic in "cde":
        _log(tmp_path, topic, recent)
    _checkpoints(tmp_path, {"a": 5, "b": 2, "c": 1, "d": 3, "e": 8})
    return tmp_path


def test_overdue_first_by_must_clean_ratio_then_dirty_ratio(ranked_dir: Path) -> None:
    manager = _manager(ranked_dir)
    _refresh(manager)
    status = {s.tp.topic: s for s in manager.statuses()}
    assert status["a"].must_clean_ratio == pytest.approx(0.3)
    assert status["b"].must_clean_ratio == pytest.approx(0.6)
    assert status["c"].dirty_ratio == pytest.approx(0.9)
    assert not status["e"].cleanable
    first = _grab(manager)
    assert first.tp == _tp("b")
    assert first.max_compaction_delay_ms == LAG
    assert first.dirty_records == 8 * PER_SEGMENT
    assert first.map_bytes == map_bytes_for(8 * PER_SEGMENT, first.settings.strategy, 0.9, BUDGET)
    assert manager.max_dirty_ratio == pytest.approx(0.9)
    assert manager.logs_compacted_by_max_lag == 2
    assert manager.last_run_ms == NOW
    order = [first.tp.topic] + [_grab(manager).tp.topic for _ in range(3)]
    assert order == ["b", "a", "c", "d"]
    assert manager.grab() is None  # e is below the ratio, the others are in progress
    assert {t: _state(manager, t) for t in "abcde"} == {
        **dict.fromkeys("abcd", CleaningState.IN_PROGRESS),
        "e": CleaningState.IDLE,
    }


def test_clean_requested_is_taken_below_the_ratio(ranked_dir: Path) -> None:
    manager = _manager(ranked_dir)
    _refresh(manager)
    manager.request_clean(_tp("e"))
    manager.request_clean(_tp("nope"))  # unknown: ignored
    grab = _grab(manager)
    assert (grab.tp, grab.requested) == (_tp("e"), True)
    status = manager.status(_tp("e"))
    assert status is not None
    assert not status.clean_requested


def test_not_compacted_is_listed_never_grabbed(tmp_path: Path) -> None:
    _log(tmp_path, "plain", [RECENT] * 3)
    _log(tmp_path, "bad", [RECENT] * 3)
    _log(tmp_path, "ok", [RECENT] * 3)
    manager = _manager(tmp_path)
    _refresh(manager)
    status = {s.tp.topic: s for s in manager.statuses()}
    assert set(status) == {"plain", "bad", "ok"}
    assert not status["plain"].compacted
    assert status["plain"].size_bytes > 0
    assert status["bad"].last_error is not None
    assert "min.cleanable.dirty.ratio" in status["bad"].last_error
    assert manager.metadata.walks == 4  # only the compacted log was walked
    assert _grab(manager).tp == _tp("ok")
    assert manager.grab() is None


def test_bad_topic_config_error_clears_when_fixed(tmp_path: Path) -> None:
    _log(tmp_path, "bad", [RECENT] * 3)
    manager = _manager(tmp_path)
    _refresh(manager)
    assert manager.grab() is None
    manager.configure(lambda topic: _settings("ok"), load_factor=0.9, budget_bytes=BUDGET)
    _refresh(manager)
    status = manager.status(_tp("bad"))
    assert status is not None
    assert status.last_error is None
    assert _grab(manager).tp == _tp("bad")


def test_partition_dir_gone_is_dropped_unless_in_progress(tmp_path: Path) -> None:
    _log(tmp_path, "x", [RECENT] * 3)
    _log(tmp_path, "y", [RECENT] * 3)
    manager = _manager(tmp_path)
    _refresh(manager)
    grabbed = _grab(manager).tp
    other = ({_tp("x"), _tp("y")} - {grabbed}).pop()
    for tp in (grabbed, other):
        shutil.rmtree(tmp_path / tp.dir_name)
    _refresh(manager)
    assert [s.tp for s in manager.statuses()] == [grabbed]
    manager.aborted(grabbed)
    _refresh(manager)
    assert manager.statuses() == ()


# --- states ------------------------------------------------------------------------------------
@pytest.fixture
def one(tmp_path: Path) -> CleanerManager:
    """A manager over one dirty compacted log, ``t``."""
    _log(tmp_path, "t", [RECENT] * 3)
    manager = _manager(tmp_path, Clock())
    _refresh(manager)
    return manager


def test_pause_twice_needs_resume_twice(one: CleanerManager) -> None:
    tp = _tp("t")
    one.pause(tp)
    one.pause(tp)
    assert _state(one, "t") is CleaningState.PAUSED
    assert one.grab() is None
    one.resume(tp)
    assert _state(one, "t") is CleaningState.PAUSED
    assert one.grab() is None
    one.resume(tp)
    resumed = one.status(tp)
    assert resumed is not None
    assert (resumed.state, resumed.paused_count) == (CleaningState.IDLE, 0)
    assert _grab(one).tp == tp
    one.pause(_tp("nope"))  # unknown: ignored
    assert one.status(_tp("nope")) is None


def test_restored_pauses_hold_from_the_first_survey_so_no_grab_sees_them(
    tmp_path: Path,
) -> None:
    """Pauses recorded by an earlier run, handed over before the first survey: the overdue log
    that would be grabbed first is paused, with its count, and never grabbed."""
    _log(tmp_path, "t", [OLD] * 3)
    _log(tmp_path, "u", [RECENT] * 3)
    manager = _manager(tmp_path)
    manager.restore_pauses(tmp_path, {_tp("t"): 2})
    _refresh(manager)
    status = manager.status(_tp("t"))
    assert status is not None
    assert (status.state, status.paused_count) == (CleaningState.PAUSED, 2)
    assert _grab(manager).tp == _tp("u")
    assert manager.grab() is None
    assert manager.pauses() == {tmp_path: {_tp("t"): 2}}
    manager.resume(_tp("t"))
    assert manager.pauses() == {tmp_path: {_tp("t"): 1}}
    manager.resume(_tp("t"))
    assert manager.pauses() == {tmp_path: {}}


def test_a_restored_pause_of_a_known_partition_adds_to_its_pauses(one: CleanerManager) -> None:
    one.pause(_tp("t"))
    one.restore_pauses(one.log_dirs[0], {_tp("t"): 1})
    status = one.status(_tp("t"))
    assert status is not None
    assert (status.state, status.paused_count) == (CleaningState.PAUSED, 2)


def test_a_pause_goes_with_its_partition(tmp_path: Path) -> None:
    """A recorded pause of a partition the listed log dir does not hold is dropped (said once);
    a paused partition whose dir goes away takes its pause along."""
    _log(tmp_path, "t", [RECENT] * 3)
    manager = _manager(tmp_path)
    manager.restore_pauses(tmp_path, {_tp("gone"): 1, _tp("t"): 1})
    assert manager.pauses() == {tmp_path: {_tp("gone"): 1, _tp("t"): 1}}
    with capture_logs() as logs:
        _refresh(manager)
        _refresh(manager)
    assert manager.pauses() == {tmp_path: {_tp("t"): 1}}
    dropped = [e for e in logs if e["event"].startswith("a recorded pause names a partition")]
    assert [(e["partition"], e["log_level"]) for e in dropped] == [("gone-0", "warning")]
    shutil.rmtree(tmp_path / _tp("t").dir_name)
    _refresh(manager)
    assert manager.pauses() == {tmp_path: {}}


def test_a_restored_pause_waits_while_its_log_dir_cannot_be_listed(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _log(first, "t", [RECENT] * 3)
    manager = CleanerManager([first, second], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    manager.restore_pauses(second, {_tp("u"): 1})
    _refresh(manager)  # b does not exist: it cannot be listed, its partitions are unknown
    assert manager.pauses() == {first: {}, second: {_tp("u"): 1}}
    _log(second, "u", [OLD] * 3)
    _refresh(manager)
    assert _state(manager, "u") is CleaningState.PAUSED
    assert _grab(manager).tp == _tp("t")
    assert manager.pauses() == {first: {}, second: {_tp("u"): 1}}


def test_pause_in_progress_aborts_then_pauses_on_release(one: CleanerManager) -> None:
    tp = _tp("t")
    _grab(one)
    assert not one.should_abort(tp)
    one.pause(tp)
    assert _state(one, "t") is CleaningState.ABORTED
    assert one.should_abort(tp)
    one.aborted(tp)
    assert _state(one, "t") is CleaningState.PAUSED
    assert not one.should_abort(tp)
    one.resume(tp)
    assert _state(one, "t") is CleaningState.IDLE


def test_done_while_aborted_still_pauses(one: CleanerManager) -> None:
    tp = _tp("t")
    _grab(one)
    one.pause(tp)
    one.done(tp, _outcome())
    status = one.status(tp)
    assert status is not None
    assert (status.state, status.cleanings) == (CleaningState.PAUSED, 1)


def test_done_records_history_and_totals(one: CleanerManager) -> None:
    tp = _tp("t")
    _grab(one)
    one.done(tp, _outcome(end_offset=12))
    status = one.status(tp)
    assert status is not None
    assert (status.state, status.cleanings, status.last_clean_ms) == (CleaningState.IDLE, 1, NOW)
    assert (status.last_clean_seconds, status.first_dirty_offset) == (0.5, 12)
    totals = one.totals
    assert (totals.cleanings, totals.bytes_read, totals.bytes_written) == (1, 1000, 400)
    assert (totals.records_removed, totals.tombstones_removed) == (6, 2)
    assert one.grab() is None  # its plan is from before the clean: wait for the next scan
    _refresh(one)
    assert one.grab() is not None
    assert one.last_success_ms == NOW


# --- failures ----------------------------------------------------------------------------------
RETRY = RetryPolicy(attempts=2, backoff_ms=1000, backoff_max_ms=1500)


def test_retry_with_backoff_then_uncleanable(tmp_path: Path) -> None:
    _log(tmp_path, "t", [RECENT] * 3)
    clock = Clock()
    manager = _manager(tmp_path, clock, RETRY)
    tp = _tp("t")
    waits = []
    for _ in range(2):
        _refresh(manager)
        _grab(manager)
        assert "retry_in_ms" in manager.failed(tp, "boom")
        status = manager.status(tp)
        assert status is not None
        assert status.retry_at_ms is not None
        waits.append(status.retry_at_ms - clock.now)
        _refresh(manager)
        clock.now += waits[-1] - 1
        assert manager.grab() is None  # backing off
        clock.now += 1
    assert waits == [1000, 1500]  # doubled, capped
    _grab(manager)
    assert manager.failed(tp, "boom again") == {"failures": 3, "uncleanable": True}
    status = manager.status(tp)
    assert status is not None
    assert (status.uncleanable, status.failures, status.last_error) == (True, 3, "boom again")
    assert manager.totals.failures == 3
    clock.now += 10 * HOUR
    _refresh(manager)
    assert manager.grab() is None
    assert [s.tp for s in manager.statuses() if s.uncleanable] == [tp]


def test_request_clean_skips_the_backoff(one: CleanerManager) -> None:
    tp = _tp("t")
    _grab(one)
    one.failed(tp, "boom")
    _refresh(one)
    assert one.grab() is None
    one.request_clean(tp)
    assert _grab(one).tp == tp


def _make_uncleanable(manager: CleanerManager, tp: TopicPartition) -> None:
    _grab(manager)
    manager.failures.retry = RetryPolicy(attempts=0, backoff_ms=0, backoff_max_ms=0)
    manager.failed(tp, "boom")
    status = manager.status(tp)
    assert status is not None
    assert status.uncleanable


def test_uncleanable_cleared_when_files_change(tmp_path: Path) -> None:
    log = _log(tmp_path, "t", [RECENT] * 3)
    manager = _manager(tmp_path)
    tp = _tp("t")
    _refresh(manager)
    _make_uncleanable(manager, tp)
    _refresh(manager)  # takes the files' fingerprint as the failure left them
    _refresh(manager)
    log.append([Record(0, RECENT, b"more", b"v")])  # appends to the active segment: no change
    _refresh(manager)
    assert manager.grab() is None
    log.roll()
    _refresh(manager)
    status = manager.status(tp)
    assert status is not None
    assert (status.uncleanable, status.failures) == (False, 0)
    assert _grab(manager).tp == tp


def test_resume_clears_uncleanable(one: CleanerManager) -> None:
    tp = _tp("t")
    _make_uncleanable(one, tp)
    _refresh(one)
    one.resume(tp)
    resumed = one.status(tp)
    assert resumed is not None
    assert (resumed.uncleanable, resumed.failures, resumed.state) == (
        False,
        0,
        CleaningState.IDLE,
    )
    assert _grab(one).tp == tp


def test_a_topic_settings_change_clears_uncleanable_and_failures(tmp_path: Path) -> None:
    """A reload that changes a topic's settings (SIGHUP: ``configure`` with a new resolver)
    clears its partitions' uncleanable mark, failure count and backoff at the next survey, as
    KAFKA-19895 proposes for Kafka; a reload that leaves them as they were, and the other
    topics, keep theirs."""
    for topic in ("t", "u"):
        _log(tmp_path, topic, [RECENT] * 3)
    tuned: dict[str, TopicSettings] = {}

    def resolve(topic: str) -> TopicSettings:
        return tuned.get(topic) or _settings(topic)

    clock = Clock()
    manager = CleanerManager([tmp_path], resolve, budget_bytes=BUDGET, clock_ms=clock, retry=RETRY)

    def reload() -> None:
        manager.configure(resolve, load_factor=0.9, budget_bytes=BUDGET)
        _refresh(manager)

    def figures(topic: str) -> tuple[bool, int, bool]:
        st = manager.status(_tp(topic))
        assert st is not None
        return st.uncleanable, st.failures, st.retry_at_ms is not None

    _refresh(manager)
    manager.failures.retry = RetryPolicy(attempts=0, backoff_ms=0, backoff_max_ms=0)
    first = _grab(manager).tp
    manager.failed(first, "boom")  # uncleanable at once
    manager.failures.retry = RETRY
    _refresh(manager)
    second = _grab(manager).tp
    manager.failed(second, "boom")  # one failure, backing off
    assert {first, second} == {_tp("t"), _tp("u")}
    marked, failing = first.topic, second.topic
    assert figures(marked) == (True, 1, False)
    assert figures(failing) == (False, 1, True)

    reload()  # same settings, new objects: nothing changes
    assert (figures(marked), figures(failing)) == ((True, 1, False), (False, 1, True))
    assert manager.grab() is None

    changed = {"cleanup.policy": "compact", "max.compaction.lag.ms": LAG}
    tuned[marked] = TopicSettings.from_kafka({**changed, "min.cleanable.dirty.ratio": 0.3})
    with capture_logs() as logs:
        reload()
    assert figures(marked) == (False, 0, False)
    assert figures(failing) == (False, 1, True)  # another topic: untouched
    assert [e["partition"] for e in logs if "settings changed" in e["event"]] == [f"{marked}-0"]
    assert _grab(manager).tp == _tp(marked)

    tuned[failing] = TopicSettings.from_kafka({**changed, "delete.retention.ms": HOUR})
    reload()
    assert figures(failing) == (False, 0, False)  # no backoff left: grabbed now
    assert _grab(manager).tp == _tp(failing)


def test_corrupt_partition_is_isolated(tmp_path: Path) -> None:
    bad = _log(tmp_path, "broken", [RECENT] * 3)
    _log(tmp_path, "good", [RECENT] * 3)
    path = bad.segments[1].log_path
    original = path.read_bytes()
    path.write_bytes(original[:20] + b"\xff" * 8 + original[28:])  # garbage in the first header
    manager = _manager(tmp_path, retry=RetryPolicy(attempts=0))  # no retries: at once
    survey = manager.scan()
    assert survey.partitions[_tp("broken")].read_error is not None
    assert survey.partitions[_tp("good")].plan is not None
    manager.apply(survey)
    status = manager.status(_tp("broken"))
    assert status is not None
    assert (status.uncleanable, status.failures, manager.totals.failures) == (True, 1, 1)
    assert status.cleanable_bytes > 0  # Kafka's uncleanable-bytes still shows
    assert status.last_error is not None
    assert path.name in status.last_error
    assert _grab(manager).tp == _tp("good")
    assert manager.grab() is None
    path.write_bytes(original)  # repaired
    _refresh(manager)
    status = manager.status(_tp("broken"))
    assert status is not None
    assert (status.uncleanable, status.last_error) == (False, None)
    assert _grab(manager).tp == _tp("broken")


# --- other work ----------------------------------------------------------------------------------
def test_rolls_are_overdue_active_segments(tmp_path: Path) -> None:
    _log(tmp_path, "idle", [RECENT], active=OLD)
    _log(tmp_path, "busy", [RECENT], active=RECENT)
    _log(tmp_path, "empty", [RECENT], active=None)
    _log(tmp_path, "plain", [RECENT], active=OLD)
    manager = _manager(tmp_path)
    _refresh(manager)
    assert [s.tp.topic for s in manager.rolls()] == ["idle"]
    manager.pause(_tp("idle"))
    assert manager.rolls() == []


def test_deletable_lists_compact_delete_logs_due_for_retention(tmp_path: Path) -> None:
    _log(tmp_path, "cd-old", [OLD, RECENT])
    _log(tmp_path, "cd-new", [NOW, NOW], active=NOW)
    _log(tmp_path, "compact-old", [OLD, RECENT])
    manager = _manager(tmp_path)
    _refresh(manager)
    assert [s.tp.topic for s in manager.deletable()] == ["cd-old"]
    tp = _tp("cd-old")
    assert manager.settings_for(tp).retention.retention_ms == HOUR
    assert manager.reserve(tp)
    assert not manager.reserve(tp)
    assert _state(manager, "cd-old") is CleaningState.IN_PROGRESS
    manager.pause(tp)
    manager.release(tp)
    assert _state(manager, "cd-old") is CleaningState.PAUSED
    assert manager.deletable() == []


def test_map_bytes_for_sizes_by_records_with_a_floor_and_the_budget_cap() -> None:
    offset = TopicSettings.from_kafka({}).strategy
    versioned = TopicSettings.from_kafka({"compaction.strategy": "timestamp"}).strategy
    assert map_bytes_for(0, offset, 0.9, BUDGET) == 1024 * 24
    assert map_bytes_for(9000, offset, 0.9, 1 << 30) == 10_001 * 24
    assert map_bytes_for(9000, versioned, 0.9, 1 << 30) == 10_001 * 32
    assert map_bytes_for(10**9, offset, 0.9, BUDGET) == BUDGET
    with pytest.raises(ValueError, match="load factor"):
        map_bytes_for(1, offset, 0.0, BUDGET)


def test_clean_outcome_from_a_job_result() -> None:
    @dataclass(frozen=True)
    class Job:
        stats: CleanerStats
        end_offset: int
        seconds: float
        engine: str = "local"
        segments_deleted: int = 0

    stats = CleanerStats(clock=lambda: 0.0)
    assert CleanOutcome.from_job(Job(stats, 40, 1.5)) == CleanOutcome(stats, 40, 1.5)
    assert CleanOutcome.from_job(Job(stats, 40, 1.5, "spark")).engine == "spark"


def test_spark_cleanings_and_failures_are_counted_apart(one: CleanerManager) -> None:
    """A cleaning the daemon handed to Spark counts in both totals, and says so per partition."""
    tp = _tp("t")
    _grab(one)
    one.failed(tp, "executor lost", engine="spark")
    one.request_clean(tp)
    _refresh(one)
    _grab(one)
    one.done(tp, dataclasses.replace(_outcome(), engine="spark"))
    totals = one.totals
    assert (totals.cleanings, totals.spark_cleanings) == (1, 1)
    assert (totals.failures, totals.spark_failures) == (1, 1)
    status = one.status(tp)
    assert status is not None
    assert status.last_clean_engine == "spark"
    _refresh(one)
    one.request_clean(tp)
    _grab(one)
    one.done(tp, _outcome())
    assert (one.totals.cleanings, one.totals.spark_cleanings) == (2, 1)
    status = one.status(tp)
    assert status is not None
    assert status.last_clean_engine == "local"


# --- survey failures: logged, counted, retried like failed cleanings -----------------------------
def _failed_reads(logs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [line for line in logs if line["event"] == "partition survey failed"]


def test_truncated_segment_is_logged_counted_and_retried_before_uncleanable(
    tmp_path: Path,
) -> None:
    bad = _log(tmp_path, "broken", [RECENT] * 3)
    _log(tmp_path, "good", [RECENT] * 3)
    path = bad.segments[1].log_path
    original = path.read_bytes()
    path.write_bytes(original[:-7])  # a rolled segment cut inside its last batch
    clock = Clock()
    manager = _manager(tmp_path, clock, RETRY)
    tp = _tp("broken")
    with capture_logs() as logs:
        _refresh(manager)
        assert _grab(manager).tp == _tp("good")  # the unreadable one is not cleaned meanwhile
        assert manager.grab() is None
        _refresh(manager)  # backing off: not another attempt
        clock.now += 1000
        _refresh(manager)
        clock.now += 1500
        _refresh(manager)
        clock.now += 10 * HOUR
        _refresh(manager)  # retries used up on these same files: nothing more to say
    failed = _failed_reads(logs)
    assert [(f["failures"], f.get("retry_in_ms"), f.get("uncleanable")) for f in failed] == [
        (1, 1000, None),
        (2, 1500, None),
        (3, None, True),
    ]
    assert {(f["partition"], f["file"], f["log_level"]) for f in failed} == {
        ("broken-0", str(path), "error")
    }
    assert all(isinstance(f["position"], int) and str(path) in str(f["error"]) for f in failed)
    status = manager.status(tp)
    assert status is not None
    assert (status.uncleanable, status.failures, manager.totals.failures) == (True, 3, 3)
    assert status.last_error is not None
    assert path.name in status.last_error
    path.write_bytes(original)  # repaired
    with capture_logs() as logs:
        _refresh(manager)
    assert [line["event"] for line in logs] == ["partition readable again"]
    status = manager.status(tp)
    assert status is not None
    assert (status.uncleanable, status.failures, status.last_error) == (False, 0, None)
    assert _grab(manager).tp == tp


def test_partition_it_cannot_read_is_a_counted_failure_and_resume_retries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _log(tmp_path, "locked", [RECENT] * 3)
    denied = str(bad.segments[0].log_path)
    real_walk = walk_segment

    def walk(base: int, path: Path, **kwargs: Any) -> Any:
        if str(path) == denied:
            raise PermissionError(13, "Permission denied", denied)
        return real_walk(base, path, **kwargs)

    monkeypatch.setattr(metadata, "walk_segment", walk)
    manager = _manager(tmp_path, retry=RetryPolicy(attempts=0))
    tp = _tp("locked")
    with capture_logs() as logs:
        _refresh(manager)
        _refresh(manager)
    failed = _failed_reads(logs)
    assert len(failed) == 1
    assert (failed[0]["file"], failed[0]["position"], failed[0]["uncleanable"]) == (
        denied,
        None,
        True,
    )
    assert "Permission denied" in str(failed[0]["error"])
    status = manager.status(tp)
    assert status is not None
    assert (status.uncleanable, status.failures, manager.totals.failures) == (True, 1, 1)
    manager.resume(tp)  # an operator's "try again": the next survey is a new attempt
    with capture_logs() as logs:
        _refresh(manager)
    assert [f["failures"] for f in _failed_reads(logs)] == [1]
    assert manager.totals.failures == 2


def test_a_survey_keeps_an_unchanged_partitions_entry_while_its_plan_is_time_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = time.time_ns() + 3600 * 10**9  # every dir settled: unchanged ones are not listed
    monkeypatch.setattr(time, "time_ns", lambda: later)
    kafka_defaults = TopicSettings.from_kafka({"cleanup.policy": "compact"})
    _log(tmp_path, "a", [OLD, OLD])
    _log(tmp_path, "b", [OLD, OLD])  # with max.compaction.lag.ms: its plan moves with time
    resolve = {"a": kafka_defaults, "b": _settings("b")}
    clock = Clock()
    manager = CleanerManager([tmp_path], resolve.__getitem__, budget_bytes=BUDGET, clock_ms=clock)
    first = manager.scan().partitions
    clock.now += 60_000
    second = manager.scan().partitions
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    assert second[a] is first[a]  # nothing planned again
    assert second[b] is not first[b]
    assert second[b].meta is first[b].meta  # the files were not read again
    before, after = first[b].plan, second[b].plan
    assert before is not None
    assert after is not None
    assert after.compaction_delay_ms == before.compaction_delay_ms + 60_000
    resolve["a"] = TopicSettings.from_kafka({"cleanup.policy": "compact"})  # a reload
    third = manager.scan().partitions
    assert third[a] is not second[a]
    assert third[a].plan == second[a].plan
