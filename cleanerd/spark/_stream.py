"""``readStream.format("kafka-log")``: a Structured Streaming source that follows a live log dir.

An offset is, per partition (``<topic>-<partition>``), the next offset: one past the last
complete batch of its active segment, found from the last ``.index`` entry on. A micro-batch
reads ``[start, end)`` of each partition that grew with the batch reader's planning and
reading, so it sees exactly what a batch read bounded to those offsets sees. Writers follow
the writer contract (append to the active segment, roll by starting a new one), so a
micro-batch never meets a half-written batch below its end offset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from cleanerd.inspect import segment_logs
from cleanerd.spark._read_options import ReadOptions
from cleanerd.spark._read_ranges import PartitionDir, partition_dirs, partition_txns, segment_ranges
from cleanerd.spark._segment_read import ReadSpec, read_ranges
from cleanerd.storage import LogSegment
from cleanerd.topics import LogConfig

if TYPE_CHECKING:
    from cleanerd.spark._metrics import ReadMetrics

Offsets = dict[str, int]


def _key(part: PartitionDir) -> str:
    return f"{part.topic}-{part.partition}"


def log_start(part: PartitionDir) -> int:
    """The first segment's base offset: no record of the partition lies below it."""
    logs = segment_logs(part.path)
    return logs[0][0] if logs else 0


def next_offset(part: PartitionDir) -> int:
    """One past the last complete batch of the partition (its high watermark, as on disk)."""
    logs = segment_logs(part.path)
    if not logs:
        return 0
    base, _ = logs[-1]
    return LogSegment(part.path, base, LogConfig()).next_offset()


class StreamPartition(InputPartition):
    """One task of a micro-batch: a range and the bounds of its partition's offset window."""

    def __init__(self, ranges: Any, spec: ReadSpec) -> None:
        super().__init__(None)
        self.ranges = ranges
        self.spec = spec


class KafkaLogStreamReader(DataSourceStreamReader):
    """Micro-batches of the records appended to the log dir's partitions."""

    def __init__(self, options: ReadOptions, metrics: ReadMetrics | None) -> None:
        self.options = options
        self.metrics = metrics

    def _parts(self) -> list[PartitionDir]:
        return partition_dirs(Path(self.options.path), self.options.bounds())

    def initialOffset(self) -> Offsets:  # noqa: N802 (Spark's names)
        parts = self._parts()
        if self.options.starting_offsets == "latest":
            return {_key(p): next_offset(p) for p in parts}
        return {_key(p): log_start(p) for p in parts}

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:  # noqa: N802
        latest = dict(start or {})
        for part in self._parts():
            end = next_offset(part)
            if self.options.committed:  # a read_committed consumer stops at the LSO
                end = min(end, partition_txns(part).last_stable_offset)
            latest[_key(part)] = max(end, latest.get(_key(part), 0))
        return latest

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        base_spec = self.options.spec(self.options.bounds())
        for part in self._parts():
            key = _key(part)
            lo = start.get(key, log_start(part))
            hi = end.get(key, lo)
            if hi <= lo:
                continue
            bounds = base_spec.bounds.with_offset_range(lo, hi - 1)
            ranges = segment_ranges(part, bounds, self.options.max_segment_bytes_per_task)
            if self.options.committed and ranges:
                txns = partition_txns(part)
                ranges = [replace(r, txns=txns) for r in ranges]
            spec = replace(base_spec, bounds=bounds)
            out.extend(StreamPartition([r], spec) for r in ranges)
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, StreamPartition):
            raise TypeError(f"kafka-log: unexpected input partition {partition!r}")
        return read_ranges(partition.ranges, partition.spec, self.metrics)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the log is read in place."""
