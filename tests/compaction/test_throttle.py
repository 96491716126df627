"""The cleaner I/O throttler: Kafka's Throttler arithmetic (kafka-format.md §4.14) on a fake clock.

Only the stop-event test and the killed lock holder use real time (the holder a real process);
they assert behaviour (a 30 s sleep ends soon after stop is set; a lock a killed process held is
taken again), never speed.
"""

from __future__ import annotations

import math
import multiprocessing
import signal
import threading
import time

import pytest

from cleanerd.compaction import _throttle as throttle
from cleanerd.compaction._throttle import CONFIG_NAME, DEFAULT_CHECK_INTERVAL_S, Throttler
from tests.support.lock_holders import hold_throttle_lock


class FakeClock:
    """A thread-safe clock that only moves when a test or the fake sleep moves it."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds


def make(rate: float | None, clock: FakeClock, check_interval_s: float = 0.3) -> Throttler:
    return Throttler(rate, check_interval_s=check_interval_s, clock=clock, sleep=clock.sleep)


def test_default_check_interval_is_kafkas() -> None:
    assert DEFAULT_CHECK_INTERVAL_S == 0.3


def test_no_sleep_under_the_rate() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    for _ in range(10):
        clock.advance(0.1)
        assert t.maybe_throttle(90) == 0.0  # 900 B/s < 1000 B/s
    assert clock.sleeps == []
    assert t.slept_seconds == 0.0
    assert t.bytes_total == 900


def test_no_check_before_the_interval_has_passed() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    clock.advance(0.3)  # not *more* than the interval: Kafka checks elapsed > interval
    assert t.maybe_throttle(1_000_000) == 0.0
    assert clock.sleeps == []


def test_sleeps_kafkas_amount_over_the_rate() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    clock.advance(0.5)
    # 2000 bytes in 0.5 s = 4000 B/s; at 1000 B/s they should take 2 s: sleep 2 - 0.5 = 1.5 s
    assert t.maybe_throttle(2000) == pytest.approx(1.5)
    assert clock.sleeps == [pytest.approx(1.5)]
    assert t.slept_seconds == pytest.approx(1.5)


def test_bytes_accumulate_until_the_check() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    for _ in range(4):
        assert t.maybe_throttle(500) == 0.0  # same instant: elapsed 0, no check
    clock.advance(0.4)
    # 2500 bytes in 0.4 s: sleep 2.5 - 0.4 = 2.1 s
    assert t.maybe_throttle(500) == pytest.approx(2.1)


def test_a_check_starts_a_new_period() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    clock.advance(1.0)
    assert t.maybe_throttle(3000) == pytest.approx(2.0)  # period restarts at the end of the sleep
    clock.advance(0.31)
    # only the bytes of the new period count: 300 in 0.31 s is under 1000 B/s
    assert t.maybe_throttle(300) == 0.0
    clock.advance(0.5)
    # that check also reset the period: 1000 bytes in 0.5 s -> sleep 1.0 - 0.5
    assert t.maybe_throttle(1000) == pytest.approx(0.5)
    assert len(clock.sleeps) == 2


def test_check_under_the_rate_also_resets_the_period() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    clock.advance(10.0)
    assert t.maybe_throttle(100) == 0.0  # check: slow, new period, 100 bytes forgotten
    clock.advance(0.5)
    assert t.maybe_throttle(1000) == pytest.approx(0.5)


def test_rate_change_applies_from_the_next_check() -> None:
    clock = FakeClock()
    t = make(1000, clock)
    clock.advance(0.5)
    assert t.maybe_throttle(1000) == pytest.approx(0.5)
    t.set_rate(4000)
    assert t.rate == 4000
    clock.advance(0.5)
    # 1000 bytes in 0.5 s = 2000 B/s, under the new 4000: no sleep
    assert t.maybe_throttle(1000) == 0.0
    t.set_rate(500)
    clock.advance(0.5)
    # 1000 bytes at 500 B/s take 2 s: sleep 1.5
    assert t.maybe_throttle(1000) == pytest.approx(1.5)


@pytest.mark.parametrize("rate", [None, math.inf])
def test_unlimited_rate_never_sleeps(rate: float | None) -> None:
    clock = FakeClock()
    t = make(rate, clock)
    assert t.unlimited
    for _ in range(100):
        clock.advance(0.31)
        assert t.maybe_throttle(10**12) == 0.0
    assert clock.sleeps == []
    assert t.bytes_total == 100 * 10**12


def test_unlimited_to_limited_at_run_time() -> None:
    clock = FakeClock()
    t = make(None, clock)
    clock.advance(0.5)
    t.maybe_throttle(10**9)  # a check happens and starts a new period, as in Kafka
    t.set_rate(1000)
    assert not t.unlimited
    clock.advance(0.5)
    assert t.maybe_throttle(1000) == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan])
def test_invalid_rate_names_the_setting(bad: float) -> None:
    with pytest.raises(ValueError, match=CONFIG_NAME.replace(".", r"\.")):
        Throttler(bad)
    t = Throttler(1000)
    with pytest.raises(ValueError, match=r"log\.cleaner\.io\.max\.bytes\.per\.second"):
        t.set_rate(bad)
    assert t.rate == 1000


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="check_interval_s"):
        Throttler(1000, check_interval_s=-1)
    with pytest.raises(ValueError, match="n_bytes"):
        Throttler(1000).maybe_throttle(-1)


def test_a_caller_during_a_pause_waits_out_the_rest_of_it() -> None:
    """Kafka's shared throttler stalls every thread while one sleeps; so does this one."""
    clock = FakeClock()
    recorded: list[float] = []
    t = Throttler(1000, clock=clock, sleep=recorded.append)  # sleeps do not move the clock
    clock.advance(1.0)
    assert t.maybe_throttle(3000) == pytest.approx(2.0)
    clock.advance(0.5)  # another thread calls in while the first one sleeps
    assert t.maybe_throttle(10) == pytest.approx(1.5)
    clock.advance(1.5)  # the pause is over; the new period started at its end
    assert t.maybe_throttle(10) == 0.0
    assert recorded == [pytest.approx(2.0), pytest.approx(1.5)]
    assert t.slept_seconds == pytest.approx(3.5)


