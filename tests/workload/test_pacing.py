"""Pacing a stream of batches (``cleanerd gen --rate/--duration``, the demo's live writer).

The clock is a fake that only moves when the loop waits or a step takes time, so every
assertion is about the exact instant a batch was written.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cleanerd.workload import Pacer, WorkloadSpec, generate, run_paced
from tests.support.fake_clock import FakeClock

START = 1000.0


class Steps:
    """A step of ``batch`` records that notes when it began and takes ``takes`` seconds of the
    fake clock; ``finished`` after ``limit`` steps; sets ``stop`` during step ``stop_after``."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        batch: int,
        limit: int | None = None,
        takes: float = 0.0,
        stop_after: int | None = None,
    ) -> None:
        self.clock = clock
        self.batch = batch
        self.limit = limit
        self.takes = takes
        self.stop_after = stop_after
        self.stop = threading.Event()
        self.times: list[float] = []  # seconds since the clock's start

    def finished(self) -> bool:
        return self.limit is not None and len(self.times) == self.limit

    def __call__(self) -> int:
        assert not self.finished()
        self.times.append(self.clock.now - START)
        self.clock.advance(self.takes)
        if len(self.times) == self.stop_after:
            self.stop.set()  # as a signal handler would, while the batch is being written
        return self.batch


def test_rate_spaces_batches_from_the_start_time() -> None:
    clock = FakeClock(START)
    step = Steps(clock, batch=100, limit=5)
    pacer = Pacer(1000.0, clock=clock)
    ended = run_paced(step, pacer, step.stop, finished=step.finished, wait=clock.wait)
    assert ended == "done"
    assert step.times == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert clock.now - START == pytest.approx(0.4)  # done: no idle wait after the last batch


def test_slow_appends_are_caught_up_on_not_added_to_the_interval() -> None:
    """Batches taking 0.06 s of a 0.1 s slot still start every 0.1 s (no drift)."""
    clock = FakeClock(START)
    step = Steps(clock, batch=100, limit=6, takes=0.06)
    run_paced(step, Pacer(1000.0, clock=clock), step.stop, finished=step.finished, wait=clock.wait)
    assert step.times == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])


def test_a_late_batch_is_followed_at_once_until_the_schedule_is_met() -> None:
    clock = FakeClock(START)
    durations = iter([0.25, 0.0, 0.0, 0.0, 0.0])
    started: list[float] = []

    def step() -> int:
        started.append(clock.now - START)
        clock.advance(next(durations))
        return 100

    pacer = Pacer(1000.0, clock=clock)
    run_paced(step, pacer, threading.Event(), finished=lambda: len(started) == 5, wait=clock.wait)
    assert started == pytest.approx([0.0, 0.25, 0.25, 0.3, 0.4])


def test_duration_ends_the_stream_on_time() -> None:
    clock = FakeClock(START)
    step = Steps(clock, batch=50)
    ended = run_paced(step, Pacer(500.0, 1.0, clock=clock), step.stop, wait=clock.wait)
    assert ended == "deadline"
    assert len(step.times) == 10  # 500 records/s for 1 s in batches of 50
    assert clock.now - START == pytest.approx(1.0)  # the last wait stopped at the deadline


def test_unpaced_with_a_duration_writes_until_the_deadline() -> None:
    clock = FakeClock(START)
    step = Steps(clock, batch=10, takes=0.01)
    ended = run_paced(step, Pacer(None, 0.5, clock=clock), step.stop, wait=clock.wait)
    assert ended == "deadline"
    assert len(step.times) == pytest.approx(50, abs=1)
    assert clock.waits == []


def test_stop_ends_at_the_batch_boundary() -> None:
    clock = FakeClock(START)
    step = Steps(clock, batch=100, stop_after=3)
    ended = run_paced(step, Pacer(1000.0, 60.0, clock=clock), step.stop, wait=clock.wait)
    assert ended == "stopped"
    assert len(step.times) == 3  # the batch under way when the stop came was finished, no more


def test_ready_to_end_holds_the_deadline_back() -> None:
    """The demo's writer keeps going past the deadline until every partition has a batch."""
    clock = FakeClock(START)
    step = Steps(clock, batch=100, takes=0.3)
    ended = run_paced(
        step,
        Pacer(1000.0, 0.1, clock=clock),
        step.stop,
        wait=clock.wait,
        ready_to_end=lambda: len(step.times) >= 3,
    )
    assert ended == "deadline"
    assert len(step.times) == 3


def test_bad_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        Pacer(0.0)
    with pytest.raises(ValueError, match="duration"):
        Pacer(10.0, -1.0)


def test_gen_paces_round_robin_over_the_partitions(tmp_path: Path) -> None:
    """``generate`` at 1000 records/s for 1 s in batches of 100: ten batches, one every
    0.1 s, alternating between the two partitions (a stream feeds every partition)."""
    clock = FakeClock(START)
    seen: list[tuple[float, int]] = []

    def progress(partition: int, written: int) -> None:
        seen.append((round(clock.now - START, 6), partition))

    spec = WorkloadSpec(partitions=2, records=10, keys=20, records_per_batch=100)
    result = generate(
        tmp_path, spec, progress, rate=1000.0, duration_s=1.0, clock=clock, wait=clock.wait
    )
    assert result.ended == "deadline"
    assert [t for t, _ in seen] == pytest.approx([i / 10 for i in range(10)])
    assert [p for _, p in seen] == [0, 1] * 5
    # --duration: --records (10) is no limit, each partition got 5 batches of 100
    assert [p.records for p in result.partitions] == [500, 500]
    assert result.batches == 10


def test_gen_with_a_rate_stops_at_the_record_count(tmp_path: Path) -> None:
    clock = FakeClock(START)
    spec = WorkloadSpec(partitions=3, records=250, keys=20, records_per_batch=100)
    result = generate(tmp_path, spec, rate=600.0, clock=clock, wait=clock.wait)
    assert result.ended == "done"
    assert [p.records for p in result.partitions] == [250, 250, 250]
    assert result.batches == 9  # 100 + 100 + 50 each
    # the last batch (records 700..749 of 750) was due at 700 / 600 s, and nothing after it
    assert clock.now - START == pytest.approx(700 / 600)
