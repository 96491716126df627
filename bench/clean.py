"""Clean benchmark: ``Cleaner.clean`` end to end on one partition, against ``cp`` of its input.

Run ``.venv/bin/python bench/clean.py [--records N] [--repeat R] [--codecs ...] [--map-mib M]``.

The data set is the one ``bench/scan.py`` builds (cached in ``--out``; it is built here if
missing): ``N`` records, keys ``key-%06d`` drawn by a seeded RNG from ``--keys`` distinct ones,
``--value-bytes`` values, ``--batch-records`` records per batch, offsets 0..N-1. Its batches are
appended (``PartitionLog.append_batches``) to a compacted partition ``bench-0`` with the default
``segment.bytes`` (1 GiB): all records land in segment 0 (and the next ones, past 1 GiB: 10M
records of 100 B take two), then the log is rolled, so the active segment (which the cleaner
never touches) is empty and the full segments are the whole dirty range. The
partition is cached in ``--out`` as well, with the expected survivors (last offset per key).

Each timed run starts from a fresh copy of the cached partition in tmpfs (``--shm``, default
``/dev/shm``) and runs in a fresh subprocess, so peak RSS is that of one clean:

1. imports, then a warm-up clean of a small partition of the same codec with a 1 MiB map (numba
   loads its cached kernels; untimed);
2. baseline RSS (``VmRSS``);
3. ``OffsetMap(--map-mib)`` + ``Cleaner`` (``map_alloc``, timed), then, unless ``--cold-map``,
   an untimed clean of a second copy of the partition with that cleaner: the steady state of a
   cleaner thread, whose map and record cache are in memory from its last clean (its map clear
   then costs the slots that clean used). With ``--cold-map`` the timed clean is the cleaner's
   first: every page of the map and the cache is faulted in during it (and with transparent
   huge pages the kernel may compact memory first, which makes those runs vary a lot);
4. timed: ``PartitionLog(dir)`` (``open``), ``plan(LogMeta.from_log(...))`` (``plan``),
   ``Cleaner.clean`` (``clean``: pass 1, pass 2, swap, checkpoint). ``end_to_end`` is
   ``map_alloc`` + the three. The pass figures are ``CleanerStats``' map and clean times;
5. peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` before ``open`` and again
   before ``clean``, so the peak of open + plan and the clean's own are both known), then
   (untimed) the survivors are checked against the expected ones.

The cleaner runs on one thread, or with ``--threads N`` (N >= 2) on its own plus a
``decompression_pool`` of N - 1 threads (pass 1 decompresses part of each chunk there); the
CPU time counts the cleaner's own thread only. ``cp`` of the same input (the full segments'
``.log`` files) from tmpfs to tmpfs is timed ``--repeat`` times after a warm-up as the limit. Times
are best of ``--repeat`` (every run is in ``seconds_runs``, medians in ``seconds_median``); the
thread's CPU time for open + plan + clean is in ``cpu_seconds_*``, and each stage's median in
``cpu_seconds_median_by_stage`` (on a loaded machine the wall time also counts waiting for a
core); peak RSS is the largest. Prints one JSON document on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cleanerd._jitcache import configure_numba_cache  # noqa: E402

configure_numba_cache()  # before numba loads: importing cleanerd chooses no cache dir

import numpy as np  # noqa: E402
from _facts import emit  # noqa: E402

from cleanerd.compaction import Cleaner, OffsetMap, clean_once, plan_log, slot_bytes  # noqa: E402
from cleanerd.format import (  # noqa: E402
    Compression,
    Record,
    build_batch,
    index_batches,
    kernels as k,
    scan_batches,
)
from cleanerd.storage import PartitionLog  # noqa: E402
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig  # noqa: E402

PARTITION_VERSION = 1  # bump when the partition layout changes, so old caches are not reused
PARTITION = "bench-0"
WARM_PARTITION = "bench-1"  # a copy cleaned before the measured clean (steady state)
MIB = 1 << 20
DEFAULT_MAP_MIB = 128  # Kafka's log.cleaner.dedupe.buffer.size
RSS_HEADROOM_MIB = 150
NOW_MS = 1_893_456_000_000  # 2030-01-01: every record is past any lag
TARGETS = {  # end to end, one thread (the issue)
    "none": {"records_per_s_min": 8e6, "cp_ratio_max": 2.0},
    "lz4": {"records_per_s_min": 4e6},
    "zstd": {"records_per_s_min": 2.5e6},
}
KAFKA_RECORDS_PER_S = {"none": 1.5e6, "lz4": 1.5e6, "zstd": 0.75e6}  # the reference


def log(msg: str) -> None:
    print(f"[clean] {msg}", file=sys.stderr, flush=True)


def log_config() -> LogConfig:
    return LogConfig(compact=True)


def topic_config() -> TopicCleanerConfig:
    return TopicCleanerConfig(compact=True, delete=False)


# --- the data set -------------------------------------------------------------------------------


def partition_root(args: argparse.Namespace, codec: str) -> Path:
    name = (
        f"clean-p{PARTITION_VERSION}-r{args.records}-k{args.keys}-v{args.value_bytes}"
        f"-b{args.batch_records}-s{args.seed}"
    )
    return Path(args.out) / name / codec


def survivors_digest(keys: list[bytes], offsets: list[int], value_lens: list[int]) -> str:
    h = hashlib.sha256()
    for key, off, vlen in sorted(zip(keys, offsets, value_lens, strict=True)):
        h.update(b"%s:%d:%d\n" % (key, off, vlen))
    return h.hexdigest()


def expected_survivors(segment_files: list[Path]) -> dict[str, Any]:
    """The last record of each key in the source segments (in offset order): what a full clean
    keeps."""
    last: dict[bytes, tuple[int, int]] = {}
    for segment_file in segment_files:
        data = np.fromfile(segment_file, dtype=np.uint8)
        scan = scan_batches(data)
        scan.raise_error()
        payload, recs = index_batches(data, scan.batches)
        mv = payload.data
        for row in recs[:, [k.R_KEY_POS, k.R_KEY_LEN, k.R_OFFSET, k.R_VALUE_LEN]].tolist():
            pos, klen, off, vlen = row
            last[bytes(mv[pos : pos + klen])] = (off, vlen)
    keys = list(last)
    return {
        "records": len(keys),
        "digest": survivors_digest(keys, [last[x][0] for x in keys], [last[x][1] for x in keys]),
    }


def build_partition(args: argparse.Namespace, codec: str) -> dict[str, Any]:
    """The cached partition dir for ``codec`` (built from bench/scan.py's segment if missing)."""
    root = partition_root(args, codec)
    meta_file = root / "meta.json"
    if meta_file.exists():
        log(f"{codec}: using cached partition in {root}")
        meta: dict[str, Any] = json.loads(meta_file.read_text())
        return meta
    import scan  # noqa: PLC0415 - bench/scan.py (its data set), only when building

    scan_args = argparse.Namespace(
        records=args.records,
        keys=args.keys,
        value_bytes=args.value_bytes,
        batch_records=args.batch_records,
        seed=args.seed,
        out=args.out,
    )
    source = Path(scan.build_segments(scan_args, [Compression.from_label(codec)])[codec]["path"])
    log(f"{codec}: building partition from {source}")
    if root.exists():
        shutil.rmtree(root)
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    part = tmp / PARTITION
    plog = PartitionLog.create(part, log_config(), clock=lambda: NOW_MS)
    data = np.fromfile(source, dtype=np.uint8)
    batches = scan_batches(data).batches
    step = 1000  # batches per append
    for i in range(0, batches.shape[0], step):
        rows = batches[i : i + step]
        lo = int(rows[0, k.B_POS])
        hi = int(rows[-1, k.B_POS] + rows[-1, k.B_SIZE])
        plog.append_batches(data[lo:hi].tobytes())
    plog.roll()
    plog.close()
    segs = [s for s in PartitionLog(part, log_config()).segments if s.size]
    if not segs:
        raise SystemExit(f"{codec}: no full segment")
    meta = {
        "codec": codec,
        "records": int(batches[:, k.B_COUNT].sum()),
        "batches": int(batches.shape[0]),
        "segments": [s.log_path.name for s in segs],
        "input_bytes": sum(s.size for s in segs),
        "expected": expected_survivors([s.log_path for s in segs]),
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    tmp.rename(root)
    return meta


# --- one measured clean (in a child process) ----------------------------------------------------


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux 4.0+: ``5`` to ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _warm_up(codec: Compression, directory: Path, cleaner: Cleaner, n: int) -> None:
    """A small clean of the same codec: loads every kernel the timed clean uses.

    Each warm-up needs its own partition ``n``: the checkpoint of an earlier one would leave
    nothing to clean.
    """
    part = directory / f"warm-{n}"
    plog = PartitionLog.create(part, log_config(), clock=lambda: NOW_MS)
    rng = np.random.default_rng(1)
    for b in range(50):
        keys = rng.integers(0, 500, 100)
        plog.append_batches(
            build_batch(
                [
                    Record(j, NOW_MS - 10**6 + 100 * b + j, b"key-%06d" % x, b"v" * 100)
                    for j, x in enumerate(keys.tolist())
                ],
                compression=codec,
            )
        )
    plog.roll()
    clean_once(plog, cleaner, topic_config(), StrategyConfig(), NOW_MS)
    plog.close()
    shutil.rmtree(part)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    directory = Path(spec["dir"])
    codec = Compression.from_label(spec["codec"])
    strategy = StrategyConfig()
    cfg = topic_config()
    _warm_up(codec, directory, Cleaner(OffsetMap(1 * MIB)), 0)  # loads the kernels
    gc.collect()
    baseline_kib = _status_kib("VmRSS")
    t0 = time.perf_counter()
    omap = OffsetMap(spec["map_bytes"], strategy)
    pool = ThreadPoolExecutor(spec["threads"] - 1) if spec["threads"] > 1 else None
    cleaner = Cleaner(omap, clock=time.perf_counter, decompression_pool=pool)
    t1 = time.perf_counter()
    if not spec["cold_map"]:
        # a cleaner thread's steady state: it cleaned a log like this one before, so its map
        # and record cache are in memory and the map's clear costs the slots that clean used
        warm = directory / WARM_PARTITION
        wlog = PartitionLog(warm, log_config(), clock=lambda: NOW_MS)
        clean_once(wlog, cleaner, cfg, strategy, NOW_MS)
        wlog.close()
        shutil.rmtree(warm)
        gc.collect()
    gc.disable()
    before_kib = _status_kib("VmRSS")
    _reset_peak()
    t1b = time.perf_counter()
    c1b = time.thread_time()
    plog = PartitionLog(directory / PARTITION, log_config(), clock=lambda: NOW_MS)
    t2 = time.perf_counter()
    c2 = time.thread_time()
    _, p = plan_log(plog, cfg, NOW_MS)
    t3 = time.perf_counter()
    c3 = time.thread_time()
    plan_peak_kib = _status_kib("VmHWM")
    _reset_peak()  # outside the timed stages: the clean's own peak from here
    t3b = time.perf_counter()
    c3b = time.thread_time()
    result = cleaner.clean(plog, p, cfg, strategy, NOW_MS)
    t4 = time.perf_counter()
    c4 = time.thread_time()
    gc.enable()
    clean_peak_kib = _status_kib("VmHWM")
    peak_kib = max(plan_peak_kib, clean_peak_kib)
    # the warm-up clean and the peak reset are not part of the measurement
    t4 -= t3b - t3
    t2, t3, t4 = t2 - (t1b - t1), t3 - (t1b - t1), t4 - (t1b - t1)
    stats = result.stats
    # the survivors, checked after the measurement
    keys: list[bytes] = []
    offsets: list[int] = []
    value_lens: list[int] = []
    for r in plog.records(0):
        keys.append(r.key or b"")
        offsets.append(r.offset)
        value_lens.append(-1 if r.value is None else len(r.value))
    plog.close()
    return {
        "seconds": {
            "map_alloc": t1 - t0,
            "open": t2 - t1,
            "plan": t3 - t2,
            "clean": t4 - t3,
            "pass1_map_build": stats.map_elapsed_s,
            "pass2": stats.clean_elapsed_s,
            "end_to_end": t4 - t0,
        },
        # CPU time of this thread (the cleaner's only one) for open + plan + clean: what the code
        # costs, apart from waiting for a core on a loaded machine
        "cpu_seconds": {
            "open_plan_clean": (c3 - c1b) + (c4 - c3b),
            "open": c2 - c1b,
            "plan": c3 - c2,
            "clean": c4 - c3b,
        },
        "baseline_rss_kib": baseline_kib,
        "rss_before_open_kib": before_kib,
        "plan_peak_rss_kib": plan_peak_kib,
        "clean_peak_rss_kib": clean_peak_kib,
        "peak_rss_kib": peak_kib,
        "end_offset": result.end_offset,
        "plan_range": [p.first_dirty_offset, p.first_uncleanable_offset],
        "map_entries": omap.size,
        "map_bytes": omap.memory_bytes,
        "map_slots": omap.slots,
        "map_slot_bytes": slot_bytes(strategy),
        "stats": {
            "map_messages_read": stats.map_messages_read,
            "map_bytes_read": stats.map_bytes_read,
            "messages_read": stats.messages_read,
            "bytes_read": stats.bytes_read,
            "messages_written": stats.messages_written,
            "bytes_written": stats.bytes_written,
            "batches_copied": stats.batches_copied,
            "batches_rebuilt": stats.batches_rebuilt,
            "batches_dropped_without_decompressing": stats.batches_dropped_without_decompressing,
        },
        "survivors": {
            "records": len(keys),
            "digest": survivors_digest(keys, offsets, value_lens),
        },
    }


# --- the parent: copies, runs, cp ---------------------------------------------------------------


def run_once(args: argparse.Namespace, codec: str, meta: dict[str, Any]) -> dict[str, Any]:
    src = partition_root(args, codec) / PARTITION
    with tempfile.TemporaryDirectory(prefix="cleanerd-bench-", dir=args.shm) as tmp:
        shutil.copytree(src, Path(tmp) / PARTITION)
        if not args.cold_map:
            shutil.copytree(src, Path(tmp) / WARM_PARTITION)
        spec = {
            "dir": tmp,
            "codec": codec,
            "map_bytes": args.map_mib * MIB,
            "cold_map": args.cold_map,
            "threads": args.threads,
        }
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{codec}: the clean failed:\n{done.stderr}")
        out: dict[str, Any] = json.loads(done.stdout)
    if out["survivors"] != meta["expected"]:
        raise SystemExit(f"{codec}: wrong survivors {out['survivors']} != {meta['expected']}")
    return out


def time_cp(args: argparse.Namespace, codec: str, meta: dict[str, Any]) -> float:
    """Best of ``--repeat`` ``cp`` of the input segment file(s), tmpfs to tmpfs."""
    src = partition_root(args, codec) / PARTITION
    best = float("inf")
    with tempfile.TemporaryDirectory(prefix="cleanerd-bench-cp-", dir=args.shm) as tmp:
        inputs = []
        for name in meta["segments"]:
            shutil.copyfile(src / name, Path(tmp) / name)
            inputs.append(str(Path(tmp) / name))
        dst = Path(tmp) / "dst"
        for i in range(args.repeat + 1):  # run 0 is a warm-up
            dst.mkdir()
            t = time.perf_counter()
            subprocess.run(["cp", *inputs, str(dst)], check=True)
            seconds = time.perf_counter() - t
            shutil.rmtree(dst)
            if i:
                best = min(best, seconds)
    return best


def rate(records: int, n_bytes: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 4),
        "records_per_s": round(records / seconds),
        "mb_per_s": round(n_bytes / seconds / 1e6, 1),
    }


def measure_codec(args: argparse.Namespace, codec: str) -> dict[str, Any]:
    meta = build_partition(args, codec)
    runs = []
    for i in range(args.repeat):
        log(f"{codec}: run {i + 1}/{args.repeat}")
        runs.append(run_once(args, codec, meta))
    best = {name: min(r["seconds"][name] for r in runs) for name in runs[0]["seconds"]}
    cp = time_cp(args, codec, meta)
    n, size = meta["records"], meta["input_bytes"]
    peak = max(r["peak_rss_kib"] for r in runs) * 1024
    baseline = min(r["baseline_rss_kib"] for r in runs) * 1024
    delta = max(r["peak_rss_kib"] - r["baseline_rss_kib"] for r in runs) * 1024

    def over_baseline(name: str) -> float:
        return round(float(max(r[name] - r["baseline_rss_kib"] for r in runs)) / 1024, 1)

    budget = args.map_mib * MIB
    first = runs[0]
    e2e = best["end_to_end"]
    target = TARGETS.get(codec, {})
    met = {}
    if "records_per_s_min" in target:
        met["records_per_s"] = n / e2e >= target["records_per_s_min"]
    if "cp_ratio_max" in target:
        met["cp_ratio"] = e2e / cp <= target["cp_ratio_max"]
    met["peak_rss"] = delta <= budget + RSS_HEADROOM_MIB * MIB
    met["clean_peak_rss"] = over_baseline("clean_peak_rss_kib") <= args.map_mib + RSS_HEADROOM_MIB
    return {
        "input": {
            "records": n,
            "batches": meta["batches"],
            "bytes": size,
            "segments": meta["segments"],
        },
        "end_to_end": rate(n, size, e2e),
        "pass1_map_build": rate(n, size, best["pass1_map_build"]),
        "pass2": rate(n, size, best["pass2"]),
        "seconds_best": {name: round(v, 4) for name, v in best.items()},
        "seconds_runs": {
            name: [round(r["seconds"][name], 4) for r in runs] for name in runs[0]["seconds"]
        },
        "seconds_median": {
            name: round(statistics.median(r["seconds"][name] for r in runs), 4)
            for name in runs[0]["seconds"]
        },
        "cpu_seconds_runs": [round(r["cpu_seconds"]["open_plan_clean"], 4) for r in runs],
        "cpu_seconds_median": round(
            statistics.median(r["cpu_seconds"]["open_plan_clean"] for r in runs), 4
        ),
        "cpu_seconds_median_by_stage": {
            name: round(statistics.median(r["cpu_seconds"][name] for r in runs), 4)
            for name in ("open", "plan", "clean")
        },
        "cp_seconds": round(cp, 4),
        "cp_mb_per_s": round(size / cp / 1e6, 1),
        "x_cp": round(e2e / cp, 2),
        "kafka_reference_records_per_s": KAFKA_RECORDS_PER_S.get(codec),
        "x_kafka": round(n / e2e / KAFKA_RECORDS_PER_S[codec], 1)
        if codec in KAFKA_RECORDS_PER_S
        else None,
        "memory": {
            "peak_rss_mib": round(peak / MIB, 1),
            "baseline_rss_mib": round(baseline / MIB, 1),
            "peak_minus_baseline_mib": round(delta / MIB, 1),
            "before_open_minus_baseline_mib": over_baseline("rss_before_open_kib"),
            "open_plan_peak_minus_baseline_mib": over_baseline("plan_peak_rss_kib"),
            "clean_peak_minus_baseline_mib": over_baseline("clean_peak_rss_kib"),
            "map_budget_mib": args.map_mib,
            "limit_mib": args.map_mib + RSS_HEADROOM_MIB,
            "map_bytes": first["map_bytes"],
            "map_slots": first["map_slots"],
            "map_slot_bytes": first["map_slot_bytes"],
            "map_entries": first["map_entries"],
            "map_bytes_per_entry_at_capacity": round(
                first["map_bytes"] / int(first["map_slots"] * 0.9), 1
            ),
        },
        "clean": {
            "plan_range": first["plan_range"],
            "end_offset": first["end_offset"],
            "survivors": first["survivors"]["records"],
            "stats": first["stats"],
        },
        "target": target,
        "met": met,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records in the partition")
    p.add_argument("--out", default=str(ROOT / "bench" / "out"), help="data cache directory")
    p.add_argument("--shm", default="/dev/shm", help="tmpfs directory for the runs")
    p.add_argument("--repeat", type=int, default=5, help="timed runs (best is reported)")
    p.add_argument("--codecs", default="none,lz4,zstd", help="comma-separated codec labels")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per value")
    p.add_argument("--batch-records", type=int, default=100, help="records per batch")
    p.add_argument("--seed", type=int, default=42, help="RNG seed for keys and values")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads of one clean: 2+ gives the Cleaner a decompression pool of N-1",
    )
    p.add_argument("--map-mib", type=int, default=DEFAULT_MAP_MIB, help="offset map budget")
    p.add_argument(
        "--cold-map",
        action="store_true",
        help="time the first clean of a new Cleaner (map and record cache faulted in) instead "
        "of one that cleaned a copy of the log just before",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.records, args.repeat, args.batch_records, args.keys, args.map_mib) < 1:
        p.error("--records, --repeat, --batch-records, --keys and --map-mib must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        json.dump(child(json.loads(args.child)), sys.stdout)
        return 0
    load_at_start = os.getloadavg()
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    for c in codecs:
        Compression.from_label(c)  # reject unknown labels before any work
    results = {c: measure_codec(args, c) for c in codecs}
    emit(
        "clean",
        load_at_start,
        parameters={
            "records": args.records,
            "keys": args.keys,
            "value_bytes": args.value_bytes,
            "batch_records": args.batch_records,
            "seed": args.seed,
            "repeat": args.repeat,
            "map_mib": args.map_mib,
            "cold_map": args.cold_map,
            "segment_bytes": log_config().segment_bytes,
            "strategy": "offset",
            "threads": args.threads,
            "shm": args.shm,
        },
        method=(
            "per codec, --repeat runs, each in a fresh subprocess on a fresh tmpfs copy of the "
            "cached partition (its full segments + an empty active segment), after an "
            "untimed warm-up clean of a small partition (kernels loaded) and, unless "
            "cold_map, an untimed clean of another copy with the same Cleaner (steady state); "
            "end_to_end = map allocation + PartitionLog open + plan + Cleaner.clean (pass 1, "
            "pass 2, swap, checkpoint); pass figures from CleanerStats; best of the runs; "
            "peak RSS is VmHWM (reset before open and before clean), baseline VmRSS before the "
            "map is allocated, the largest over the runs; cp is `cp` of the input .log, tmpfs "
            "to tmpfs, best of --repeat after a warm-up; survivors checked against the last "
            "record of each key in the input. Rates count the input records and bytes "
            "(compressed bytes for lz4 and zstd)."
        ),
        results=results,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
