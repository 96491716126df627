"""Counters a ``kafka-log`` read adds to from its tasks: Spark accumulators, read on the driver.

Python data sources have no custom task metrics, so these travel inside the data source class
(``_datasource.KafkaLogDataSource.metrics``): every task adds what its range cost, whether it
read the range to the end or failed, and the driver reads the totals once the action finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cleanerd.spark._segment_read import RangeStats


@dataclass(frozen=True)
class ReadTotals:
    bytes_read: int
    corrupt_bytes: int
    corrupt_ranges: int
    records: int


class ReadMetrics:
    """Accumulators for one or more reads: segment bytes read, bad bytes skipped, records."""

    def __init__(self, spark: SparkSession) -> None:
        sc = spark.sparkContext
        self.bytes_read: Any = sc.accumulator(0)
        self.corrupt_bytes: Any = sc.accumulator(0)
        self.corrupt_ranges: Any = sc.accumulator(0)
        self.records: Any = sc.accumulator(0)

    def add(self, stats: RangeStats) -> None:
        """Called in a task: add one range's counts."""
        self.bytes_read.add(stats.bytes_read)
        self.corrupt_bytes.add(stats.corrupt_bytes)
        self.corrupt_ranges.add(stats.corrupt_errors)
        self.records.add(stats.records)

    def totals(self) -> ReadTotals:
        """On the driver, after an action: what every finished task added."""
        return ReadTotals(
            int(self.bytes_read.value),
            int(self.corrupt_bytes.value),
            int(self.corrupt_ranges.value),
            int(self.records.value),
        )
