"""The ``kafka-log`` batch reader: plans segment ranges on the driver, reads one range per task.

Apart from the data source (``_datasource``) so that naming the source costs nothing: Spark
imports the source in every session that looks its Python data sources up (``pyspark_cleanerd``),
while this module's imports (numba kernels, pyarrow) load only when a query reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from cleanerd.spark._pushdown import push
from cleanerd.spark._read_options import ReadOptions
from cleanerd.spark._read_ranges import SegmentRange, plan
from cleanerd.spark._segment_read import read_ranges

if TYPE_CHECKING:
    from cleanerd.spark._metrics import ReadMetrics


class RangePartition(InputPartition):
    """One task: a byte range of a segment."""

    def __init__(self, segment_range: SegmentRange) -> None:
        super().__init__(segment_range)
        self.range = segment_range


class KafkaLogReader(DataSourceReader):
    """Batch reader: plans ranges on the driver, reads one range per task."""

    def __init__(self, options: ReadOptions, metrics: ReadMetrics | None) -> None:
        self.options = options
        self.metrics = metrics
        self.bounds = options.bounds()

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan(
            Path(self.options.path),
            self.bounds,
            max_bytes=self.options.max_segment_bytes_per_task,
            committed=self.options.committed,
            min_tasks=self.options.min_tasks,
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            if partition.value is None:  # Spark's stand-in when nothing was planned
                return iter(())
            raise TypeError(f"kafka-log: unexpected input partition {partition!r}")
        return read_ranges([partition.range], self.options.spec(self.bounds), self.metrics)


class PushdownReader(KafkaLogReader):
    """The reader with ``pushFilters``: Spark refuses a reader that has it unless
    ``spark.sql.python.filterPushdown.enabled`` is true, so the other one is used then."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        self.bounds, rejected = push(self.bounds, filters)
        yield from rejected
