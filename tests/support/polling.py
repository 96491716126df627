"""Waiting for a condition instead of sleeping for it: ``poll_until`` in a thread,
``until`` in a coroutine. The timeouts bound a hang; they are not speed checks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    fn: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.1, what: str = ""
) -> T:
    """Call ``fn`` until it returns something truthy; fail (never hang) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or fn}")
        time.sleep(interval)


async def until(
    condition: Callable[[], bool], timeout: float = 60.0, interval: float = 0.01
) -> None:
    """Await until ``condition()`` holds, letting the loop run meanwhile; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out after {timeout} s waiting for {condition}"
        await asyncio.sleep(interval)
