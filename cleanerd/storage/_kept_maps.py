"""A bound on the segment maps kept open, so descriptors stay bounded whatever the segment count.

A kept map (``LogSegment.view``) lets one cleaning walk a segment several times without mapping
it again, but in CPython each ``mmap`` holds a duplicate of the file's descriptor while it lives.
A partition of 2,000 segments kept 2,000 descriptors, past a default limit of 1,024. This cache
holds the kept maps of every segment in the process, least recently used first out: an evicted
segment maps its file again when next asked (a view a caller still holds stays valid until the
caller drops it). The limit defaults to a quarter of the soft ``RLIMIT_NOFILE``.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol

MIN_LIMIT = 16
DEFAULT_SHARE = 4  # one descriptor in this many may hold a kept map


class Holder(Protocol):
    def drop_map(self) -> None: ...


def default_limit() -> int:
    """A quarter of the soft descriptor limit (at least ``MIN_LIMIT``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(MIN_LIMIT, soft // DEFAULT_SHARE)


class MapCache:
    """Which holders keep a map, in use order; ``touch`` past the limit evicts the oldest."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = default_limit() if limit is None else max(1, limit)
        self._order: OrderedDict[int, Holder] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._order)

    def touch(self, holder: Holder) -> None:
        """``holder`` keeps a map now (or used it again)."""
        evicted: list[Holder] = []
        with self._lock:
            self._order[id(holder)] = holder
            self._order.move_to_end(id(holder))
            while len(self._order) > self.limit:
                evicted.append(self._order.popitem(last=False)[1])
        for old in evicted:
            old.drop_map()

    def forget(self, holder: Holder) -> None:
        """``holder`` no longer keeps a map."""
        with self._lock:
            self._order.pop(id(holder), None)


MAPS = MapCache()
"""The process's cache: every ``LogSegment`` registers its kept map here."""
