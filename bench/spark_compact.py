"""Compaction on Spark against the local engine: plan A on many partitions, plan B on one big one.

Run ``.venv/bin/python bench/spark_compact.py [--partitions P] [--records R] [--big-records B]
[--master local[2]] [--out DIR]``. The issue's figures are P=100, R=100,000 and B=5,000,000
(the defaults); smaller values give the same comparison sooner.

Data (``cleanerd gen``'s generator, cached in ``--out``): a log dir of P partitions of R records
each (keys R/10 per partition, 5 % tombstones, 100-byte values, 100 records per batch) and a
log dir with one partition of B records (B/10 keys), every partition rolled so it is all
cleanable. Each timed run works on a fresh copy, at one fixed ``now``, with
``delete.retention.ms`` 0 (so the sweeps remove tombstones, as they would after a day).

1. A Spark session (``--master``) is started and warmed on a tiny log with both plans, so the
   timed runs include neither the JVM's start nor the Python workers' imports and numba loads.
2. ``local_many``: the local one-shot engine (what ``cleanerd compact`` runs) on each of the P
   partitions in turn; ``plan_a``: ``compact_on_spark`` with every partition in plan A.
3. ``local_big``: the local engine on the big partition with a dedupe buffer holding it in one
   pass; ``plan_b``: ``compact_on_spark`` forced to plan B, its time split per pass into
   prepare (driver: txnindex check, groups, transaction states), scan, shuffle, write (the
   stages that scale out with executors) and swap (driver).

Both results are checked to be the local engine's files, byte for byte. Prints one JSON
document on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from cleanerd.compaction.one_shot import compact_directory
from cleanerd.compaction.strategy import StrategyConfig
from cleanerd.compaction.topic_config import TopicCleanerConfig
from cleanerd.spark.compact import (
    Options,
    PartitionJob,
    Plan,
    compact_on_spark,
    map_bytes_needed,
)
from cleanerd.spark.session import build_session
from cleanerd.storage.log_config import LogConfig
from cleanerd.storage.partition import PartitionLog
from cleanerd.workload import WorkloadSpec, generate

NOW = 1_800_000_000_000
VERSION = 1  # bump when the data layout changes


def log(msg: str) -> None:
    print(f"[spark_compact] {msg}", file=sys.stderr, flush=True)


def build(out: Path, name: str, partitions: int, records: int) -> Path:
    """A cached log dir of ``partitions`` rolled partitions of ``records`` records each."""
    logdir = out / f"v{VERSION}-{name}-{partitions}x{records}"
    if (logdir / "done").exists():
        return logdir
    shutil.rmtree(logdir, ignore_errors=True)
    t0 = time.monotonic()
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
        log_ = PartitionLog(directory)
        log_.roll()
        log_.close()
    (logdir / "done").write_text("")
    log(f"built {logdir.name} in {time.monotonic() - t0:.1f} s")
    return logdir


def copy(logdir: Path, work: Path, name: str) -> Path:
    target = work / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(
        logdir, target, copy_function=shutil.copy2, ignore=shutil.ignore_patterns("done")
    )
    return target


def jobs(logdir: Path) -> list[PartitionJob]:
    cleaner = dataclasses.replace(TopicCleanerConfig(), delete_retention_ms=0)
    return [
        PartitionJob(d, LogConfig(), cleaner, StrategyConfig())
        for d in sorted(p for p in logdir.iterdir() if p.is_dir())
    ]


def digest(logdir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(logdir.rglob("*")):
        if p.is_file() and p.name not in ("done", ".lock"):
            h.update(str(p.relative_to(logdir)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def local(logdir: Path, map_bytes: int) -> float:
    t0 = time.monotonic()
    for job in jobs(logdir):
        compact_directory(
            job.directory, job.log, job.cleaner, job.strategy, NOW, map_bytes=map_bytes
        )
    return time.monotonic() - t0


def on_spark(spark: Any, logdir: Path, options: Options) -> tuple[float, list[Any]]:
    t0 = time.monotonic()
    outcomes = compact_on_spark(spark, jobs(logdir), options)
    seconds = time.monotonic() - t0
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        raise SystemExit(f"spark compaction failed: {failed}")
    return seconds, outcomes


def phases(outcome: Any) -> dict[str, Any]:
    names = ("prepare", "scan", "shuffle", "write", "swap")
    total = {n: round(sum(getattr(t, n) for t in outcome.times), 3) for n in names}
    per_pass = [{n: round(getattr(t, n), 3) for n in names} for t in outcome.times]
    return {"total": total, "passes": per_pass}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--big-records", type=int, default=5_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "spark_compact")
    ap.add_argument("--work", type=Path, default=None, help="scratch dir [default: --out/work]")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or args.out / "work"
    work.mkdir(parents=True, exist_ok=True)

    many = build(args.out, "many", args.partitions, args.records)
    big = build(args.out, "big", 1, args.big_records)
    tiny = build(args.out, "tiny", 2, 2000)
    big_map = map_bytes_needed(args.big_records, StrategyConfig())
    many_map = max(map_bytes_needed(args.records, StrategyConfig()), 1 << 20)

    t0 = time.monotonic()
    spark = build_session(args.master, app_name="cleanerd-bench")
    session_s = time.monotonic() - t0
    t0 = time.monotonic()
    on_spark(spark, copy(tiny, work, "warm-a"), Options(NOW, 1 << 20, plan=Plan.A))
    on_spark(spark, copy(tiny, work, "warm-b"), Options(NOW, 1 << 20, plan=Plan.B))
    warm_s = time.monotonic() - t0
    log(f"session {session_s:.1f} s, warm-up {warm_s:.1f} s")

    a_local = copy(many, work, "many-local")
    local_many = local(a_local, many_map)
    log(f"local engine, {args.partitions} partitions: {local_many:.1f} s")
    a_spark = copy(many, work, "many-spark")
    plan_a, _ = on_spark(spark, a_spark, Options(NOW, many_map, plan=Plan.A))
    log(f"plan A on {args.master}: {plan_a:.1f} s")
    a_same = digest(a_local) == digest(a_spark)
    shutil.rmtree(a_local)
    shutil.rmtree(a_spark)

    b_local = copy(big, work, "big-local")
    local_big = local(b_local, big_map)
    log(f"local engine, one partition of {args.big_records} records: {local_big:.1f} s")
    b_spark = copy(big, work, "big-spark")
    plan_b, (outcome,) = on_spark(spark, b_spark, Options(NOW, 1 << 20, plan=Plan.B))
    log(f"plan B on {args.master}: {plan_b:.1f} s")
    b_same = digest(b_local) == digest(b_spark)
    shutil.rmtree(b_local)
    shutil.rmtree(b_spark)
    spark.stop()

    print(
        json.dumps(
            {
                "master": args.master,
                "session_start_s": round(session_s, 3),
                "many": {
                    "partitions": args.partitions,
                    "records_per_partition": args.records,
                    "local_s": round(local_many, 3),
                    "plan_a_s": round(plan_a, 3),
                    "speedup": round(local_many / plan_a, 3) if plan_a else None,
                    "byte_identical": a_same,
                },
                "big": {
                    "records": args.big_records,
                    "local_s": round(local_big, 3),
                    "plan_b_s": round(plan_b, 3),
                    "plan_b_phases": phases(outcome),
                    "passes": outcome.summary.passes,
                    "byte_identical": b_same,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
