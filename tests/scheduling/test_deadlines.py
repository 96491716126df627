"""Deadline scheduling: the expected cleaning time learned per partition, the leads it gives,
and the manager acting on them (nearly due logs grabbed first, rolls at the deadline minus the
expected time, the loop's next wake).

The manager's clock is injected (``Clock``) and the log dirs carry exact timestamps, so every
instant is checked to the millisecond.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cleanerd.compaction import CleanerStats
from cleanerd.scheduling import CleanerManager, CleanOutcome
from cleanerd.scheduling._deadlines import (
    DEFAULT_BYTES_PER_SECOND,
    DEFAULT_OVERHEAD_S,
    HISTORY,
    MARGIN_FACTOR,
    MARGIN_S,
    CleaningTimes,
    Leads,
    queue_leads,
)
from cleanerd.storage import CLEANER_OFFSET_CHECKPOINT, TopicPartition, write_offset_checkpoint
from cleanerd.topics import TopicSettings
from tests.support.scheduling import BUDGET, LAG, NOW, PER_SEGMENT, RECENT, Clock, _log, _tp

TP = TopicPartition("t", 0)
MB = 1 << 20


def _outcome(seconds: float) -> CleanOutcome:
    return CleanOutcome(CleanerStats(clock=lambda: 0.0), end_offset=0, seconds=seconds)


def _settings(topic: str) -> TopicSettings:
    """Compacted with ``LAG``; topics named ``minlag*`` also hold records an hour back."""
    kafka: dict[str, object] = {"cleanup.policy": "compact", "max.compaction.lag.ms": LAG}
    if topic.startswith("minlag"):
        kafka["min.compaction.lag.ms"] = 3_600_000
    return TopicSettings.from_kafka(kafka)


def _manager(log_dir: Path, clock: Clock) -> CleanerManager:
    return CleanerManager([log_dir], _settings, budget_bytes=BUDGET, clock_ms=clock)


def _survey(manager: CleanerManager) -> None:
    manager.apply(manager.scan())


def _expected_ms(manager: CleanerManager, topic: str) -> int:
    status = manager.status(_tp(topic))
    assert status is not None
    return status.expected_clean_ms


# --- the expected cleaning time ----------------------------------------------------------------
def test_before_any_cleaning_the_estimate_is_the_conservative_rate() -> None:
    times = CleaningTimes()
    assert times.estimate_s(TP, 0) == DEFAULT_OVERHEAD_S
    assert times.estimate_s(TP, 64 * MB) == pytest.approx(
        DEFAULT_OVERHEAD_S + 64 * MB / DEFAULT_BYTES_PER_SECOND
    )
    # the margin: 1.5 x the estimate + 1 s
    assert times.expected_ms(TP, 0) == round((MARGIN_FACTOR * DEFAULT_OVERHEAD_S + MARGIN_S) * 1000)


def test_the_estimate_is_the_slowest_recent_cleaning_scaled_to_the_bytes() -> None:
    times = CleaningTimes()
    times.observe(TP, 10 * MB, 2.0)
    times.observe(TP, 10 * MB, 0.5)  # a fast one does not hide the slow one
    assert times.estimate_s(TP, 10 * MB) == 2.0
    assert times.estimate_s(TP, 1 * MB) == 2.0  # a smaller log: no faster than seen
    # bytes beyond those a cleaning covered count at the conservative rate
    assert times.estimate_s(TP, 42 * MB) == pytest.approx(2.0 + 32 * MB / DEFAULT_BYTES_PER_SECOND)
    assert times.expected_ms(TP, 10 * MB) == 4_000  # 1.5 x 2 s + 1 s
    # per partition: another one has learned nothing
    assert times.estimate_s(TopicPartition("u", 0), 0) == DEFAULT_OVERHEAD_S


def test_old_cleanings_are_forgotten() -> None:
    times = CleaningTimes()
    times.observe(TP, MB, 9.0)
    for _ in range(HISTORY - 1):
        times.observe(TP, MB, 1.0)
    assert times.estimate_s(TP, MB) == 9.0
    times.observe(TP, MB, 1.0)  # the slow one falls out of the window
    assert times.estimate_s(TP, MB) == 1.0
    times.forget(TP)
    assert times.estimate_s(TP, 0) == DEFAULT_OVERHEAD_S


def test_logs_due_together_queue_for_the_workers() -> None:
    """Three logs of 2 s cleanings (3 s with the factor), due at the same instant: on one
    worker the first must start 9 s before, on two the last two share the workers' time."""
    logs = [(TopicPartition(t, 0), 100_000, 2.0) for t in "abc"]
    margin = round(MARGIN_S * 1000)
    alone = queue_leads(logs[:1], 1)
    assert alone == {TopicPartition("a", 0): 3_000 + margin}
    one = queue_leads(logs, 1)
    # backwards from the last in order (c): it runs last, b before it, a first
    assert [one[TopicPartition(t, 0)] - margin for t in "cba"] == [3_000, 6_000, 9_000]
    two = queue_leads(logs, 2)
    assert [two[TopicPartition(t, 0)] - margin for t in "cba"] == [3_000, 4_500, 6_000]
    # a log due much later takes nothing from the earlier ones
    far = queue_leads([*logs, (TopicPartition("z", 0), 200_000, 2.0)], 1)
    assert far[TopicPartition("a", 0)] == one[TopicPartition("a", 0)]
    assert far[TopicPartition("z", 0)] == 3_000 + margin


