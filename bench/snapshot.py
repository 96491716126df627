"""Snapshot benchmark (issue 12): taking a snapshot against compacting the same log, and loading
snapshot + log against a plain read of the same bytes.

Run ``.venv/bin/python bench/snapshot.py [--records N] [--keys K] [--tail T] [--repeat R]``.

The log: ``cleanerd gen`` writes ``N`` records over ``K`` keys (100-byte values, 5% tombstones,
codec none) into one partition in tmpfs, which is then rolled so every record is in an inactive
segment. Each repeat works on a fresh copy:

* ``compact``: the engine facade (``open_log``, ``clean_once``) with a default-sized offset map;
* ``snapshot``: ``create_snapshot`` of the same log (the whole log below its end, the same map).

Then ``T`` more records are appended after the snapshot and, timed:

* ``load``: ``load_state`` (the snapshot's records, then the ``T`` records of log after it), in
  records read per second (snapshot records + log records);
* ``plain_read``: a scan and record index of the same bytes (the snapshot file and the log after
  it) with the format kernels: the floor any reader pays.

A warm-up of each step on a small log runs first (numba loads its cached kernels). Times are best
of ``--repeat``; one JSON document on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cleanerd._jitcache import configure_numba_cache  # noqa: E402

configure_numba_cache()  # before numba loads: importing cleanerd chooses no cache dir

from _facts import emit  # noqa: E402

from cleanerd.compaction import Cleaner, OffsetMap, clean_once, open_log  # noqa: E402
from cleanerd.format import Record, index_batches, scan_batches  # noqa: E402
from cleanerd.snapshot import DEFAULT_BUDGET, create_snapshot, load_state  # noqa: E402
from cleanerd.storage import list_snapshots  # noqa: E402
from cleanerd.topics import StrategyConfig, TopicCleanerConfig  # noqa: E402

STRATEGY = StrategyConfig()
CONFIG = TopicCleanerConfig(compact=True, delete=False, min_cleanable_dirty_ratio=0.0)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_log(base: Path, records: int, keys: int) -> Path:
    subprocess.run(
        [sys.executable, "-m", "cleanerd", "gen", str(base), "--topic", "bench",
         "--records", str(records), "--keys", str(keys), "--value-bytes", "100",
         "--records-per-batch", "200"],
        check=True, capture_output=True,
    )  # fmt: skip
    part = base / "bench-0"
    with open_log(part) as log:
        log.roll()
    return part


def time_compact(part: Path, now: int) -> float:
    cleaner = Cleaner(OffsetMap(DEFAULT_BUDGET, STRATEGY))
    started = time.perf_counter()
    with open_log(part) as log:
        clean_once(log, cleaner, CONFIG, STRATEGY, now)
    return time.perf_counter() - started


def time_snapshot(part: Path) -> tuple[float, int]:
    started = time.perf_counter()
    with open_log(part) as log:
        result = create_snapshot(log, STRATEGY)
    return time.perf_counter() - started, result.records


def append_tail(part: Path, tail: int, keys: int) -> None:
    with open_log(part) as log:
        for start in range(0, tail, 1000):
            log.append(
                [
                    Record(0, 1_800_000_000_000 + i, b"key-%06d" % (i % keys), b"t" * 100)
                    for i in range(start, min(tail, start + 1000))
                ]
            )


def time_load(part: Path) -> tuple[float, int]:
    started = time.perf_counter()
    with open_log(part) as log:
        live = sum(1 for _ in load_state(log, STRATEGY))
    return time.perf_counter() - started, live


def time_plain_read(part: Path, snapshot_end: int) -> tuple[float, int]:
    """Scan (CRC checked) and index every record of the snapshot file and the log after it."""
    paths = [p for _, p in list_snapshots(part)[-1:]]
    paths += [p for p in sorted(part.glob("*.log")) if int(p.stem) >= snapshot_end]
    started = time.perf_counter()
    n = 0
    for path in paths:
        data = path.read_bytes()
        scan = scan_batches(data, path=str(path))
        _, index = index_batches(data, scan.batches, path=str(path))
        n += index.shape[0]
    return time.perf_counter() - started, n


def main() -> None:
    load_at_start = os.getloadavg()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--tail", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shm", type=Path, default=Path("/dev/shm"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.shm) as tmp:
        root = Path(tmp)
        _log("warm-up ...")
        warm = make_log(root / "warm", 5000, 100)
        shutil.copytree(warm.parent, root / "warm2")
        time_compact(warm, 2_000_000_000_000)
        time_snapshot(root / "warm2" / "bench-0")
        time_load(root / "warm2" / "bench-0")
        _log(f"generating {args.records} records over {args.keys} keys ...")
        source = make_log(root / "src", args.records, args.keys)
        size = sum(p.stat().st_size for p in source.glob("*.log"))
        compact_s: list[float] = []
        snapshot_s: list[float] = []
        load_s: list[float] = []
        plain_s: list[float] = []
        snapshot_records = live = read = 0
        for r in range(args.repeat):
            _log(f"repeat {r + 1}/{args.repeat}")
            for name in ("a", "b"):
                shutil.rmtree(root / name, ignore_errors=True)
                shutil.copytree(source.parent, root / name)
            compact_s.append(time_compact(root / "a" / "bench-0", 2_000_000_000_000))
            seconds, snapshot_records = time_snapshot(root / "b" / "bench-0")
            snapshot_s.append(seconds)
            part = root / "b" / "bench-0"
            with open_log(part) as log:
                end = log.log_end_offset
            append_tail(part, args.tail, args.keys)
            seconds, live = time_load(part)
            load_s.append(seconds)
            seconds, read = time_plain_read(part, end)
            plain_s.append(seconds)
        loaded_records = snapshot_records + args.tail
        result: dict[str, Any] = {
            "records": args.records,
            "keys": args.keys,
            "log_bytes": size,
            "seconds": {
                "compact": min(compact_s),
                "snapshot": min(snapshot_s),
                "load": min(load_s),
                "plain_read": min(plain_s),
            },
            "seconds_runs": {
                "compact": compact_s,
                "snapshot": snapshot_s,
                "load": load_s,
                "plain_read": plain_s,
            },
            "snapshot_records": snapshot_records,
            "snapshot_vs_compact_speed": min(compact_s) / min(snapshot_s),
            "load_records": loaded_records,
            "live_keys_loaded": live,
            "load_records_per_s": loaded_records / min(load_s),
            "plain_read_records": read,
            "plain_read_records_per_s": read / min(plain_s),
        }
    emit("snapshot", load_at_start, **result)


if __name__ == "__main__":
    main()
