"""Compare the clean of ``clean.py``'s partition between two source trees, run by run, A B A B.

Run ``.venv/bin/python bench/compare.py BASE_TREE HEAD_TREE [--pairs N] [--codecs ...]``, where
each tree is a checkout of cleanerd (``git worktree add /tmp/base <commit>``). On a shared
machine the speed drifts by more than the change being measured; measuring the two trees in turn,
each run a fresh process importing that tree's cleanerd on a fresh tmpfs copy of the same cached
partition, lets each pair see the same machine, and the median of the per-pair ratios (head /
base) is the figure to quote. The order within a pair alternates. Besides wall time each stage
reports the CPU time of the thread that ran it (``time.thread_time``): the cleaner runs on one
thread, so on a loaded machine its CPU time still says what the code costs while the wall time
also counts the waits for a core.

A run is ``clean.py``'s steady state, written with the calls both trees have (the engine facade
is newer than the base): an ``OffsetMap`` and ``Cleaner`` that cleaned a copy of the partition
once (kernels loaded, map and record cache in memory), then timed: ``PartitionLog(dir)``, the
plan, ``Cleaner.clean``. The partitions are ``clean.py``'s cache (``--out``; run ``clean.py``
once to build them). The survivors' count is checked. Prints one JSON document on stdout,
progress on stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTITION_DIR = "clean-p1-r{records}-k10000-v100-b100-s42"
NOW_MS = 1_893_456_000_000  # clean.py's: every record is past any lag


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measured clean, in a process whose ``cleanerd`` is the tree's (``PYTHONPATH``)."""
    import cleanerd  # noqa: PLC0415 (the tree's, found through PYTHONPATH in the child only)
    from cleanerd._jitcache import configure_numba_cache  # noqa: PLC0415

    configure_numba_cache()  # before numba loads: importing cleanerd chooses none
    try:  # the tree's front doors; a base tree from before them has the modules' old names
        from cleanerd.compaction import (  # noqa: PLC0415
            Cleaner,
            LogMeta,
            OffsetMap,
            cleaner_checkpoint,
            plan,
        )
        from cleanerd.storage import PartitionLog  # noqa: PLC0415
        from cleanerd.topics import (  # noqa: PLC0415
            LogConfig,
            StrategyConfig,
            TopicCleanerConfig,
        )
    except ImportError:
        from cleanerd.compaction.cleaner import Cleaner  # type: ignore[import-not-found,no-redef] # noqa: PLC0415
        from cleanerd.compaction.offset_map import OffsetMap  # type: ignore[import-not-found,no-redef] # noqa: PLC0415
        from cleanerd.compaction.plan import (  # type: ignore[import-not-found,no-redef] # noqa: PLC0415
            LogMeta,
            cleaner_checkpoint,
            plan,
        )
        from cleanerd.storage.partition import PartitionLog  # type: ignore[import-not-found,no-redef] # noqa: PLC0415
        from cleanerd.topic_model import (  # type: ignore[import-not-found,no-redef] # noqa: PLC0415
            LogConfig,
            StrategyConfig,
            TopicCleanerConfig,
        )

    if not cleanerd.__file__ or not cleanerd.__file__.startswith(spec["tree"]):
        raise SystemExit(f"imported {cleanerd.__file__}, not the tree {spec['tree']}")
    directory = Path(spec["dir"])
    cfg, strategy = TopicCleanerConfig(compact=True, delete=False), StrategyConfig()
    log_cfg = LogConfig(compact=True)
    cleaner = Cleaner(OffsetMap(spec["map_bytes"], strategy), clock=time.perf_counter)

    def clean(name: str) -> tuple[dict[str, float], dict[str, float], int]:
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        w0, c0 = time.perf_counter(), time.thread_time()
        log = PartitionLog(directory / name, log_cfg, clock=lambda: NOW_MS)
        w1, c1 = time.perf_counter(), time.thread_time()
        p = plan(LogMeta.from_log(log, cleaner_checkpoint(log)), cfg, NOW_MS)
        w2, c2 = time.perf_counter(), time.thread_time()
        result = cleaner.clean(log, p, cfg, strategy, NOW_MS)
        w3, c3 = time.perf_counter(), time.thread_time()
        survivors = sum(1 for _ in log.records(0))
        log.close()
        for stage, (a, b, x, y) in {
            "open": (w0, w1, c0, c1),
            "plan": (w1, w2, c1, c2),
            "clean": (w2, w3, c2, c3),
            "end_to_end": (w0, w3, c0, c3),
        }.items():
            wall[stage], cpu[stage] = b - a, y - x
        wall["pass1_map_build"] = result.stats.map_elapsed_s
        wall["pass2"] = result.stats.clean_elapsed_s
        return wall, cpu, survivors

    clean("bench-1")  # kernels loaded; the map and record cache of a cleaner thread's last clean
    gc.collect()
    gc.disable()
    wall, cpu, survivors = clean("bench-0")
    return {"wall": wall, "cpu": cpu, "survivors": survivors}


