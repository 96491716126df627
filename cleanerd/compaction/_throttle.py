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
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

CONFIG_NAME = "log.cleaner.io.max.bytes.per.second"
DEFAULT_CHECK_INTERVAL_S = 0.3
"""Kafka's cleaner creates its throttler with ``checkIntervalMs = 300``."""


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
    ) -> None:
        if math.isnan(check_interval_s) or check_interval_s < 0:
            raise ValueError(f"check_interval_s must be >= 0, got {check_interval_s!r}")
        self._rate = _validated_rate(rate_bytes_per_s)
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._sleep = sleep
        self._stop = stop
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self._pause_until = -math.inf
        self._slept_seconds = 0.0
        self._bytes_total = 0

    @property
    def rate(self) -> float:
        """Target bytes per second; ``math.inf`` when unlimited."""
        with self._lock:
            return self._rate

    @property
    def unlimited(self) -> bool:
        return self.rate == math.inf

    def set_rate(self, rate_bytes_per_s: float | None) -> None:
        """Change the target at run time (SIGHUP); it applies from the next check, as in Kafka."""
        rate = _validated_rate(rate_bytes_per_s)
        with self._lock:
            self._rate = rate

    @property
    def slept_seconds(self) -> float:
        """Seconds callers have spent throttled, summed over threads."""
        with self._lock:
            return self._slept_seconds

    @property
    def bytes_total(self) -> int:
        """Bytes passed to ``maybe_throttle`` since creation (Kafka's ``cleaner-io`` meter)."""
        with self._lock:
            return self._bytes_total

    def maybe_throttle(self, n_bytes: int) -> float:
        """Account ``n_bytes`` of I/O; sleep if the rate is over the target. Returns seconds slept.

        Called per chunk read while building the map, per chunk read while cleaning, and per chunk
        written, as Kafka does.
        """
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        with self._lock:
            self._bytes_total += n_bytes
            self._observed += n_bytes
            now = self._clock()
            wait = self._pause_until - now
            if wait <= 0:
                wait = self._check(now)
        if wait <= 0:
            return 0.0
        slept = self._wait(wait)
        with self._lock:
            self._slept_seconds += slept
        return slept

    def _check(self, now: float) -> float:
        """Kafka's period check, under the lock; returns the seconds to sleep (0 for none)."""
        elapsed = now - self._period_start
        if elapsed <= self._check_interval_s or self._observed <= 0:
            return 0.0
        wait = 0.0
        if self._observed / elapsed > self._rate:
            wait = self._observed / self._rate - elapsed
        # Kafka starts the next period when its sleep ends; bytes other threads account meanwhile
        # belong to that next period.
        self._period_start = now + max(wait, 0.0)
        self._observed = 0.0
        if wait > 0:
            self._pause_until = self._period_start
        return wait

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
