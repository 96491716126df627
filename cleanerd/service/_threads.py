"""The daemon's two thread pools: one for cleanings, one for everything else that blocks.

Cleanings (and snapshot jobs, and Spark jobs, which a worker holds the same way) run in
``log.cleaner.threads`` threads named ``cleanerd-clean``; surveys, idle rolls, retention sweeps,
HTTP handlers' file reads and Spark progress polls run in ``SERVICE_THREADS`` threads named
``cleanerd-service``. Kept apart so a long cleaning never delays a scrape or a survey, and a
burst of HTTP requests never takes a cleaning's thread; asyncio's default pool serves neither.

One cleaning of a compressed log also decompresses part of each chunk of pass 1 in a thread of
the daemon's one ``compaction.decompression_pool`` (``cleanerd-decompress``), shared by the
``log.cleaner.threads`` cleanings: the rule for its size is compaction's. Each holds at most its
share of one chunk's payloads (``format.chunk_payloads_bound``, split).

A job runs in a copy of the caller's context, as ``asyncio.to_thread`` does (the codecs'
decompression limit is a context variable). A thread cannot be interrupted: ``close`` stops
taking jobs and waits up to a timeout for the running ones, and says whether they all ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

SERVICE_THREADS = 4
"""Threads for surveys, maintenance, HTTP file reads and Spark polls: each job is short, and
the manager loop runs one survey or maintenance step at a time."""


class Blocking(Protocol):
    """Runs a blocking call off the event loop (``ThreadPool.submit``, ``asyncio.to_thread``)."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


class ThreadPool:
    """A named ``ThreadPoolExecutor`` of bounded size whose jobs the event loop awaits."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self._executor = self._new(size)
        self._running: set[concurrent.futures.Future[Any]] = set()
        self.closed = False

    def _new(self, size: int) -> concurrent.futures.ThreadPoolExecutor:
        self.max_workers = max(size, 1)
        return concurrent.futures.ThreadPoolExecutor(self.max_workers, thread_name_prefix=self.name)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """``fn(*args, **kwargs)`` in a thread of this pool; cancelling the returned future
        does not stop a call that has started (the thread runs on, and ``close`` waits)."""
        if self.closed:
            raise RuntimeError(f"thread pool {self.name} is closed")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        job = self._executor.submit(call)
        self._running.add(job)
        job.add_done_callback(self._running.discard)
        return asyncio.wrap_future(job)

    def resize(self, size: int) -> None:
        """A new executor of ``size`` threads for the next jobs (``ThreadPoolExecutor`` cannot
        grow or shrink); the old one's running jobs finish in their threads, then those end."""
        if max(size, 1) == self.max_workers or self.closed:
            return
        old, self._executor = self._executor, self._new(size)
        old.shutdown(wait=False)

    async def close(self, timeout_s: float) -> bool:
        """Take no more jobs, drop the queued ones, wait up to ``timeout_s`` for the running
        ones; False when some were still running."""
        self.closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        running = [asyncio.wrap_future(job) for job in list(self._running)]
        if not running:
            return True
        _, pending = await asyncio.wait(running, timeout=max(timeout_s, 0.0))
        for waiter in pending:  # the threads run on; only the loop stops listening
            waiter.cancel()
        return not pending


def in_default_pool(fn: Callable[..., T], /, *args: Any) -> Awaitable[T]:
    """``Blocking`` on asyncio's default pool, for callers outside the daemon (tests, tools)."""
    return asyncio.to_thread(fn, *args)
