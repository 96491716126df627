"""Plan B's two Python data sources: the scan stage as a reader, the write stage as a writer.

Spark's ``mapInArrow`` needs pandas (pyspark 4.3 builds it on ``pandas_udf``); the Python data
source API moves Arrow record batches both ways without it. So the scan is a source whose input
partitions are the segments (``ScanJob.scan`` yields the batches), and the write stage is a sink
whose writer gets a partition of the winners shuffled by group (``WriteJob.write_batches``
writes the groups' ``.cleaned`` segments and their counters to the staging dir; the driver reads
them there after ``save`` returned, so a failed task fails the job before the driver acts).
A job travels in the ``job`` option, pickled (executors run the same cleanerd).
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from cleanerd.spark.winners import SCAN_SCHEMA, WINNER_COLUMNS

SCAN_SOURCE = "cleanerd-plan-b-scan"
WRITE_SINK = "cleanerd-plan-b-write"


def encode(job: object) -> str:
    return base64.b64encode(pickle.dumps(job)).decode("ascii")


def decode(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


class _ScanReader(DataSourceReader):
    def __init__(self, job: Any) -> None:
        self.job = job

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(len(self.job.segments.sources()))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        index, group = self.job.segments.sources()[int(partition.value)]
        yield from self.job.scan(index, group)


class ScanSource(DataSource):
    """``cleanerd-plan-b-scan``: option ``job``, a pickled ``winners.ScanJob``."""

    @classmethod
    def name(cls) -> str:
        return SCAN_SOURCE

    def schema(self) -> str:
        return SCAN_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ScanReader(decode(self.options["job"]))


class _GroupWriter(DataSourceArrowWriter):
    def __init__(self, job: Any) -> None:
        self.job = job

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        self.job.write_batches(iterator)
        return WriterCommitMessage()


class WriteSink(DataSource):
    """``cleanerd-plan-b-write``: option ``job``, a pickled ``plan_b.WriteJob``."""

    @classmethod
    def name(cls) -> str:
        return WRITE_SINK

    def schema(self) -> str:
        return ", ".join(f"{c} {t}" for c, t in zip(WINNER_COLUMNS, _WINNER_TYPES, strict=True))

    def writer(self, schema: StructType, overwrite: bool) -> _GroupWriter:
        return _GroupWriter(decode(self.options["job"]))


_WINNER_TYPES = ("int", "long", "long", "long", "long", "boolean")


def register(spark: Any) -> None:
    """Make both sources known to ``spark`` (idempotent)."""
    spark.dataSource.register(ScanSource)
    spark.dataSource.register(WriteSink)
