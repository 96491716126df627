"""The event loop the daemon and the demo run on: uvloop when installed, a short GIL interval."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when uvloop is installed, else None (asyncio's default loop)."""
    try:
        import uvloop  # noqa: PLC0415 (optional: no wheel on some platforms)
    except ImportError:  # pragma: no cover - uvloop is a declared dependency on Linux
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


SWITCH_INTERVAL_S = 0.0005
"""GIL switch interval while the daemon runs (Python's default is 5 ms).

A worker coming back from a nogil kernel waits for the GIL while another worker runs Python;
at 5 ms that wait is long next to a kernel call of a few ms. 0.5 ms took two workers from 1.68x
to 1.72x one worker in the same process (``bench/daemon.py``'s throughput partitions)."""


def run_async(main: Callable[[], Awaitable[int]]) -> int:
    """Run ``main()`` on a fresh event loop (uvloop when available); returns its exit code."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(_call(main))
    finally:
        sys.setswitchinterval(before)


async def _call(main: Callable[[], Awaitable[int]]) -> int:
    return await main()
