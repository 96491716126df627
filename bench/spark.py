"""Spark benchmarks of issue 14: reading log dirs into Spark, and compacting on Spark.

Run ``.venv/bin/python bench/spark.py [read|compact|all] [options]`` (``all``, the default, runs
both). The defaults are the issue's sizes; ``--quick`` gives the same comparisons on small data
in about a minute. Prints one JSON document on stdout (``_facts.emit``: machine, load averages
at the start and the end, commit); progress on stderr.

``read``: rows per second into Spark, the ``kafka-log`` source against Spark reading the same
records from a Parquet copy (the ratio is the figure: kafka-log seconds / Parquet seconds, the
aim is 2 or less). Data (``cleanerd gen``'s generator, cached in ``--out``): one partition of
``--read-records`` records per codec of ``--codecs``, a tenth as many keys, 100-byte values,
5 % tombstones, 100 records per batch, Kafka's default 1 GiB segments, so the task split comes
from ``max_segment_bytes_per_task`` (``--task-bytes``): by default the rule Spark applies to the
Parquet copy's files (``split_bytes``: the bytes over the default parallelism, at most 128 MiB),
so both sides run as many tasks. The Parquet copy is written once by Spark from a ``kafka-log``
read (every column). Queries:

- ``count``: ``df.count()``. Parquet answers it from its footers' row counts without reading a
  row; a Python data source cannot (Spark 4.x gives it no column pruning and no aggregate
  pushdown), so every query carries every column from the Python workers into the JVM.
- ``group_by_key``: ``df.groupBy("key").count()`` written to Spark's ``noop`` sink.
- ``scan_all``: every column of every row written to the ``noop`` sink.
- ``count_key_only``, ``group_by_key_key_only``: the first two on a ``kafka-log`` read with
  ``include_values=false`` (against the same Parquet queries).

Each query runs once untimed on each side (JVM, Python workers, numba kernels), then
``--repeat`` rounds, kafka-log and Parquet in turn, so load from other processes falls on both;
the JSON has every time, the medians, the bests and ``ratio`` (of the medians). On Linux each
run's CPU seconds (the JVM and its Python workers, from /proc) are taken too, and
``cpu_ratio`` compares their medians: on a machine shared with other jobs the wall times
mostly count waiting for a core, the CPU seconds what the query cost.

``compact``: the local one-shot engine (what ``cleanerd compact`` runs) against
``compact_on_spark``: ``--partitions`` partitions of ``--partition-records`` records in plan A,
and one partition of ``--big-records`` records in plan B, its time split into prepare, scan,
shuffle, write and swap. Every partition is rolled (all cleanable); each timed run works on a
fresh copy at one fixed ``now`` with ``delete.retention.ms`` 0; both results are checked to be
the local engine's files, byte for byte. The session is warmed on a tiny log with both plans
first, so neither the JVM's start nor the workers' imports are timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cleanerd._jitcache import configure_numba_cache

configure_numba_cache()  # before numba loads: importing cleanerd chooses no cache dir

from _facts import emit  # noqa: E402

from cleanerd.spark import build_session, read_log  # noqa: E402
from cleanerd.workload import WorkloadSpec, generate  # noqa: E402

NOW = 1_800_000_000_000
READ_VERSION = 1  # bump when the read data's layout changes
COMPACT_VERSION = 1  # bump when the compaction data's layout changes
QUICK = {
    "read_records": 200_000,
    "repeat": 3,
    "partitions": 8,
    "partition_records": 20_000,
    "big_records": 300_000,
}


def log(msg: str) -> None:
    print(f"[spark] {msg}", file=sys.stderr, flush=True)


# --- read ---------------------------------------------------------------------------------------
def read_data(out: Path, records: int, codec: str) -> Path:
    """The cached log dir of one codec (generated when missing)."""
    root = out / f"spark-read-v{READ_VERSION}-{codec}-{records}"
    if (root / "built").exists():
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
    (root / "built").write_text("ok\n")
    log(f"generated {records} {codec} records in {time.perf_counter() - started:.1f}s")
    return root / "logs"


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def queries(df: Any) -> dict[str, Callable[[], object]]:
    return {
        "count": df.count,
        "group_by_key": lambda: _noop(df.groupBy("key").count()),
        "scan_all": lambda: _noop(df),
    }


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _tree_cpu() -> float | None:
    """CPU seconds of this process's descendants (the JVM, the Python workers; workers that
    exited count in their reaper's ``cutime``), from /proc; None elsewhere."""
    try:
        stats = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
                stats[int(entry.name)] = (int(fields[1]), ticks)
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        total += stats[pid][1]
        stack.extend(children.get(pid, []))
    return total / _TICK


