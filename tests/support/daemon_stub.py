"""A stand-in for the daemon's admin API with one partition: what the HTTP routes need to serve
a partition's snapshots without a daemon running; and ``remote_peer``, a middleware for the
access rules without a second address."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from cleanerd.scheduling import PartitionStatus
from cleanerd.service import DaemonStatus
from cleanerd.storage import TopicPartition


class OnePartition:
    """The admin API of a daemon holding one compacted partition, ``orders-0``, in ``directory``."""

    def __init__(self, directory: Path) -> None:
        tp = TopicPartition("orders", 0)
        self.partition = PartitionStatus(tp, directory.parent, directory, compacted=True)

    def status(self) -> DaemonStatus:
        return DaemonStatus(now_ms=0, partitions=(self.partition,), ready=True)

    def healthy(self) -> tuple[bool, str]:
        return True, "ok"

    def readiness(self) -> tuple[bool, dict[str, str]]:
        return True, {"health": "ok"}

    async def pause(self, tp: TopicPartition) -> PartitionStatus | None:
        return None

    resume = clean = pause


@web.middleware
async def remote_peer(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Makes every request look as if it came from another host."""
    return await handler(request.clone(remote="203.0.113.7"))
