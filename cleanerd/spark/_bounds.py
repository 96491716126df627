"""Pushed-down filters as exact bounds: what a read keeps, decided without pyspark objects.

Spark does not re-check a filter the source accepted, so each accepted filter becomes a bound
that the planner uses to skip (segments, byte ranges through the indexes) and the reader
applies exactly, record by record. Timestamps arrive in microseconds (Spark's unit) and are
turned into inclusive millisecond bounds (Kafka's unit) without rounding loss.
"""

from __future__ import annotations

import calendar
import datetime as dt
import fnmatch
from dataclasses import dataclass, field, replace

from cleanerd.format import LONG_MAX, LONG_MIN

NO_TIMESTAMP = -1
"""Kafka's "no timestamp": read as a null ``timestamp``, so no timestamp filter keeps it."""


def to_micros(value: object) -> int:
    """A timestamp literal (datetime, aware or naive UTC) as microseconds since the epoch."""
    if not isinstance(value, dt.datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return calendar.timegm(value.timetuple()) * 1_000_000 + value.microsecond


@dataclass(frozen=True)
class Bounds:
    """The conjunction of accepted filters; ``None`` sets mean "any"."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_min: int = LONG_MIN
    partition_max: int = LONG_MAX
    offset_min: int = LONG_MIN
    offset_max: int = LONG_MAX
    ts_min_ms: int = LONG_MIN  # inclusive
    ts_max_ms: int = LONG_MAX  # inclusive
    ts_filtered: bool = False  # any timestamp filter (it drops null timestamps)
    topic_globs: tuple[str, ...] = field(default_factory=tuple)  # the ``topics`` option

    # --- narrowing ------------------------------------------------------------------------------
    def with_topics(self, names: frozenset[str]) -> Bounds:
        keep = names if self.topics is None else self.topics & names
        return replace(self, topics=keep)

    def with_partitions(self, numbers: frozenset[int]) -> Bounds:
        keep = numbers if self.partitions is None else self.partitions & numbers
        return replace(self, partitions=keep)

    def with_partition_range(self, lo: int, hi: int) -> Bounds:
        return replace(
            self,
            partition_min=max(self.partition_min, lo),
            partition_max=min(self.partition_max, hi),
        )

    def with_offset_range(self, lo: int, hi: int) -> Bounds:
        return replace(
            self, offset_min=max(self.offset_min, lo), offset_max=min(self.offset_max, hi)
        )

    def with_micros_range(self, lo_us: int | None, hi_us: int | None) -> Bounds:
        """Inclusive microsecond bounds: ``ms * 1000 >= lo`` is ``ms >= ceil(lo / 1000)``."""
        lo = self.ts_min_ms if lo_us is None else max(self.ts_min_ms, -(-lo_us // 1000))
        hi = self.ts_max_ms if hi_us is None else min(self.ts_max_ms, hi_us // 1000)
        return replace(self, ts_min_ms=lo, ts_max_ms=hi, ts_filtered=True)

    def only_timestamped(self) -> Bounds:
        return replace(self, ts_filtered=True)

    # --- questions ------------------------------------------------------------------------------
    def wants_topic(self, topic: str) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return not self.topic_globs or any(fnmatch.fnmatchcase(topic, g) for g in self.topic_globs)

    def wants_partition(self, partition: int) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        return self.partition_min <= partition <= self.partition_max

    @property
    def empty_offsets(self) -> bool:
        return self.offset_min > self.offset_max

    @property
    def empty_timestamps(self) -> bool:
        return self.ts_min_ms > self.ts_max_ms

    @property
    def ts_seek_from(self) -> int | None:
        """The lowest timestamp kept, when there is one worth seeking the ``.timeindex`` for."""
        return self.ts_min_ms if self.ts_filtered and self.ts_min_ms > LONG_MIN else None