def test_a_new_rate_ends_a_pause_for_callers_that_come_later() -> None:
    """A pause worked out at 1 B/s would last hours; after the operator lifts the throttle a
    later caller does not wait it out (one already asleep sleeps on, as in Kafka)."""
    clock = FakeClock()
    recorded: list[float] = []
    t = Throttler(1, clock=clock, sleep=recorded.append)  # sleeps do not move the clock
    clock.advance(1.0)
    assert t.maybe_throttle(3601) == pytest.approx(3600.0)
    clock.advance(1.0)
    assert t.maybe_throttle(10) == pytest.approx(3599.0)  # the same pause, at the same rate
    t.set_rate(None)
    clock.advance(1.0)
    assert t.maybe_throttle(10) == 0.0
    assert recorded == [pytest.approx(3600.0), pytest.approx(3599.0)]


@pytest.mark.parametrize("shared", [False, True])
def test_totals_read_as_written_in_plain_and_shared_state(shared: bool) -> None:
    clock = FakeClock()
    t = Throttler(1000, clock=clock, sleep=clock.sleep, shared=shared)
    clock.advance(1.0)
    t.maybe_throttle(3000)
    assert (t.bytes_total, t.rate) == (3000, 1000.0)
    assert t.slept_seconds == pytest.approx(2.0)


def test_threads_totals_are_exact() -> None:
    clock = FakeClock()
    t = make(1000, clock, check_interval_s=0.0)
    threads_n, calls, chunk = 8, 500, 7
    barrier = threading.Barrier(threads_n)
    returned: list[float] = []
    returned_lock = threading.Lock()

    def work() -> None:
        barrier.wait()
        mine = 0.0
        for _ in range(calls):
            clock.advance(0.001)
            mine += t.maybe_throttle(chunk)
        with returned_lock:
            returned.append(mine)

    workers = [threading.Thread(target=work) for _ in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert t.bytes_total == threads_n * calls * chunk
    assert clock.sleeps  # 7 bytes per ms is 7000 B/s: it had to sleep
    assert t.slept_seconds == pytest.approx(sum(clock.sleeps))
    assert sum(returned) == pytest.approx(sum(clock.sleeps))
    # sleeping brings the long-run rate down to about the target
    total_time = clock() - 100.0
    assert t.bytes_total / total_time == pytest.approx(1000, rel=0.05)


class _WatchedStop(threading.Event):
    """A stop event that says when a sleeper starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_on = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited_on.set()
        return super().wait(timeout)


def test_stop_event_ends_a_long_sleep_promptly() -> None:
    stop = _WatchedStop()
    t = Throttler(1, check_interval_s=0.0, stop=stop)
    created = time.monotonic()  # at or after the throttler's period start
    t.maybe_throttle(0)
    # the period must have lasted a moment (> check_interval_s, 0) for the next call to check:
    # wait for the clock to tick, no longer
    while time.monotonic() <= created:
        pass
    result: list[float] = []
    worker = threading.Thread(target=lambda: result.append(t.maybe_throttle(30)))
    began = time.monotonic()
    worker.start()
    assert stop.waited_on.wait(timeout=10)  # the worker is in its throttled sleep
    assert worker.is_alive()  # asleep for about 30 s
    stop.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert time.monotonic() - began < 5.0  # far from 30 s: the stop cut it short
    assert 0.0 < result[0] < 5.0
    assert 0.0 < t.slept_seconds < 5.0
    # once stopped, no further sleeping
    assert t.maybe_throttle(1000) < 1.0


def test_repr_shows_the_rate() -> None:
    assert "1000" in repr(Throttler(1000))


@pytest.mark.slow
def test_a_lock_left_taken_by_a_killed_process_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cleaning process killed while it held the shared lock: the next call, here and in
    every other process, goes on after ``ABANDONED_LOCK_S``, and so does a rate change."""
    monkeypatch.setattr(throttle, "ABANDONED_LOCK_S", 0.2)
    t = Throttler(None, shared=True)
    context = multiprocessing.get_context("spawn")
    held = context.Event()
    holder = context.Process(target=hold_throttle_lock, args=(t, held), daemon=True)
    holder.start()
    try:
        assert held.wait(60)
    finally:
        holder.kill()
        holder.join(60)
    assert holder.exitcode == -signal.SIGKILL
    assert t.maybe_throttle(10) == 0.0
    t.set_rate(1000)
    assert (t.bytes_total, t.rate) == (10, 1000.0)
    t.maybe_throttle(5)  # the lock works as a lock again: taken and given back each call
    assert t.bytes_total == 15
