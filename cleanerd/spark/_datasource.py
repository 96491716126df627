"""The ``kafka-log`` data source: Kafka log dirs read by Spark's Python Data Source API.

``spark.read.format("kafka-log").load(LOGDIR)`` (or ``read_log``) plans one input partition
per segment, or per range of a big segment cut at its ``.index`` positions; the tasks read
their range into Arrow batches (``segment_read``). ``readStream`` follows a live log dir
(``stream``). Sessions from ``session.build_session`` register it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from cleanerd.spark._columns import ARROW_SCHEMA
from cleanerd.spark._pushdown import push
from cleanerd.spark._read_options import ReadOptions, parse_options
from cleanerd.spark._read_ranges import SegmentRange, plan
from cleanerd.spark._segment_read import read_ranges

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cleanerd.spark._metrics import ReadMetrics

NAME = "kafka-log"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def spark_schema() -> StructType:
    """The columns of a read: ``columns.ARROW_SCHEMA`` in Spark's terms (one definition).

    Only what Kafka can leave out is nullable (timestamp, key, value, a header's value,
    control_type). Spark trusts the rest never to be null (its optimizer drops IsNotNull
    filters on them, and the copy out of the Arrow batches skips their null checks), so a
    test holds every batch to it.
    """
    return from_arrow_schema(ARROW_SCHEMA)


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


class KafkaLogDataSource(DataSource):
    """``format("kafka-log")``: see the module docstring and ``_read_options.OPTION_NAMES``."""

    metrics: ClassVar[ReadMetrics | None] = None
    pushdown: ClassVar[bool] = True

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        reader = PushdownReader if self.pushdown else KafkaLogReader
        return reader(parse_options(self.options), self.metrics)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from cleanerd.spark._stream import KafkaLogStreamReader  # noqa: PLC0415 (streaming only)

        return KafkaLogStreamReader(parse_options(self.options), self.metrics)


_counted = itertools.count(1)


def pushdown_enabled(spark: SparkSession) -> bool:
    return str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"


def source_for(spark: SparkSession, metrics: ReadMetrics | None) -> str:
    """Register the source as the session's settings need it and return the format name.

    Without filter pushdown enabled the reader must not have ``pushFilters`` (Spark fails the
    query otherwise), so ``kafka-log`` is registered as the session is now: call this again
    (``build_session`` and ``read_log`` do) after changing the setting. With ``metrics``, a
    subclass is registered under a name of its own whose tasks add to them (the class travels
    to the executors by value, accumulators included: options can only carry strings).
    """
    pushdown = pushdown_enabled(spark)
    if metrics is None and pushdown:
        spark.dataSource.register(KafkaLogDataSource)
        return NAME
    name = NAME if metrics is None else f"{NAME}-counted-{next(_counted)}"

    def source_name(cls: type[KafkaLogDataSource]) -> str:
        return name

    variant = type(
        "KafkaLogDataSourceVariant",
        (KafkaLogDataSource,),
        {
            "metrics": metrics,
            "pushdown": pushdown,
            "name": classmethod(source_name),
            "__module__": "__kafka_log_variant__",  # not importable: pickled by value
        },
    )
    spark.dataSource.register(variant)
    return name
