"""The Spark engine: Kafka log dirs as Spark DataFrames and compaction distributed on Spark.

A driver over format/, storage/ and compaction/, like service/ is; nothing below it imports
pyspark. Needs the ``spark`` extra (``pip install 'cleanerd[spark]'``). Importing this package
loads nothing of the engine: each name below is imported on first use, so ``cleanerd config``
can ask ``require_pyspark`` without paying for the engine, and a name that needs pyspark or
pyarrow raises :class:`SparkMissingError`, with the advice, when the extra is missing.

``cleanerd.spark.executor`` is the module Spark's Python daemon runs on executors (set by
``build_session``); it is an entry point by name, not an import. So is the top-level module
``pyspark_cleanerd``, beside this package: Spark registers its ``DefaultSource``,
:class:`KafkaLogDataSource`, in every session, so ``format("kafka-log")`` needs no
``build_session``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cleanerd.spark._columns import record_batch
    from cleanerd.spark._compact import (
        Options,
        PartitionJob,
        Plan,
        compact_on_spark,
        map_bytes_needed,
    )
    from cleanerd.spark._daemon_job import SparkCleaner
    from cleanerd.spark._datasource import KafkaLogDataSource
    from cleanerd.spark._metrics import ReadMetrics, ReadTotals
    from cleanerd.spark._read import read_log
    from cleanerd.spark._session import build_session

from cleanerd.spark._extra import INSTALL_HINT, SparkMissingError, require_pyspark

_HOMES = {
    "KafkaLogDataSource": "_datasource",
    "Options": "_compact",
    "PartitionJob": "_compact",
    "Plan": "_compact",
    "ReadMetrics": "_metrics",
    "ReadTotals": "_metrics",
    "SparkCleaner": "_daemon_job",
    "build_session": "_session",
    "compact_on_spark": "_compact",
    "map_bytes_needed": "_compact",
    "read_log": "_read",
    "record_batch": "_columns",
}
"""Each lazily imported name -> its private module."""
_NEEDS_EXTRA = frozenset({"_read", "_columns"})  # pyspark or pyarrow at import
# not _datasource: it needs pyspark only, and Spark imports it in every session that looks up its
# Python data sources (pyspark_cleanerd), where checking for pyarrow would cost a third of a second

__all__ = [
    "INSTALL_HINT",
    "KafkaLogDataSource",
    "Options",
    "PartitionJob",
    "Plan",
    "ReadMetrics",
    "ReadTotals",
    "SparkCleaner",
    "SparkMissingError",
    "build_session",
    "compact_on_spark",
    "map_bytes_needed",
    "read_log",
    "record_batch",
    "require_pyspark",
]


def __getattr__(name: str) -> object:
    """The names of ``_HOMES``, imported on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if home in _NEEDS_EXTRA:
        require_pyspark()
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups skip this function
    return value
