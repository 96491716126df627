"""Rows per second into Spark: the ``kafka-log`` source against a Parquet copy of the same rows.

Run ``.venv/bin/python bench/spark_read.py [--records N] [--codecs none,lz4] [--repeat R]
[--master local[2]] [--task-bytes B] [--out DIR]``. The issue's figures are N=1,000,000 for
the uncompressed and lz4 logs (the defaults).

Data (``cleanerd gen``'s generator, cached in ``--out``): one partition of N records per codec,
N/10 keys, 100-byte values, 5 % tombstones, 100 records per batch, Kafka's default 1 GiB
segments (so the task split comes from ``max_segment_bytes_per_task``, ``--task-bytes``).
The Parquet copy is written once by Spark from a ``kafka-log`` read (every column).

Queries, each timed best of ``--repeat`` after one warm-up run (JVM, Python workers, numba):

- ``count``: ``df.count()``. Parquet answers it from the footers' row counts, without reading
  a row, so its ratio says little; the next two read the data.
- ``group_by_key``: ``df.groupBy("key").count()`` written to Spark's ``noop`` sink.
- ``scan_all``: every column of every row written to the ``noop`` sink.
- ``count_key_only``, ``group_by_key_key_only``: the first two on a ``kafka-log`` read with
  ``include_values=false``. Python data sources get no column pruning, so every query of a
  plain read carries the values from the Python workers into the JVM, where Parquet reads only
  the columns the query uses; the key-only scan is the source's answer to that.

Ratio = kafka-log seconds / Parquet seconds (the aim: 2 or less). Prints one JSON document on
stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _facts import emit

from cleanerd.spark.read import read_log
from cleanerd.spark.session import build_session
from cleanerd.workload import WorkloadSpec, generate

VERSION = 1  # bump when the data layout changes


def log(msg: str) -> None:
    print(f"[spark_read] {msg}", file=sys.stderr, flush=True)


def build(out: Path, records: int, codec: str) -> Path:
    """The cached log dir of one codec (generated when missing)."""
    root = out / f"spark-read-v{VERSION}-{codec}-{records}"
    done = root / "built"
    if done.exists():
        return root / "logs"
    spec = WorkloadSpec(
        topic="bench",
        records=records,
        keys=max(1, records // 10),
        value_bytes=100,
        tombstone_ratio=0.05,
        codec=codec,
        records_per_batch=100,
        segment_bytes=1024**3,
        seed=7,
    )
    started = time.perf_counter()
    generate(root / "logs", spec)
    done.write_text("ok\n")
    log(f"generated {records} {codec} records in {time.perf_counter() - started:.1f}s")
    return root / "logs"


def best(run: Callable[[], object], repeat: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def queries(df: Any) -> dict[str, Callable[[], object]]:
    return {
        "count": df.count,
        "group_by_key": lambda: (
            df.groupBy("key").count().write.format("noop").mode("overwrite").save()
        ),
        "scan_all": lambda: df.write.format("noop").mode("overwrite").save(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--task-bytes", type=int, default=32 * 1024 * 1024)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()
    load = os.getloadavg()
    spark = build_session(args.master, app_name="cleanerd-bench-spark-read")
    results: dict[str, Any] = {}
    for codec in args.codecs.split(","):
        logdir = build(args.out, args.records, codec)
        source = read_log(spark, str(logdir), max_segment_bytes_per_task=args.task_bytes)
        parquet_dir = logdir.parent / "parquet"
        if not (parquet_dir / "_SUCCESS").exists():
            source.write.mode("overwrite").parquet(str(parquet_dir))
        parquet = spark.read.parquet(str(parquet_dir))
        rows = source.count()
        per_codec: dict[str, Any] = {"rows": rows, "segment_bytes": _size(logdir)}
        key_only = read_log(
            spark,
            str(logdir),
            max_segment_bytes_per_task=args.task_bytes,
            include_values=False,
        )
        runs = {
            **queries(source),
            "count_key_only": queries(key_only)["count"],
            "group_by_key_key_only": queries(key_only)["group_by_key"],
        }
        for name, run in runs.items():
            kafka_s = best(run, args.repeat)
            parquet_s = best(queries(parquet)[name.removesuffix("_key_only")], args.repeat)
            per_codec[name] = {
                "kafka_log_s": round(kafka_s, 3),
                "parquet_s": round(parquet_s, 3),
                "kafka_log_rows_per_s": round(rows / kafka_s),
                "parquet_rows_per_s": round(rows / parquet_s),
                "ratio": round(kafka_s / parquet_s, 2),
            }
            log(f"{codec} {name}: kafka-log {kafka_s:.2f}s, parquet {parquet_s:.2f}s")
        results[codec] = per_codec
    spark.stop()
    emit(
        "spark_read",
        load,
        params={
            "records": args.records,
            "master": args.master,
            "task_bytes": args.task_bytes,
            "repeat": args.repeat,
        },
        results=results,
    )


def _size(logdir: Path) -> int:
    return sum(p.stat().st_size for p in logdir.rglob("*.log"))


if __name__ == "__main__":
    main()