def _timed(run: Callable[[], object]) -> tuple[float, float | None]:
    """Wall seconds of ``run``, and the CPU seconds Spark's processes spent meanwhile."""
    cpu = _tree_cpu()
    started = time.perf_counter()
    run()
    wall = time.perf_counter() - started
    after = _tree_cpu()
    return wall, None if cpu is None or after is None else after - cpu


def compare(kafka: Callable[[], object], parquet: Callable[[], object], repeat: int) -> Any:
    """Both queries once untimed, then ``repeat`` rounds of each in turn."""
    kafka()
    parquet()
    k_runs, p_runs = [], []
    for _ in range(repeat):
        k_runs.append(_timed(kafka))
        p_runs.append(_timed(parquet))
    k_times, p_times = [w for w, _ in k_runs], [w for w, _ in p_runs]
    k_med, p_med = statistics.median(k_times), statistics.median(p_times)
    figures = {
        "kafka_log_s": [round(t, 3) for t in k_times],
        "parquet_s": [round(t, 3) for t in p_times],
        "kafka_log_median_s": round(k_med, 3),
        "parquet_median_s": round(p_med, 3),
        "ratio": round(k_med / p_med, 2),
        "ratio_best": round(min(k_times) / min(p_times), 2),
    }
    k_cpu = [c for _, c in k_runs if c is not None]
    p_cpu = [c for _, c in p_runs if c is not None]
    if k_cpu and p_cpu and statistics.median(p_cpu) > 0:
        figures["kafka_log_cpu_median_s"] = round(statistics.median(k_cpu), 3)
        figures["parquet_cpu_median_s"] = round(statistics.median(p_cpu), 3)
        figures["cpu_ratio"] = round(statistics.median(k_cpu) / statistics.median(p_cpu), 2)
    return figures