def _run(tree: Path, cache: Path, shm: str, codec: str, map_mib: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cleanerd-compare-", dir=shm) as tmp:
        for name in ("bench-0", "bench-1"):  # the measured partition and the warm-up copy
            shutil.copytree(cache / "bench-0", Path(tmp) / name)
        spec = {"dir": tmp, "tree": str(tree), "map_bytes": map_mib << 20}
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
    if done.returncode != 0:
        raise SystemExit(f"{tree} {codec}: the clean failed:\n{done.stderr}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


def _ms(wall: dict[str, float], cpu: dict[str, float]) -> str:
    return f"{wall['end_to_end'] * 1000:.1f} ms ({cpu['end_to_end'] * 1000:.1f} ms CPU)"


def _summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per stage: each tree's median and best, the median of the per-pair ratios head / base,
    and the ratio of the bests (on a VM whose neighbours steal cycles, a run is only ever slowed,
    so each tree's fastest run is the steadiest figure of what its code costs)."""
    out: dict[str, Any] = {}
    for stage in runs["base"][0]:
        a = [r[stage] for r in runs["base"]]
        b = [r[stage] for r in runs["head"]]
        ratios = [y / x for x, y in zip(a, b, strict=True) if x > 0]
        out[stage] = {
            "base_median_s": round(statistics.median(a), 5),
            "head_median_s": round(statistics.median(b), 5),
            "base_best_s": round(min(a), 5),
            "head_best_s": round(min(b), 5),
            "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
            "ratio_best": round(min(b) / min(a), 3) if min(a) > 0 else None,
            "ratios": [round(r, 3) for r in ratios],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path, nargs="?", help="the tree measured as A (the reference)")
    p.add_argument("head", type=Path, nargs="?", help="the tree measured as B")
    p.add_argument("--pairs", type=int, default=7, help="A/B pairs per codec")
    p.add_argument("--codecs", default="none,lz4,zstd")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--out", default=str(ROOT / "bench" / "out"), help="clean.py's data cache")
    p.add_argument("--shm", default="/dev/shm")
    p.add_argument("--map-mib", type=int, default=128)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.base is None or args.head is None:
        p.error("give the two trees")
    trees = {"base": args.base.resolve(), "head": args.head.resolve()}
    results: dict[str, Any] = {}
    load_start = os.getloadavg()
    for codec in args.codecs.split(","):
        cache = Path(args.out) / PARTITION_DIR.format(records=args.records) / codec
        expected = json.loads((cache / "meta.json").read_text())["expected"]["records"]
        wall: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
        cpu: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
        loads = []
        for i in range(args.pairs):
            for name in ("base", "head") if i % 2 == 0 else ("head", "base"):
                out = _run(trees[name], cache, args.shm, codec, args.map_mib)
                if out["survivors"] != expected:
                    raise SystemExit(
                        f"{name} {codec}: {out['survivors']} survivors, not {expected}"
                    )
                wall[name].append(out["wall"])
                cpu[name].append(out["cpu"])
            loads.append(os.getloadavg()[0])
            ms = [_ms(wall[n][-1], cpu[n][-1]) for n in ("base", "head")]
            print(
                f"[compare] {codec} pair {i + 1}: base {ms[0]}, head {ms[1]}",
                file=sys.stderr,
                flush=True,
            )
        results[codec] = {"wall": _summary(wall), "cpu": _summary(cpu), "load_average_1m": loads}
    doc = {
        "benchmark": "compare-clean",
        "trees": {
            name: {"path": str(path), "commit": _commit(path)} for name, path in trees.items()
        },
        "pairs": args.pairs,
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "results": results,
    }
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