def test_leads_are_capped_at_half_the_lag_and_the_roll_adds_the_min_lag() -> None:
    plain = TopicSettings.from_kafka({"cleanup.policy": "compact", "max.compaction.lag.ms": 10_000})
    assert Leads.of(2_000, plain) == Leads(clean_ms=2_000, roll_ms=2_000)
    assert Leads.of(60_000, plain) == Leads(clean_ms=5_000, roll_ms=5_000)
    held = TopicSettings.from_kafka(
        {
            "cleanup.policy": "compact",
            "max.compaction.lag.ms": 10_000,
            "min.compaction.lag.ms": 1_000,
        }
    )
    assert Leads.of(2_000, held) == Leads(clean_ms=2_000, roll_ms=3_000)


# --- the grab -----------------------------------------------------------------------------------
@pytest.fixture
def near_and_dirty(tmp_path: Path) -> Path:
    """``near``: one dirty segment of ten (ratio 0.1, below min.cleanable.dirty.ratio), whose
    first record reaches the lag at NOW + 500 ms. ``dirty``: nine dirty segments of ten (0.9),
    written an hour ago, its deadline hours away."""
    _log(tmp_path, "near", [RECENT] * 9 + [NOW - LAG + 500])
    _log(tmp_path, "dirty", [RECENT] * 10)
    write_offset_checkpoint(
        tmp_path / CLEANER_OFFSET_CHECKPOINT,
        {_tp("near"): 9 * PER_SEGMENT, _tp("dirty"): 1 * PER_SEGMENT},
    )
    return tmp_path


def test_a_nearly_due_log_is_grabbed_before_a_dirtier_one(near_and_dirty: Path) -> None:
    clock = Clock(NOW)
    manager = _manager(near_and_dirty, clock)
    _survey(manager)
    near = manager.status(_tp("near"))
    assert near is not None
    assert near.deadline_ms == NOW + 500
    assert not near.cleanable  # Kafka would not clean it yet: below the ratio, not overdue
    assert near.expected_clean_ms > 500  # its cleaning would end past the deadline
    grab = manager.grab()
    assert grab is not None
    assert grab.tp == _tp("near")
    assert manager.due_waiting() is False  # the only due log is taken
    second = manager.grab()
    assert second is not None
    assert second.tp == _tp("dirty")


def test_a_log_is_due_only_from_its_deadline_minus_its_expected_time(
    near_and_dirty: Path,
) -> None:
    clock = Clock(NOW)
    manager = _manager(near_and_dirty, clock)
    _survey(manager)
    due_at = NOW + 500 - _expected_ms(manager, "near")
    clock.now = due_at - 1
    assert not manager.due_waiting()
    grab = manager.grab()
    assert grab is not None
    assert grab.tp == _tp("dirty")  # the dirty one first while "near" is not due yet
    assert manager.grab() is None  # and "near" not at all: below the ratio
    clock.now = due_at
    assert manager.due_waiting()
    grab = manager.grab()
    assert grab is not None
    assert grab.tp == _tp("near")


def test_due_logs_go_earliest_deadline_first(tmp_path: Path) -> None:
    """Overdue or nearly: by deadline, not by KIP-354's must-clean ratio or the dirty ratio."""
    _log(tmp_path, "over30s", [RECENT] * 9 + [NOW - LAG - 30_000])  # must-clean ratio 0.1
    _log(tmp_path, "over60s", [RECENT] * 5 + [NOW - LAG - 60_000] * 5)  # must-clean ratio 0.5
    _log(tmp_path, "over90s", [RECENT] * 2 + [NOW - LAG - 90_000] + [RECENT] * 7)  # 0.1
    write_offset_checkpoint(
        tmp_path / CLEANER_OFFSET_CHECKPOINT,
        {_tp("over30s"): 9 * PER_SEGMENT, _tp("over60s"): 5 * PER_SEGMENT, _tp("over90s"): 0},
    )
    manager = _manager(tmp_path, Clock(NOW))
    _survey(manager)
    order = []
    while (grab := manager.grab()) is not None:
        order.append(grab.tp.topic)
    assert order == ["over90s", "over60s", "over30s"]


