"""The ``kafka-log`` data source: Kafka log dirs read by Spark's Python Data Source API.

``spark.read.format("kafka-log").load(LOGDIR)`` (or ``read_log``) plans one input partition
per segment, or per range of a big segment cut at its ``.index`` positions; the tasks read
their range into Arrow batches (``_batch_read``). ``readStream`` follows a live log dir
(``_stream``).

Every session knows the name: Spark registers :class:`KafkaLogDataSource` from the top-level
module ``pyspark_cleanerd`` when it first looks up Python data sources, in any session of any
program. So this module imports only pyspark's data source classes, which Spark has loaded
already; the readers and their kernels load on the first query. ``build_session`` and
``read_log`` register the source again as their session's pushdown setting needs
(``source_for``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

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
    # pyarrow and the kernels: loaded when a query is planned, not when the source is registered
    from pyspark.sql.pandas.types import from_arrow_schema  # noqa: PLC0415

    from cleanerd.spark._columns import ARROW_SCHEMA  # noqa: PLC0415

    return from_arrow_schema(ARROW_SCHEMA)


class KafkaLogDataSource(DataSource):
    """``format("kafka-log")``: see the module docstring and ``_read_options.OPTION_NAMES``.

    Its reader takes no pushed filters: Spark fails the query of a reader that can take them
    while ``spark.sql.python.filterPushdown.enabled`` is off (the default), and this is the
    class Spark registers in every session, whatever its setting. :class:`PushdownDataSource`
    is the one for a session with the setting on.
    """

    metrics: ClassVar[ReadMetrics | None] = None
    pushdown: ClassVar[bool] = False

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        # the first query loads the readers (see the module docstring)
        from cleanerd.spark._batch_read import KafkaLogReader, PushdownReader  # noqa: PLC0415
        from cleanerd.spark._read_options import parse_options  # noqa: PLC0415

        reader = PushdownReader if self.pushdown else KafkaLogReader
        return reader(parse_options(self.options), self.metrics)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from cleanerd.spark._read_options import parse_options  # noqa: PLC0415 (as in reader)
        from cleanerd.spark._stream import KafkaLogStreamReader  # noqa: PLC0415 (streaming only)

        return KafkaLogStreamReader(parse_options(self.options), self.metrics)


class PushdownDataSource(KafkaLogDataSource):
    """``kafka-log`` for a session with filter pushdown on: its reader seeks through the
    indexes to the offsets and timestamps Spark's filters ask for."""

    pushdown = True


_counted = itertools.count(1)


def pushdown_enabled(spark: SparkSession) -> bool:
    return str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"


def source_for(spark: SparkSession, metrics: ReadMetrics | None) -> str:
    """Register the source as the session's settings need it and return the format name.

    ``kafka-log`` is registered as the session is now (with pushdown or without, see
    :class:`KafkaLogDataSource`): call this again (``build_session`` and ``read_log`` do)
    after changing the setting. With ``metrics``, a subclass is registered under a name of its
    own whose tasks add to them (the class travels to the executors by value, accumulators
    included: options can only carry strings).
    """
    source = PushdownDataSource if pushdown_enabled(spark) else KafkaLogDataSource
    if metrics is None:
        spark.dataSource.register(source)
        return NAME
    name = f"{NAME}-counted-{next(_counted)}"

    def source_name(cls: type[KafkaLogDataSource]) -> str:
        return name

    variant = type(
        "KafkaLogDataSourceVariant",
        (source,),
        {
            "metrics": metrics,
            "name": classmethod(source_name),
            "__module__": "__kafka_log_variant__",  # not importable: pickled by value
        },
    )
    spark.dataSource.register(variant)
    return name
