"""``read_log``: a log dir as a DataFrame in one call, its options checked first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cleanerd.spark._read_options import parse_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cleanerd.spark._metrics import ReadMetrics


def _option_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_log(
    spark: SparkSession,
    path: str,
    *,
    metrics: ReadMetrics | None = None,
    **options: object,
) -> DataFrame:
    """``spark.read.format("kafka-log").load(path)`` with ``options`` (checked here first).

    With ``metrics`` (a :class:`~cleanerd.spark._metrics.ReadMetrics`), the read's tasks add
    the bytes they read and the corrupt bytes they skipped to its accumulators. Without a
    ``min_tasks`` option, the session's default parallelism is used (its cores, in local mode).
    """
    from cleanerd.spark._datasource import source_for  # noqa: PLC0415 (pyspark loads on use)

    texts = {key: _option_text(value) for key, value in options.items()}
    if "min_tasks" not in {key.lower() for key in texts}:
        cores = _default_parallelism(spark)
        if cores is not None:
            texts["min_tasks"] = str(cores)
    parse_options({**texts, "path": str(path)})
    name = source_for(spark, metrics)
    return spark.read.format(name).options(**texts).load(str(path))


def _default_parallelism(spark: SparkSession) -> int | None:
    """The session's default parallelism, or None where it has no SparkContext (Connect)."""
    try:
        cores = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect's session has no SparkContext; it raises its own types
        return None
    return cores if cores > 0 else None