# --- the roll and the loop's wake ---------------------------------------------------------------
def test_the_roll_comes_at_the_deadline_minus_the_expected_time(tmp_path: Path) -> None:
    first = NOW - LAG + 10_000  # the active segment's first record: its deadline is NOW + 10 s
    _log(tmp_path, "active", [RECENT], active=first)
    clock = Clock(NOW)
    manager = _manager(tmp_path, clock)
    _survey(manager)
    expected = _expected_ms(manager, "active")
    roll_at = first + LAG - expected
    assert NOW < roll_at < NOW + 10_000
    clock.now = roll_at
    assert manager.rolls() == []  # strictly after, as storage re-checks it
    clock.now = roll_at + 1
    (roll,) = manager.rolls()
    assert (roll.tp, roll.lead_ms, roll.max_lag_ms) == (_tp("active"), expected, LAG)
    assert roll.active_base == PER_SEGMENT  # the segment the survey saw, after the rolled one


def test_the_roll_also_leaves_room_for_the_min_lag(tmp_path: Path) -> None:
    """A rolled segment is cleanable only min.compaction.lag.ms later: the roll comes that much
    sooner (within half the lag)."""
    first = NOW - LAG + 2 * 3_600_000
    _log(tmp_path, "minlag", [RECENT], active=first)
    clock = Clock(NOW)
    manager = _manager(tmp_path, clock)
    _survey(manager)
    roll_at = first + LAG - _expected_ms(manager, "minlag") - 3_600_000
    clock.now = roll_at
    assert manager.rolls() == []
    clock.now = roll_at + 1
    assert [r.tp.topic for r in manager.rolls()] == ["minlag"]


def test_the_loop_wakes_at_the_next_due_instant(near_and_dirty: Path) -> None:
    clock = Clock(NOW - 10_000)
    manager = _manager(near_and_dirty, clock)
    _survey(manager)
    near_due = NOW + 500 - _expected_ms(manager, "near")
    # the next instant is "near" falling due ("dirty" and both active segments are hours away)
    assert manager.next_wake_ms() == near_due
    # learned: its cleanings take 3 s, so it falls due 1.5 x 3 s + 1 s before its deadline
    grab = manager.grab()
    assert grab is not None
    assert grab.tp == _tp("dirty")  # not due yet, so the dirty one went first
    clock.now = near_due
    grab = manager.grab()
    assert grab is not None
    assert grab.tp == _tp("near")
    manager.done(grab.tp, _outcome(3.0))
    clock.now = NOW - 10_000
    _survey(manager)
    assert _expected_ms(manager, "near") == 5_500
    assert manager.next_wake_ms() == NOW + 500 - 5_500
    # once the instant has passed, it is not waited for again (no busy loop): the next one is
    # the active segments' rolls, an hour's records from now
    clock.now = NOW + 1
    wake = manager.next_wake_ms()
    assert wake is not None
    assert wake > NOW + 3_600_000


def test_logs_falling_due_together_are_rolled_one_after_the_other(tmp_path: Path) -> None:
    """Four partitions written together, so their active segments reach the lag together: the
    first in deadline order rolls earliest, by the time the others take on one worker."""
    for topic in ("p0", "p1", "p2", "p3"):
        _log(tmp_path, topic, [RECENT], active=NOW - LAG + 60_000)
    clock = Clock(NOW)
    manager = _manager(tmp_path, clock)
    _survey(manager)
    leads = {s.tp.topic: s.lead_ms for s in manager.statuses()}
    expected = _expected_ms(manager, "p0")
    step = expected - round(MARGIN_S * 1000)  # one cleaning, with the factor
    waits = {topic: lead - expected for topic, lead in leads.items()}
    assert waits == pytest.approx({"p3": 0, "p2": step, "p1": 2 * step, "p0": 3 * step}, abs=1)
    rolled: list[str] = []
    for t in range(NOW, NOW + 60_000, 10):
        clock.now = t
        for roll in manager.rolls():
            if roll.tp.topic not in rolled:
                rolled.append(roll.tp.topic)
    assert rolled == ["p0", "p1", "p2", "p3"]
    # two workers share the queue: the leads grow half as fast
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=clock, workers=2)
    _survey(manager)
    leads = {s.tp.topic: s.lead_ms for s in manager.statuses()}
    assert leads["p0"] - expected == pytest.approx(1.5 * step, abs=1)


def test_a_paused_log_is_neither_rolled_nor_waited_for(tmp_path: Path) -> None:
    _log(tmp_path, "active", [RECENT], active=NOW - LAG + 10_000)
    clock = Clock(NOW)
    manager = _manager(tmp_path, clock)
    _survey(manager)
    assert manager.next_wake_ms() is not None
    manager.pause(_tp("active"))
    assert manager.next_wake_ms() is None
    clock.now = NOW + 10_000
    assert manager.rolls() == []