def bench_read(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    cores = spark.sparkContext.defaultParallelism
    for codec in args.codecs.split(","):
        logdir = read_data(args.out, args.read_records, codec)
        task_bytes = args.task_bytes or split_bytes(_size(logdir), cores)
        source = read_log(spark, str(logdir), max_segment_bytes_per_task=task_bytes)
        parquet_dir = logdir.parent / "parquet"
        if not (parquet_dir / "_SUCCESS").exists():
            source.write.mode("overwrite").parquet(str(parquet_dir))
        parquet = queries(spark.read.parquet(str(parquet_dir)))
        rows = source.count()
        key_only = queries(
            read_log(
                spark,
                str(logdir),
                max_segment_bytes_per_task=task_bytes,
                include_values=False,
            )
        )
        runs = {
            **queries(source),
            "count_key_only": key_only["count"],
            "group_by_key_key_only": key_only["group_by_key"],
        }
        per_codec: dict[str, Any] = {
            "rows": rows,
            "segment_bytes": _size(logdir),
            "task_bytes": task_bytes,
        }
        for name, run in runs.items():
            figures = compare(run, parquet[name.removesuffix("_key_only")], args.repeat)
            figures["kafka_log_rows_per_s"] = round(rows / figures["kafka_log_median_s"])
            figures["parquet_rows_per_s"] = round(rows / figures["parquet_median_s"])
            per_codec[name] = figures
            log(
                f"{codec} {name}: kafka-log {figures['kafka_log_median_s']:.2f}s, "
                f"parquet {figures['parquet_median_s']:.2f}s, ratio {figures['ratio']} "
                f"(CPU ratio {figures.get('cpu_ratio')})"
            )
        results[codec] = per_codec
    return {
        "params": {
            "records": args.read_records,
            "codecs": args.codecs,
            "task_bytes": args.task_bytes or "auto",
            "default_parallelism": cores,
            "repeat": args.repeat,
        },
        "results": results,
    }


def split_bytes(total: int, cores: int) -> int:
    """Spark's split size for file sources (``FilePartition.maxSplitBytes`` with its defaults,
    128 MiB and a 4 MiB open cost), applied to the log: what Spark does for the Parquet copy."""
    return min(128 << 20, max(4 << 20, -(-total // max(cores, 1))))


def _size(logdir: Path) -> int:
    return sum(p.stat().st_size for p in logdir.rglob("*.log"))


# --- compact ------------------------------------------------------------------------------------
def compact_data(out: Path, name: str, partitions: int, records: int) -> Path:
    """A cached log dir of ``partitions`` rolled partitions of ``records`` records each."""
    from cleanerd.storage import PartitionLog  # noqa: PLC0415

    logdir = out / f"spark-compact-v{COMPACT_VERSION}-{name}-{partitions}x{records}"
    if (logdir / "done").exists():
        return logdir
    shutil.rmtree(logdir, ignore_errors=True)
    started = time.monotonic()
    spec = WorkloadSpec(
        topic=name,
        partitions=partitions,
        records=records,
        keys=max(records // 10, 1),
        records_per_batch=100,
        tombstone_ratio=0.05,
        value_bytes=100,
        segment_bytes=64 << 20,
    )
    generate(logdir, spec)
    for directory in sorted(p for p in logdir.iterdir() if p.is_dir()):
        partition = PartitionLog(directory)
        partition.roll()
        partition.close()
    (logdir / "done").write_text("")
    log(f"built {logdir.name} in {time.monotonic() - started:.1f} s")
    return logdir


def _copy(logdir: Path, work: Path, name: str) -> Path:
    target = work / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(logdir, target, ignore=shutil.ignore_patterns("done"))
    return target


def _jobs(logdir: Path) -> list[Any]:
    from cleanerd.spark import PartitionJob  # noqa: PLC0415
    from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig  # noqa: PLC0415

    cleaner = dataclasses.replace(TopicCleanerConfig(), delete_retention_ms=0)
    return [
        PartitionJob(d, LogConfig(), cleaner, StrategyConfig())
        for d in sorted(p for p in logdir.iterdir() if p.is_dir())
    ]


def _digest(logdir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(logdir.rglob("*")):
        if p.is_file() and p.name not in ("done", ".lock"):
            h.update(str(p.relative_to(logdir)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _local(logdir: Path, map_bytes: int) -> float:
    from cleanerd.compaction import compact_directory  # noqa: PLC0415

    started = time.monotonic()
    for job in _jobs(logdir):
        compact_directory(
            job.directory, job.log, job.cleaner, job.strategy, NOW, map_bytes=map_bytes
        )
    return time.monotonic() - started


def _on_spark(spark: Any, logdir: Path, options: Any) -> tuple[float, list[Any]]:
    from cleanerd.spark import compact_on_spark  # noqa: PLC0415

    started = time.monotonic()
    outcomes = compact_on_spark(spark, _jobs(logdir), options)
    seconds = time.monotonic() - started
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        raise SystemExit(f"spark compaction failed: {failed}")
    return seconds, outcomes


def _phases(outcome: Any) -> dict[str, Any]:
    names = ("prepare", "scan", "shuffle", "write", "swap")
    total = {n: round(sum(getattr(t, n) for t in outcome.times), 3) for n in names}
    per_pass = [{n: round(getattr(t, n), 3) for n in names} for t in outcome.times]
    return {"total": total, "passes": per_pass}


def bench_compact(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    from cleanerd.spark import Options, Plan, map_bytes_needed  # noqa: PLC0415
    from cleanerd.topics import StrategyConfig  # noqa: PLC0415

    work = args.work or args.out / "spark-compact-work"
    work.mkdir(parents=True, exist_ok=True)
    many = compact_data(args.out, "many", args.partitions, args.partition_records)
    big = compact_data(args.out, "big", 1, args.big_records)
    tiny = compact_data(args.out, "tiny", 2, 2000)
    big_map = map_bytes_needed(args.big_records, StrategyConfig())
    many_map = max(map_bytes_needed(args.partition_records, StrategyConfig()), 1 << 20)

    started = time.monotonic()
    _on_spark(spark, _copy(tiny, work, "warm-a"), Options(NOW, 1 << 20, plan=Plan.A))
    _on_spark(spark, _copy(tiny, work, "warm-b"), Options(NOW, 1 << 20, plan=Plan.B))
    log(f"compact warm-up {time.monotonic() - started:.1f} s")

    a_local = _copy(many, work, "many-local")
    local_many = _local(a_local, many_map)
    log(f"local engine, {args.partitions} partitions: {local_many:.1f} s")
    a_spark = _copy(many, work, "many-spark")
    plan_a, _ = _on_spark(spark, a_spark, Options(NOW, many_map, plan=Plan.A))
    log(f"plan A on {args.master}: {plan_a:.1f} s")
    a_same = _digest(a_local) == _digest(a_spark)
    shutil.rmtree(a_local)
    shutil.rmtree(a_spark)

    b_local = _copy(big, work, "big-local")
    local_big = _local(b_local, big_map)
    log(f"local engine, one partition of {args.big_records} records: {local_big:.1f} s")
    b_spark = _copy(big, work, "big-spark")
    plan_b, (outcome,) = _on_spark(spark, b_spark, Options(NOW, 1 << 20, plan=Plan.B))
    log(f"plan B on {args.master}: {plan_b:.1f} s")
    b_same = _digest(b_local) == _digest(b_spark)
    shutil.rmtree(b_local)
    shutil.rmtree(b_spark)
    return {
        "many": {
            "partitions": args.partitions,
            "records_per_partition": args.partition_records,
            "local_s": round(local_many, 3),
            "plan_a_s": round(plan_a, 3),
            "speedup": round(local_many / plan_a, 3) if plan_a else None,
            "byte_identical": a_same,
        },
        "big": {
            "records": args.big_records,
            "local_s": round(local_big, 3),
            "plan_b_s": round(plan_b, 3),
            "plan_b_phases": _phases(outcome),
            "passes": outcome.summary.passes,
            "byte_identical": b_same,
        },
    }


# --- main ---------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", choices=("read", "compact", "all"), default="all")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    read = ap.add_argument_group("read")
    read.add_argument("--read-records", type=int, default=1_000_000)
    read.add_argument("--codecs", default="none,lz4")
    read.add_argument("--repeat", type=int, default=5, help="timed rounds per query")
    read.add_argument(
        "--task-bytes",
        type=int,
        default=0,
        help="max_segment_bytes_per_task [0: Spark's split rule for files, see split_bytes]",
    )
    compact = ap.add_argument_group("compact")
    compact.add_argument("--partitions", type=int, default=100)
    compact.add_argument("--partition-records", type=int, default=100_000)
    compact.add_argument("--big-records", type=int, default=5_000_000)
    compact.add_argument("--work", type=Path, default=None, help="scratch dir [--out/...]")
    args = ap.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def main() -> None:
    args = parse_args()
    load = os.getloadavg()
    started = time.monotonic()
    spark = build_session(args.master, app_name="cleanerd-bench-spark")
    session_s = time.monotonic() - started
    fields: dict[str, Any] = {"master": args.master, "session_start_s": round(session_s, 3)}
    try:
        if args.what in ("read", "all"):
            fields["read"] = bench_read(spark, args)
        if args.what in ("compact", "all"):
            fields["compact"] = bench_compact(spark, args)
    finally:
        spark.stop()
    emit("spark", load, **fields)


if __name__ == "__main__":
    main()
