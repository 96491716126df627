"""Kafka's cleaner I/O throttler (docs/kafka-format.md §4.14), shared by all cleaning threads.

Same arithmetic as Kafka's ``Throttler``: bytes accumulate over a period; at the first call more
than ``check_interval_s`` after the period start, if the observed rate is above the target, the
caller sleeps ``observed / rate - elapsed`` seconds, then a new period starts (when the sleep ends).

Two differences, both for a daemon with several worker threads and a prompt shutdown:

- The lock is never held while sleeping. Kafka sleeps inside its lock, which stalls every other
  thread too; here the pause is recorded (``pause_until``) and a thread that calls in during it
  waits out the rest of the same pause, so a shared throttler still paces all threads together.
- With a ``stop`` event the waits are ``stop.wait(...)``, so setting it ends every sleep at once.

Kafka rounds the sleep to whole milliseconds (``Thread.sleep``); this one sleeps the exact float.

The daemon's cleanings may run in processes of their own (``service._processes``); a throttler
made with ``shared=True`` keeps its state in shared memory under a process-shared lock, so it
paces every process together as it paces threads (``time.monotonic`` is one clock for all of
them). Such a throttler is handed to a process when the process starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

CONFIG_NAME = "log.cleaner.io.max.bytes.per.second"
DEFAULT_CHECK_INTERVAL_S = 0.3
"""Kafka's cleaner creates its throttler with ``checkIntervalMs = 300``."""

ABANDONED_LOCK_S = 1.0
"""A shared throttler's lock held this long is taken for abandoned: its holder, a cleaning
process, was killed between acquire and release (the kernel's OOM killer may pick one at any
instant). Every hold is a few arithmetic steps, so no live holder keeps it near this long."""

# the throttler's state: one double each, in this order, in plain or shared memory
_RATE, _PERIOD_START, _OBSERVED, _PAUSE_UNTIL, _SLEPT, _BYTES = range(6)
# The rate and the totals are read without the lock: each is one aligned double, read whole,
# and a cleaning process killed while it held the shared lock would otherwise stop every scrape.


class _Stop(Protocol):
    """What a stop signal offers: ``threading.Event`` and a cleaning process's abort signal."""

    def wait(self, timeout: float | None = None) -> bool: ...


def _validated_rate(rate_bytes_per_s: float | None) -> float:
    """``None`` and infinity mean unlimited (Kafka's default is ``Double.MAX_VALUE``)."""
    if rate_bytes_per_s is None:
        return math.inf
    rate = float(rate_bytes_per_s)
    if math.isnan(rate) or rate <= 0:
        raise ValueError(
            f"{CONFIG_NAME} must be a number of bytes per second > 0 (or unlimited),"
            f" got {rate_bytes_per_s!r}"
        )
    return rate


