"""A steady stream: batches at a record rate, until done, stopped or past a deadline.

Both writers that feed a running daemon use it: the demo's live writer and ``cleanerd gen
--rate/--duration``. Record ``n`` is due at ``start + n / rate``, counted from the start and
never from the previous batch, so a slow append is caught up on instead of lowering the rate,
and no per-batch rounding adds up. The clock is passed in (monotonic by default) so tests
choose the time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

Ending = Literal["done", "stopped", "deadline"]
"""Why :func:`run_paced` returned: nothing left to write, ``stop`` was set, time was up."""


class Pacer:
    """When the next record is due at ``rate`` records/s (``None``: at once), and whether
    ``duration_s`` (``None``: no limit) has passed since the pacer was made."""

    def __init__(
        self,
        rate: float | None,
        duration_s: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be > 0 records/s (or None), got {rate}")
        if duration_s is not None and duration_s < 0:
            raise ValueError(f"duration must be >= 0 s (or None), got {duration_s}")
        self.rate = rate
        self.clock = clock
        self.started = clock()
        self.deadline = None if duration_s is None else self.started + duration_s

    def expired(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def delay(self, written: int) -> float:
        """Seconds until the record after the first ``written`` is due (0: now). A wait never
        runs past a deadline still ahead, so the end is noticed on time."""
        if self.rate is None:
            return 0.0
        now = self.clock()
        due = self.started + written / self.rate
        if self.deadline is not None and now < self.deadline:
            due = min(due, self.deadline)
        return max(due - now, 0.0)


def run_paced(
    step: Callable[[], int],
    pacer: Pacer,
    stop: threading.Event,
    *,
    finished: Callable[[], bool] = lambda: False,
    ready_to_end: Callable[[], bool] = lambda: True,
    wait: Callable[[float], object] | None = None,
) -> Ending:
    """Call ``step`` (one batch; it returns the records it wrote) whenever the pacer says the
    next record is due.

    Ends when ``finished()`` says there is nothing left (asked before waiting, so the last
    batch is not followed by an idle interval), when ``stop`` is set (checked between batches,
    so a batch is never cut) or once the deadline has passed and ``ready_to_end()`` holds.
    ``wait`` sleeps (default ``stop.wait``, which wakes at once on a stop).
    """
    pause = stop.wait if wait is None else wait
    written = 0
    while not stop.is_set():
        if finished():
            return "done"
        if pacer.expired() and ready_to_end():
            return "deadline"
        delay = pacer.delay(written)
        if delay > 0:
            pause(delay)
            continue
        written += step()
    return "stopped"
