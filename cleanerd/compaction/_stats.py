"""What one cleaning did: Kafka's ``CleanerStats`` and ``PreCleanStats`` (kafka-format.md §4.15).

The engine fills ``CleanerStats`` during a pass; the daemon turns it into the one summary log line
(``summary``, Kafka's per-pass message as a JSON-ready dict) and the metrics (recopy ratio, buffer
utilization, bytes, records removed). Ratios and rates are 0.0 where Kafka would divide by zero and
print NaN or Infinity, so an empty cleaning still logs valid JSON. Sizes are bytes and times
seconds, as in the metrics: Kafka's message prints MB (2**20 bytes) and we leave the scaling to
whoever reads the log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cleanerd.storage import TopicPartition

_COUNTERS = (
    "bytes_read",
    "messages_read",
    "bytes_written",
    "messages_written",
    "map_bytes_read",
    "map_messages_read",
    "invalid_messages_read",
    "tombstones_expired",
    "tombstones_superseded",
    "txn_indexes_rebuilt",
    "markers_removed",
    "aborted_records_removed",
    "batches_copied",
    "batches_rebuilt",
    "batches_dropped_without_decompressing",
    "batch_records_deleted",
    "anomalous_version_headers",
    "passes",
)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


@dataclass(slots=True)
class CleanerStats:
    """Counters and times of one cleaning pass (or, after ``merge``, of several).

    Times come from ``clock`` (seconds, monotonic by default) so tests control them. Kafka's fields
    first, then cleanerd's: what was removed and how batches were handled.
    """

    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    start_time: float = math.nan  # NaN: read the clock at creation
    map_complete_time: float | None = None
    end_time: float | None = None
    # Kafka's CleanerStats
    bytes_read: int = 0  # by the cleaning walk, the recopied clean prefix included
    messages_read: int = 0  # records in batches the walk decoded (not in batches deleted whole)
    bytes_written: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0  # complete-batch bytes scanned building the offset map
    map_messages_read: int = 0  # records scanned for the map (a control batch counts 1)
    invalid_messages_read: int = 0  # unkeyed records, removed
    buffer_utilization: float = 0.0  # offset map entries / slots at the end of the map build
    # cleanerd's
    tombstones_expired: int = 0  # won their key, but their delete horizon passed (retention)
    tombstones_superseded: int = 0  # a newer record of their key won
    markers_removed: int = 0
    aborted_records_removed: int = 0
    batches_copied: int = 0  # kept whole, copied as bytes
    batches_rebuilt: int = 0
    batches_dropped_without_decompressing: int = 0
    batch_records_deleted: int = 0  # in batches deleted whole, unread (not in messages_read)
    anomalous_version_headers: int = 0  # header strategy: version header of the wrong length
    passes: int = 0  # completed passes: ``all_done`` counts one
    txn_indexes_rebuilt: int = 0  # .txnindex files that disagreed with the ABORT markers
    txn_index_problems: tuple[str, ...] = ()  # what they said wrong, file and entry named

    def __post_init__(self) -> None:
        if math.isnan(self.start_time):
            self.start_time = self.clock()

    # --- Kafka's recording methods -------------------------------------------------------------

    def read_messages(self, messages: int, size_bytes: int) -> None:
        self.messages_read += messages
        self.bytes_read += size_bytes

    def invalid_message(self, count: int = 1) -> None:
        self.invalid_messages_read += count

    def recopy_messages(self, messages: int, size_bytes: int) -> None:
        self.messages_written += messages
        self.bytes_written += size_bytes

    def index_messages_read(self, count: int) -> None:
        self.map_messages_read += count

    def index_bytes_read(self, size_bytes: int) -> None:
        self.map_bytes_read += size_bytes

    def index_done(self) -> None:
        """The offset map is built; the rest of the pass is cleaning."""
        self.map_complete_time = self.clock()

    def all_done(self) -> None:
        """The pass finished (swap included); counts it in ``passes``."""
        self.end_time = self.clock()
        self.passes += 1

    def add(
        self,
        *,
        tombstones_expired: int = 0,
        tombstones_superseded: int = 0,
        markers_removed: int = 0,
        aborted_records_removed: int = 0,
        batches_copied: int = 0,
        batches_rebuilt: int = 0,
        batches_dropped_without_decompressing: int = 0,
        batch_records_deleted: int = 0,
        anomalous_version_headers: int = 0,
    ) -> None:
        """Add cleanerd's own counts, as the cleaner learns them per batch."""
        self.tombstones_expired += tombstones_expired
        self.tombstones_superseded += tombstones_superseded
        self.markers_removed += markers_removed
        self.aborted_records_removed += aborted_records_removed
        self.batches_copied += batches_copied
        self.batches_rebuilt += batches_rebuilt
        self.batches_dropped_without_decompressing += batches_dropped_without_decompressing
        self.batch_records_deleted += batch_records_deleted
        self.anomalous_version_headers += anomalous_version_headers

    # --- derived figures -----------------------------------------------------------------------

    @property
    def elapsed_s(self) -> float:
        """Whole pass; up to now while it runs (Kafka's ``elapsedSecs``)."""
        end = self.end_time if self.end_time is not None else self.clock()
        return max(0.0, end - self.start_time)

    @property
    def map_elapsed_s(self) -> float:
        """Building the offset map (Kafka's ``elapsedIndexSecs``); all of it if never completed."""
        if self.map_complete_time is None:
            return self.elapsed_s
        return min(self.elapsed_s, max(0.0, self.map_complete_time - self.start_time))

    @property
    def clean_elapsed_s(self) -> float:
        """Pass 2: whole time minus map time, as Kafka computes it."""
        return max(0.0, self.elapsed_s - self.map_elapsed_s)

    @property
    def bytes_per_s(self) -> float:
        return _ratio(self.bytes_read, self.elapsed_s)

    @property
    def map_bytes_per_s(self) -> float:
        return _ratio(self.map_bytes_read, self.map_elapsed_s)

    @property
    def clean_bytes_per_s(self) -> float:
        """Kafka divides all bytes read (not only pass 2's) by the clean time; so do we."""
        return _ratio(self.bytes_read, self.clean_elapsed_s)

    @property
    def tombstones_removed(self) -> int:
        """Both kinds: expired (delete.retention.ms) and superseded (a newer record won)."""
        return self.tombstones_expired + self.tombstones_superseded

    @property
    def size_reduction_ratio(self) -> float:
        """1 - written / read; 0.0 when nothing was read."""
        return 1.0 - self.bytes_written / self.bytes_read if self.bytes_read > 0 else 0.0

    @property
    def records_reduction_ratio(self) -> float:
        """1 - records written / records read; 0.0 when nothing was read."""
        if self.messages_read <= 0:
            return 0.0
        return 1.0 - self.messages_written / self.messages_read

    @property
    def recopy_ratio(self) -> float:
        """Kafka's cleaner-recopy-percent / 100: bytes written / max(bytes read, 1)."""
        return self.bytes_written / max(self.bytes_read, 1)

    @property
    def records_removed(self) -> int:
        return max(0, self.messages_read - self.messages_written)

    @property
    def records_erased(self) -> int:
        """Every record the cleaning removed: ``records_removed`` and the records of the
        batches it deleted whole without reading them (the erasure ledger's count)."""
        return max(0, self.messages_read + self.batch_records_deleted - self.messages_written)

    # --- combining and reporting ---------------------------------------------------------------

    def merge(self, other: CleanerStats) -> CleanerStats:
        """Totals of two cleanings: counts and durations add, buffer utilization is the max.

        The result starts at the earlier start and its map and end times are placed so that its
        ``map_elapsed_s`` and ``elapsed_s`` are the sums, whatever the gaps between the passes.
        """
        start = min(self.start_time, other.start_time)
        merged = CleanerStats(
            clock=self.clock,
            start_time=start,
            map_complete_time=start + self.map_elapsed_s + other.map_elapsed_s,
            end_time=start + self.elapsed_s + other.elapsed_s,
            buffer_utilization=max(self.buffer_utilization, other.buffer_utilization),
            txn_index_problems=self.txn_index_problems + other.txn_index_problems,
        )
        for name in _COUNTERS:
            setattr(merged, name, getattr(self, name) + getattr(other, name))
        return merged

    @classmethod
    def total(
        cls, stats: Iterable[CleanerStats], *, clock: Callable[[], float] = time.monotonic
    ) -> CleanerStats:
        """``merge`` over many; for none, a finished all-zero stats."""
        result: CleanerStats | None = None
        for item in stats:
            result = item if result is None else result.merge(item)
        if result is None:
            now = clock()
            return cls(clock=clock, start_time=now, map_complete_time=now, end_time=now)
        return result

    def summary(
        self, topic_partition: TopicPartition | str, first_dirty: int, end_offset: int
    ) -> dict[str, Any]:
        """Kafka's per-pass log message as flat snake_case fields, plus the raw counts; JSON-ready.

        In bytes where Kafka prints MB: its "MB of log processed", "cleaned MB" and "start size"
        are all ``bytes_read``, "indexed MB" is ``map_bytes_read``, "end size" ``bytes_written``.
        """
        elapsed, map_s, clean_s = self.elapsed_s, self.map_elapsed_s, self.clean_elapsed_s
        return {
            "partition": str(topic_partition),
            "dirty_section_start": first_dirty,
            "dirty_section_end": end_offset,
            "seconds": round(elapsed, 3),
            "bytes_per_s": round(self.bytes_per_s),
            "index_seconds": round(map_s, 3),
            "index_bytes_per_s": round(self.map_bytes_per_s),
            "index_time_percent": round(100 * _ratio(map_s, elapsed), 2),
            "buffer_utilization_percent": round(100 * self.buffer_utilization, 2),
            "clean_seconds": round(clean_s, 3),
            "clean_bytes_per_s": round(self.clean_bytes_per_s),
            "clean_time_percent": round(100 * _ratio(clean_s, elapsed), 2),
            "start_messages": self.messages_read,
            "end_messages": self.messages_written,
            "size_reduction_percent": round(100 * self.size_reduction_ratio, 2),
            "fewer_messages_percent": round(100 * self.records_reduction_ratio, 2),
            "recopy_ratio": round(self.recopy_ratio, 6),
            "buffer_utilization": self.buffer_utilization,
            **{name: getattr(self, name) for name in _COUNTERS},
            "tombstones_removed": self.tombstones_removed,
            **(
                {"txn_index_problems": list(self.txn_index_problems)}
                if self.txn_index_problems
                else {}
            ),
        }


@dataclass(slots=True)
class PreCleanStats:
    """The last grab's view (Kafka's ``PreCleanStats``), for max-compaction-delay and a log line."""

    max_compaction_delay_ms: int = 0
    delayed_partitions: int = 0  # candidates with a KIP-354 delay > 0
    cleanable_partitions: int = 0  # candidates that passed the threshold

    def update_max_compaction_delay(self, delay_ms: int) -> None:
        """Called once per candidate log with its delay (0 when not overdue)."""
        self.max_compaction_delay_ms = max(self.max_compaction_delay_ms, delay_ms)
        if delay_ms > 0:
            self.delayed_partitions += 1

    def record_cleanable_partitions(self, count: int) -> None:
        self.cleanable_partitions = count

    @property
    def max_compaction_delay_s(self) -> float:
        return self.max_compaction_delay_ms / 1000

    def summary(self) -> dict[str, int]:
        """Fields of Kafka's extra log line, written when ``delayed_partitions > 0``."""
        return {
            "cleanable_partitions": self.cleanable_partitions,
            "delayed_partitions": self.delayed_partitions,
            "max_compaction_delay_ms": self.max_compaction_delay_ms,
        }