class Throttler:
    """Thread-safe byte-rate limiter; one instance is shared by all cleaning threads.

    ``clock`` and ``sleep`` are injectable so tests run on a fake clock; a fake ``sleep`` should
    advance the fake clock, as a real one does. ``slept_seconds`` and ``bytes_total`` only grow and
    feed the ``cleanerd_throttle_sleep_seconds_total`` metric and Kafka's ``cleaner-io`` meter.
    """

    def __init__(
        self,
        rate_bytes_per_s: float | None,
        *,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        stop: threading.Event | None = None,
        shared: bool = False,
    ) -> None:
        """``shared``: the state lives in shared memory, for cleanings in other processes."""
        if math.isnan(check_interval_s) or check_interval_s < 0:
            raise ValueError(f"check_interval_s must be >= 0, got {check_interval_s!r}")
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._sleep = sleep
        self._stop: _Stop | None = stop
        self._lock: Any
        self._state: Any
        self._shared = shared
        if shared:
            import multiprocessing  # noqa: PLC0415 (14 ms; only the daemon shares one)

            context = multiprocessing.get_context("spawn")
            self._lock, self._state = context.Lock(), context.RawArray(ctypes.c_double, 6)
        else:
            self._lock, self._state = threading.Lock(), (ctypes.c_double * 6)()
        self._state[_RATE] = _validated_rate(rate_bytes_per_s)
        self._state[_PERIOD_START] = clock()
        self._state[_PAUSE_UNTIL] = -math.inf

    def __getstate__(self) -> dict[str, Any]:
        """What a cleaning process gets: the shared state and lock, the real clock, no stop
        event (``stop_on`` gives it the process's own)."""
        if not self._shared:
            raise TypeError("only a Throttler made with shared=True can go to another process")
        return {"state": self._state, "lock": self._lock, "interval": self._check_interval_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._state, self._lock = state["state"], state["lock"]
        self._check_interval_s, self._shared = state["interval"], True
        self._clock, self._sleep, self._stop = time.monotonic, time.sleep, None

    def stop_on(self, stop: _Stop) -> None:
        """Cut sleeps short when ``stop`` is set (a cleaning process's abort signal)."""
        self._stop = stop

    @property
    def rate(self) -> float:
        """Target bytes per second; ``math.inf`` when unlimited."""
        return float(self._state[_RATE])  # no lock: see the state's note

    @property
    def unlimited(self) -> bool:
        return self.rate == math.inf

    def set_rate(self, rate_bytes_per_s: float | None) -> None:
        """Change the target at run time (SIGHUP); it applies from the next check, as in Kafka.

        A caller already asleep sleeps on (as Kafka's would); one that calls in later no longer
        waits out a pause worked out at the old rate (an operator who lifts a throttle of a few
        bytes a second should not wait its hour), and a new period starts."""
        rate = _validated_rate(rate_bytes_per_s)
        with self._locked():
            state = self._state
            if rate != state[_RATE]:
                state[_RATE] = rate
                state[_PAUSE_UNTIL] = -math.inf
                state[_PERIOD_START] = self._clock()
                state[_OBSERVED] = 0.0

    @property
    def slept_seconds(self) -> float:
        """Seconds callers have spent throttled, summed over threads."""
        return float(self._state[_SLEPT])  # no lock: see the state's note

    @property
    def bytes_total(self) -> int:
        """Bytes passed to ``maybe_throttle`` since creation (Kafka's ``cleaner-io`` meter)."""
        return int(self._state[_BYTES])  # no lock: see the state's note

    def maybe_throttle(self, n_bytes: int) -> float:
        """Account ``n_bytes`` of I/O; sleep if the rate is over the target. Returns seconds slept.

        Called per chunk read while building the map, per chunk read while cleaning, and per chunk
        written, as Kafka does.
        """
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        state = self._state
        with self._locked():
            state[_BYTES] += n_bytes
            state[_OBSERVED] += n_bytes
            now = self._clock()
            wait = state[_PAUSE_UNTIL] - now
            if wait <= 0:
                wait = self._check(now)
        if wait <= 0:
            return 0.0
        slept = self._wait(wait)
        with self._locked():
            state[_SLEPT] += slept
        return slept

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, held for the block. A shared one that stays taken for
        ``ABANDONED_LOCK_S`` is released first: a process died holding it, and without this
        every other process's next call, and the daemon's next rate change, would wait forever.
        (Its state may then hold that process's half-made update: at worst one pause is off.)"""
        lock = self._lock
        if not self._shared:
            lock.acquire()
        elif not lock.acquire(timeout=ABANDONED_LOCK_S):
            with contextlib.suppress(ValueError):  # another waiter released it first
                lock.release()
            lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def _check(self, now: float) -> float:
        """Kafka's period check, under the lock; returns the seconds to sleep (0 for none)."""
        state = self._state
        elapsed = now - state[_PERIOD_START]
        observed, rate = state[_OBSERVED], state[_RATE]
        if elapsed <= self._check_interval_s or observed <= 0:
            return 0.0
        wait = 0.0
        if observed / elapsed > rate:
            wait = observed / rate - elapsed
        # Kafka starts the next period when its sleep ends; bytes other threads account meanwhile
        # belong to that next period.
        state[_PERIOD_START] = now + max(wait, 0.0)
        state[_OBSERVED] = 0.0
        if wait > 0:
            state[_PAUSE_UNTIL] = state[_PERIOD_START]
        return float(wait)

    def _wait(self, seconds: float) -> float:
        """Sleep, or wait on the stop event so shutdown cuts the sleep short."""
        if self._stop is None:
            self._sleep(seconds)
            return seconds
        start = self._clock()
        if self._stop.wait(seconds):
            return min(seconds, max(0.0, self._clock() - start))
        return seconds

    def __repr__(self) -> str:
        return f"Throttler(rate_bytes_per_s={self.rate}, check_interval_s={self._check_interval_s})"
