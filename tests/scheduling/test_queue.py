"""The grab's order kept between surveys (``scheduling._queue``) answers as ``_grab.choose``
ranking every candidate at each grab would: the same log and the same Kafka figures, as time
passes and logs leave; and a manager using it grabs what one ranking every time grabs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from cleanerd.compaction import CleanerStats, CleaningPlan
from cleanerd.scheduling import CleanerManager, CleanOutcome, RetryPolicy, SnapshotGrab
from cleanerd.scheduling._deadlines import Leads, is_due
from cleanerd.scheduling._grab import choose
from cleanerd.scheduling._queue import GrabQueue
from cleanerd.storage import CLEANER_OFFSET_CHECKPOINT, TopicPartition, write_offset_checkpoint
from cleanerd.topics import TopicSettings
from tests.support.scheduling import (
    BUDGET,
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

T0 = 1_000_000


@st.composite
def plans(draw: st.DrawFn, tp: TopicPartition) -> CleaningPlan:
    clean = draw(st.sampled_from([0, 100, 1000]))
    cleanable = draw(st.sampled_from([0, 50, 100, 900]))
    must = draw(st.sampled_from([0, cleanable // 2, cleanable]))
    return CleaningPlan(
        topic_partition=tp,
        first_dirty_offset=0,
        checkpoint_invalid=False,
        first_uncleanable_dirty_offset=0,
        first_uncleanable_offset=0,
        clean_bytes=clean,
        cleanable_bytes=cleanable,
        compaction_delay_ms=draw(st.sampled_from([0, 0, 5, 70])),
        must_clean_bytes=must,
        min_cleanable_dirty_ratio=draw(st.sampled_from([0.0, 0.5, 0.95])),
        deadline_ms=draw(st.none() | st.integers(T0 - 50, T0 + 400).map(lambda x: x // 10 * 10)),
    )


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[CleaningPlan], dict[TopicPartition, Leads]]:
    n = draw(st.integers(0, 25))
    tps = [TopicPartition(draw(st.sampled_from("ab")), i) for i in range(n)]
    found = [draw(plans(tp)) for tp in tps]
    leads = {tp: Leads(draw(st.sampled_from([0, 10, 100])), 0) for tp in tps}
    for tp in tps:
        if draw(st.integers(0, 9)) == 0:
            del leads[tp]  # no settings: never due
    return found, leads


@settings(max_examples=300)
@given(case=queues(), steps=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), max_size=40))
def test_the_queue_answers_as_ranking_every_candidate(
    case: tuple[list[CleaningPlan], dict[TopicPartition, Leads]],
    steps: list[tuple[int, int]],
) -> None:
    found, leads = case
    now = T0
    queue = GrabQueue(found, leads, now)
    left = {p.topic_partition: p for p in found}
    for wait, action in steps:
        now += wait
        assert queue.valid_at(now)
        expected = choose(list(left.values()), (), leads, now)
        assert queue.choose(now) == expected
        due = any(tp in leads and is_due(p, leads[tp], now) for tp, p in left.items())
        assert queue.any_due(now) is due
        chosen = expected[0]
        if action == 0 and chosen is not None:  # grabbed
            gone = chosen
        elif action == 1 and left:  # paused or reserved: any log
            gone = sorted(left)[wait % len(left)]
        else:
            continue
        queue.discard(gone)
        queue.discard(gone)  # twice: nothing more happens
        del left[gone]
        assert len(queue) == len(left)
    assert not queue.valid_at(now - 1)  # a clock that went back: build it again


def test_the_queue_ends_when_a_backoff_does() -> None:
    queue = GrabQueue([], {}, T0, until_ms=T0 + 10)
    assert queue.valid_at(T0 + 9)
    assert not queue.valid_at(T0 + 10)


# --- the manager: the same grabs as ranking every candidate at each grab ---------------------
class RankingEveryGrab(CleanerManager):
    """The manager as it ranked before the queue: every candidate, at every grab."""

    def _ordered(self, now: int) -> None:
        return None


def _many_logs(log_dir: Path) -> None:
    """Logs of every kind the order tells apart: overdue, falling due within seconds, dirty
    and clean, ties of ratio."""
    ends = {}
    for i in range(4):
        _log(log_dir, f"over{i}", [RECENT] * i + [OLD - i * 1000] * 2)
    for i in range(6):
        _log(log_dir, f"near{i}", [RECENT] * (i % 3) + [NOW - LAG + 2_000 * (i + 1)])
        ends[_tp(f"near{i}")] = (i % 3) * PER_SEGMENT
    for i in range(6):
        _log(log_dir, f"dirty{i}", [RECENT] * 4)
        ends[_tp(f"dirty{i}")] = (i % 4) * PER_SEGMENT
    write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, ends)


def _outcome() -> CleanOutcome:
    return CleanOutcome(CleanerStats(clock=lambda: 0.0), end_offset=0, seconds=0.01)


@pytest.mark.parametrize("seed", range(6))
def test_a_manager_grabs_as_one_ranking_every_candidate(tmp_path: Path, seed: int) -> None:
    """Grabs, due checks and Kafka's figures through a random run of surveys, time, pauses,
    resumes, clean requests, reserves, failures (with their backoff) and cleanings."""
    _many_logs(tmp_path)
    clock = Clock(NOW)
    retry = RetryPolicy(3, 3_000, 10_000)
    managers = [
        cls([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=clock, retry=retry, workers=2)
        for cls in (CleanerManager, RankingEveryGrab)
    ]
    for m in managers:
        m.apply(m.scan())
    tps = sorted(s.tp for s in managers[0].statuses())
    rng = random.Random(seed)
    held: list[TopicPartition] = []
    grabbed = 0
    for _ in range(150):
        r = rng.random()
        tp = rng.choice(tps)
        if r < 0.35:
            grabs = [m.grab() for m in managers]
            assert grabs[0] == grabs[1]
            assert [m.max_dirty_ratio for m in managers] == [managers[1].max_dirty_ratio] * 2
            assert managers[0].last_grab == managers[1].last_grab
            if grabs[0] is not None:
                held.append(grabs[0].tp)
                grabbed += 1
        elif r < 0.45:
            assert managers[0].due_waiting() is managers[1].due_waiting()
        elif r < 0.6 and held:
            done = held.pop(rng.randrange(len(held)))
            for m in managers:
                if r < 0.55:
                    m.done(done, _outcome())
                else:
                    m.failed(done, "boom")
        elif r < 0.65:
            for m in managers:
                m.pause(tp)
        elif r < 0.7:
            for m in managers:
                m.resume(tp)
        elif r < 0.73:
            for m in managers:
                m.request_clean(tp)
        elif r < 0.78:
            reserved = [m.reserve(tp) for m in managers]
            assert reserved[0] is reserved[1]
            if reserved[0]:
                held.append(tp)
        elif r < 0.85:
            for m in managers:
                m.apply(m.scan())
        else:
            clock.now += rng.choice([1, 500, 2_000, 4_000]) * (1 if rng.random() < 0.9 else -1)
        assert managers[0].statuses() == managers[1].statuses()
    assert grabbed > 10  # the run did grab


# --- snapshots: listed once per survey, handed out as a full pass each time would ---------------
class ListingEveryTime(CleanerManager):
    """The snapshot grab as it was: every maintainable log looked at, at every call."""

    def grab_snapshot(self) -> SnapshotGrab | None:
        self._snapshot_order = None
        return super().grab_snapshot()


def _snapshot_settings(topic: str) -> TopicSettings:
    kafka: dict[str, object] = {
        "cleanup.policy": "compact",
        "snapshot.enable": topic.startswith("snap"),
        "snapshot.minimum.records": 2,
    }
    return TopicSettings.from_kafka(kafka)


def test_snapshots_go_as_a_pass_over_every_log_would(tmp_path: Path) -> None:
    for i in range(6):
        _log(tmp_path, f"snap{i}", [RECENT] * 2)
    _log(tmp_path, "plain", [RECENT] * 2)
    # snap0..2 clean to their end (no cleaning waits: a snapshot may go); snap3..5 dirty
    ends = {_tp(f"snap{i}"): 2 * PER_SEGMENT for i in range(3)}
    write_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT, ends)
    clock = Clock(NOW)
    managers = [
        cls([tmp_path], _snapshot_settings, budget_bytes=BUDGET, clock_ms=clock)
        for cls in (CleanerManager, ListingEveryTime)
    ]
    for m in managers:
        m.apply(m.scan())

    def both(call: str, *args: object) -> Any:
        out = [getattr(m, call)(*args) for m in managers]
        assert out[0] == out[1]
        return out[0]

    first = both("grab_snapshot")
    assert first is not None
    assert first.tp == _tp("snap0")
    both("pause", _tp("snap1"))
    second = both("grab_snapshot")
    assert second is not None
    assert second.tp == _tp("snap2")
    both("resume", _tp("snap1"))
    third = both("grab_snapshot")
    assert third is not None
    assert third.tp == _tp("snap1")
    assert both("grab_snapshot") is None  # the dirty ones are cleaned first
    for m in managers:
        m.release(_tp("snap0"))
    assert both("grab_snapshot") is None  # released: not again before a survey
    for m in managers:
        m.apply(m.scan())
    again = both("grab_snapshot")
    assert again is not None
    assert again.tp == _tp("snap0")
