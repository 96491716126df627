"""How long superseded records stay in a partition's files, read from the ``.log`` files
themselves (not from what the daemon says), for the deadline tests.

A record is superseded once a later record of its key is written; Kafka's cleaner removes it
with the first cleaning whose range holds that later record. So for every record still in the
files that a later record of its key follows, ``now - that later record's timestamp`` is how
long it has outlived its supersession, at least: the record that really superseded it may be
earlier still, and gone (a cleaning that removed it removed the older one with it), and the
files are read after ``now`` is taken. The figure is never too big: a test asserting it stays
within ``max.compaction.lag.ms`` cannot fail for a record the daemon removed in time.

The files are read under the partition's writer lock, so neither an append nor a swap is seen
half done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cleanerd.format import iter_batches
from cleanerd.storage import segment_logs, wall_clock_ms
from cleanerd.storage._writer_lock import PartitionWriterLock


@dataclass
class Outlived:
    """What the reads of a partition saw: each superseded record still present, by offset,
    and the longest any of them had outlived its supersession (ms) when read."""

    seen: set[int] = field(default_factory=set)
    worst_ms: int = 0
    worst_at: tuple[int, int] | None = None  # (offset, offset of the record superseding it)

    def add(self, offset: int, by: int, age_ms: int) -> None:
        self.seen.add(offset)
        if age_ms > self.worst_ms:
            self.worst_ms, self.worst_at = age_ms, (offset, by)


def _read_logs(directory: Path) -> list[bytes]:
    lock = PartitionWriterLock(directory)
    try:
        with lock:
            return [path.read_bytes() for _, (path, _) in sorted(segment_logs(directory).items())]
    finally:
        lock.close()


def read_superseded(directory: Path, into: Outlived) -> int:
    """Read the partition's files once and add what is superseded in them to ``into``;
    returns how many records the files held."""
    now = wall_clock_ms()
    rows: list[tuple[int, bytes | None, int]] = []
    for data in _read_logs(directory):
        for batch in iter_batches(data):
            rows.extend((r.offset, r.key, r.timestamp) for r in batch.records())
    rows.sort()
    later: dict[bytes, tuple[int, int]] = {}  # key -> (offset, timestamp) of the next record
    for offset, key, timestamp in reversed(rows):
        if key is None:
            continue
        found = later.get(key)
        if found is not None:
            into.add(offset, found[0], now - found[1])
        later[key] = (offset, timestamp)
    return len(rows)
