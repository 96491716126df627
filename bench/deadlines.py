"""Deadline benchmark: how long superseded records stay in the log under ``cleanerd run``
(docs/daemon.md, "Deadline scheduling").

Run ``.venv/bin/python bench/deadlines.py [--partitions 20 --rate 27000 --lag-ms 10000]``.

A ``cleanerd run`` subprocess (``bench/_daemon_support.py``) compacts a log dir in ``--out``
while this process appends to it through the storage API at ``--rate`` records/s, batches of
``--batch-records`` going round-robin over the partitions, keys drawn from ``--keys`` per
partition, each batch stamped with the wall clock. Every append is remembered. After
``--seconds`` of writes the bench waits one lag and a few seconds more, then reads the daemon's
"log cleaned" lines: a record superseded by the append of offset o at time t is removed by the
partition's first cleaning whose dirty section ends past o, at that line's time. The removal
time is that minus t; the JSON gives its percentiles, its maximum and the share past the lag.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from cleanerd._jitcache import configure_numba_cache  # noqa: E402

configure_numba_cache()  # before numba loads: importing cleanerd chooses no cache dir

from _daemon_support import Daemon, filesystem_of, log  # noqa: E402
from _facts import emit  # noqa: E402

from cleanerd.format import Record  # noqa: E402
from cleanerd.storage import PartitionLog, TopicPartition, wall_clock_ms  # noqa: E402
from cleanerd.topics import LogConfig  # noqa: E402

Appends = dict[TopicPartition, list[tuple[int, int, int]]]  # (offset, key, timestamp ms)
Cleaned = dict[str, list[tuple[int, int]]]  # partition -> (dirty section end, line time ms)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=20)
    p.add_argument("--rate", type=float, default=27_000.0, help="records/s, all partitions")
    p.add_argument("--lag-ms", type=int, default=10_000, help="max.compaction.lag.ms")
    p.add_argument("--backoff-ms", type=int, default=1_000, help="log.cleaner.backoff.ms")
    p.add_argument("--threads", type=int, default=2, help="log.cleaner.threads")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to write")
    p.add_argument("--keys", type=int, default=1_000, help="distinct keys per partition")
    p.add_argument("--batch-records", type=int, default=50)
    p.add_argument("--segment-bytes", type=int, default=1 << 20)
    p.add_argument("--out", type=Path, default=Path("/dev/shm/cleanerd-bench-deadlines"))
    return p


def _write(
    logs: dict[TopicPartition, PartitionLog], rate: float, seconds: float, keys: int, batch: int
) -> tuple[Appends, int]:
    """Append at ``rate`` for ``seconds``; every record's (offset, key, timestamp)."""
    appends: Appends = {tp: [] for tp in logs}
    order = list(logs)
    rng = np.random.default_rng(1)
    value = b"v" * 64
    start, written = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        wait = start + written / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # pacing the writer, not waiting for the daemon
        tp = order[(written // batch) % len(order)]
        drawn = rng.integers(0, keys, batch).tolist()
        now = wall_clock_ms()
        info = logs[tp].append([Record(0, now, b"k%06d" % k, value) for k in drawn])
        appends[tp].extend((info.first_offset + i, k, now) for i, k in enumerate(drawn))
        written += batch
    return appends, written


def _removal_ms(appends: Appends, cleaned: Cleaned) -> tuple[list[int], int]:
    """Removal times (ms) of every superseded record, and how many no cleaning removed."""
    times: list[int] = []
    missing = 0
    for tp, rows in appends.items():
        ends = sorted(cleaned.get(str(tp), []))
        seen: set[int] = set()
        for offset, key, timestamp in rows:
            if key in seen:  # the record before it of this key is superseded now
                at = next((t for end, t in ends if end > offset), None)
                if at is None:
                    missing += 1
                else:
                    times.append(at - timestamp)
            seen.add(key)
    return times, missing


def _ms(line: dict[str, Any]) -> int:
    stamp = dt.datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00"))
    return int(stamp.timestamp() * 1000)


def main() -> None:
    args = _parser().parse_args()
    load_at_start = os.getloadavg()
    shutil.rmtree(args.out, ignore_errors=True)
    log_dir = args.out / "logs"
    log_dir.mkdir(parents=True)
    config = LogConfig(
        segment_bytes=args.segment_bytes, compact=True, max_compaction_lag_ms=args.lag_ms
    )
    tps = [TopicPartition("deadlines", p) for p in range(args.partitions)]
    logs = {tp: PartitionLog.create(log_dir / tp.dir_name, config) for tp in tps}
    settings: dict[str, object] = {
        "log.cleaner.backoff.ms": args.backoff_ms,
        "log.cleaner.threads": args.threads,
        "log.cleaner.max.compaction.lag.ms": args.lag_ms,
    }
    try:
        with Daemon(args.out, log_dir, settings) as daemon:
            log(f"ready in {daemon.wait_ready():.1f} s; writing for {args.seconds:.0f} s")
            appends, written = _write(logs, args.rate, args.seconds, args.keys, args.batch_records)
            log("written; one lag and 3 s more for the last cleanings")
            time.sleep(args.lag_ms / 1000 + 3)  # the promise's own bound, then the reading
            status = daemon.get("/status")
            lines = [e for _, e in daemon.lines if e.get("event") == "log cleaned"]
    finally:
        for partition_log in logs.values():
            partition_log.close()
    cleaned: Cleaned = {}
    for line in lines:
        cleaned.setdefault(line["partition"], []).append((line["dirty_section_end"], _ms(line)))
    times, missing = _removal_ms(appends, cleaned)
    removal = np.array(times, dtype=np.float64) / 1000
    emit(
        "deadlines",
        load_at_start,
        file_system=filesystem_of(args.out),
        partitions=args.partitions,
        rate=args.rate,
        records_written=written,
        lag_ms=args.lag_ms,
        backoff_ms=args.backoff_ms,
        threads=args.threads,
        superseded=len(times),
        not_removed=missing,
        removal_s={
            "p50": round(float(np.percentile(removal, 50)), 2),
            "p99": round(float(np.percentile(removal, 99)), 2),
            "max": round(float(removal.max()), 2),
        },
        past_lag_percent=round(100 * float((removal > args.lag_ms / 1000).mean()), 2),
        cleanings=status["totals"]["cleanings"],
        failures=status["totals"]["failures"],
    )


if __name__ == "__main__":
    main()
