"""The dedupe buffer budget the workers share (``log.cleaner.dedupe.buffer.size`` bytes).

Kafka gives each cleaner thread a fixed ``size / threads`` map; cleanerd lends each worker the
map its log needs out of one budget. Grants are first come, first served: a request waits while
any earlier one waits, so a big request at the head is not starved by a stream of small ones
that would each fit. A request for more than the whole budget is granted the whole budget.
Leases come back when the ``async with`` block ends for any reason, cancellation included.
Event-loop only (no locks): every change happens between awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class _Waiter:
    wanted: int
    future: asyncio.Future[int] = field(repr=False)


class DedupeBudget:
    """Bytes lent out FIFO, never more than ``total`` in use (except right after a shrink)."""

    def __init__(self, total_bytes: int) -> None:
        self._check(total_bytes)
        self._total = total_bytes
        self._in_use = 0
        self._queue: deque[_Waiter] = deque()

    @staticmethod
    def _check(total: int) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
            raise ValueError(f"dedupe budget must be a positive number of bytes, got {total!r}")

    @property
    def total(self) -> int:
        return self._total

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def waiting(self) -> int:
        """Requests queued for bytes."""
        return len(self._queue)

    def resize(self, total_bytes: int) -> None:
        """New total (SIGHUP). Leases already granted stay; a shrink below what is in use lets
        no one in until enough comes back; waiters are granted at most the new total."""
        self._check(total_bytes)
        self._total = total_bytes
        self._grant()

    def _grant(self) -> None:
        """Serve the queue head while it fits; never skip it (fairness)."""
        while self._queue:
            head = self._queue[0]
            if head.future.done():  # cancelled while queued; acquire's handler removes it too
                self._queue.popleft()
                continue
            amount = min(head.wanted, self._total)
            if self._in_use + amount > self._total:
                return
            self._queue.popleft()
            self._in_use += amount
            head.future.set_result(amount)

    def _release(self, amount: int) -> None:
        self._in_use -= amount
        self._grant()

    async def acquire(self, n: int) -> int:
        """Wait for ``min(n, total)`` bytes (FIFO) and return the amount granted; the caller
        must ``release`` it. Prefer ``lease``."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"a lease needs a positive number of bytes, got {n!r}")
        amount = min(n, self._total)
        if not self._queue and self._in_use + amount <= self._total:
            self._in_use += amount
            return amount
        waiter = _Waiter(n, asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())  # granted, but the waiter is gone
            else:
                with contextlib.suppress(ValueError):
                    self._queue.remove(waiter)
                self._grant()  # it may have been the head blocking the others
            raise

    def release(self, amount: int) -> None:
        """Give back what ``acquire`` granted."""
        if amount < 0 or amount > self._in_use:
            raise ValueError(f"releasing {amount} bytes but {self._in_use} are in use")
        self._release(amount)

    @contextlib.asynccontextmanager
    async def lease(self, n: int) -> AsyncIterator[int]:
        """``async with budget.lease(n) as granted:`` bytes held for the block, returned after."""
        granted = await self.acquire(n)
        try:
            yield granted
        finally:
            self._release(granted)
