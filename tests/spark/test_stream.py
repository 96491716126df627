"""``readStream.format("kafka-log")`` follows a log dir that ``cleanerd gen`` appends to.

The query runs while the log grows (new batches and new segments); after each
``processAllAvailable`` the memory sink must hold exactly what a batch read of the log dir
holds then: every record once, none missing, in each partition's offset order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cleanerd.spark._read import read_log
from cleanerd.workload import WorkloadSpec, generate


def _spec(records: int, seed: int, *, append: bool) -> WorkloadSpec:
    return WorkloadSpec(
        topic="live",
        partitions=2,
        records=records,
        keys=40,
        records_per_batch=10,
        transactional_producers=1,
        abort_ratio=0.5,
        segment_bytes=6_000,
        index_interval_bytes=500,
        seed=seed,
        append=append,
    )


def _rows(spark: Any, sql: str) -> list[tuple[str, int, int]]:
    return sorted((r[0], r[1], r[2]) for r in spark.sql(sql).collect())


def _batch(spark: Any, root: Path, **options: Any) -> list[tuple[str, int, int]]:
    df = read_log(spark, str(root), **options).select("topic", "partition", "offset")
    return sorted((r[0], r[1], r[2]) for r in df.collect())


def test_stream_picks_up_appends(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    generate(root, _spec(150, 1, append=False))
    queries = []
    for name, isolation in (
        ("kafka_log_all", "read_uncommitted"),
        ("kafka_log_rc", "read_committed"),
    ):
        stream = (
            spark.readStream.format("kafka-log")
            .option("isolation", isolation)
            .load(str(root))
            .select("topic", "partition", "offset")
        )
        queries.append(
            stream.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
    try:
        for query in queries:
            query.processAllAvailable()
        first = _rows(spark, "select * from kafka_log_all")
        assert first == _batch(spark, root)
        assert _rows(spark, "select * from kafka_log_rc") == _batch(
            spark, root, isolation="read_committed"
        )
        segments_before = len(list((root / "live-0").glob("*.log")))

        generate(root, _spec(200, 2, append=True))
        for query in queries:
            query.processAllAvailable()
        assert len(list((root / "live-0").glob("*.log"))) > segments_before
        after = _rows(spark, "select * from kafka_log_all")
        assert len(after) > len(first)
        assert after == _batch(spark, root)
        assert _rows(spark, "select * from kafka_log_rc") == _batch(
            spark, root, isolation="read_committed"
        )
    finally:
        for query in queries:
            query.stop()
