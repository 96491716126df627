"""``cleanerd warmup``: compile every numba kernel the commands use, into the kernel cache.

The first run of a fresh install compiles the kernels (tens of CPU-seconds); an image build or a
systemd ``ExecStartPre=`` runs this once so that ``compact``, ``verify`` and the daemon start
warm. Rather than list kernels and guess their argument types (a read-only mmapped segment and a
writable buffer are two signatures), it runs the real code paths on small generated logs in a
temporary dir: every codec, every strategy, multi-pass cleaning with a tiny offset map, the
tombstone and marker sweep, transactions, index rebuilds, verify, dump and the erasure check.
Whatever numba compiles on the way is what a command would compile on its first run.

It fills the cache that later commands with the same environment choose
(``cleanerd._jitcache``), and says which. When no cache can be kept for this user, compiling
would be thrown away at exit: it compiles nothing and says why, exiting 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from cleanerd._jitcache import temporary_cache
from cleanerd._kernel import kernels, use_numba
from cleanerd.cli._options import format_option
from cleanerd.compaction import DEFAULT_DEDUPE_BUFFER_BYTES, compact_directory, compile_clock
from cleanerd.format import index_batches, scan_batches, snappy_fallback_reason
from cleanerd.inspect import (
    ErasureTarget,
    FileKind,
    check_erasure,
    classify,
    dump_file,
    files_to_dump,
    verify_path,
)
from cleanerd.storage import map_readonly, wall_clock_ms
from cleanerd.topics import LogConfig, Strategy, StrategyConfig, TopicCleanerConfig
from cleanerd.workload import WARMUP_VERSION_HEADER, generate, warmup_spec

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TINY_MAP_BYTES = 24 * 16  # room for a few offset-strategy keys: forces many passes


@dataclass
class WarmupReport:
    """What a warm-up compiled; a second run with the same cache compiles nothing."""

    compiled: list[str]
    compile_seconds: float
    seconds: float
    cache_hits: int
    cache_dir: str
    runs: list[str]
    kept: bool = True  # False: the cache is this process's temporary dir, removed at exit

    def to_json(self) -> dict[str, Any]:
        return {
            "kernels_compiled": len(self.compiled),
            "compile_seconds": round(self.compile_seconds, 3),
            "seconds": round(self.seconds, 3),
            "kernels_loaded_from_cache": self.cache_hits,
            "cache_dir": self.cache_dir,
            "kept": self.kept,
            "runs": self.runs,
            "compiled": self.compiled,
        }


def _is_dumpable(path: Path) -> bool:
    try:
        classify(path)
    except ValueError:
        return False
    return True


def _warm_arrow_columns(partition: Path) -> bool:
    """``cleanerd spark`` turns segments into Arrow columns with kernels of its own; they are
    compiled here when the spark extra (pyarrow) is installed."""
    if importlib.util.find_spec("pyarrow") is None:
        return False
    from cleanerd.spark import record_batch  # noqa: PLC0415 (needs the spark extra)

    for log_path in sorted(partition.glob("*.log")):
        buf = map_readonly(log_path)
        batches = scan_batches(buf, path=str(log_path)).batches
        if not batches.shape[0]:
            continue
        payload, records = index_batches(buf, batches, path=str(log_path))
        record_batch(
            topic="warmup",
            partition=0,
            segment=int(log_path.stem),
            payload=payload,
            records=records,
            batches=batches,
            control_codes=np.zeros(records.shape[0], dtype=np.int8),
            values=True,
        )
    return True


def warm(workdir: Path, say: Callable[[str], None] = lambda _: None) -> WarmupReport:
    """Run every kernel path once on logs written under ``workdir``.

    Every kernel runs through numba here (``use_numba``): what is cached is numba's own cache,
    and each signature numba compiles or loads also keeps the copy later commands load without
    numba (``cleanerd._kernel``)."""
    use_numba(keep_loaded=True)
    started = time.perf_counter()
    runs: list[str] = []
    log_config = LogConfig(compact=True)
    sweep_all = TopicCleanerConfig(compact=True, delete=False, delete_retention_ms=0)
    keep_tombstones = TopicCleanerConfig(compact=True, delete=False)
    with compile_clock() as clock:
        for codec in CODECS:
            logdir = workdir / codec
            generate(logdir, warmup_spec(codec))
            partition = logdir / "warmup-0"
            verify_path(logdir)
            for path in sorted(p for p in partition.iterdir() if _is_dumpable(p)):
                for file, kind in files_to_dump(path, classify(path)):
                    for _ in dump_file(file, kind, batches=False, values=True):
                        pass
            for strategy in Strategy:
                # versioned slots are 32 bytes, offset-only ones 24
                tiny = TINY_MAP_BYTES * (2 if strategy is not Strategy.OFFSET else 1)
                for config, map_bytes in (
                    (sweep_all, DEFAULT_DEDUPE_BUFFER_BYTES),
                    (keep_tombstones, tiny),
                ):
                    compact_directory(
                        partition,
                        log_config,
                        config,
                        StrategyConfig(strategy, WARMUP_VERSION_HEADER),
                        wall_clock_ms(),
                        map_bytes=map_bytes,
                        dry_run=True,
                        temp_root=workdir,
                        roll_active=True,
                    )
            arrow = ", arrow columns (spark)" if _warm_arrow_columns(partition) else ""
            runs.append(f"{codec}: gen, verify, dump, compact x{2 * len(Strategy)}{arrow}")
            say(f"{codec}: {clock.compiled} kernels compiled so far")
        # erasure check: wanted keys hashed, and each strategy's rule, called from Python
        partition = workdir / "lz4" / "warmup-0"
        keys = _some_keys(partition)
        for strategy in Strategy:
            chosen = StrategyConfig(strategy, WARMUP_VERSION_HEADER)
            check_erasure([ErasureTarget(partition, chosen)], keys)
        runs.append(f"lz4: erasure check x{len(Strategy)}")
        # a segment whose indexes are lost is re-indexed when opened (Kafka's recovery)
        partition = workdir / "none" / "warmup-0"
        for index in partition.glob("*.index"):
            index.unlink()
        compact_directory(partition, log_config, sweep_all, StrategyConfig(), wall_clock_ms())
        verify_path(partition)
        runs.append("none: index rebuild, compact in place, verify")
        # numba compiles a walk of a writable array apart from one of a read-only map: an empty
        # file (a rolled log's new active segment) maps as an empty writable array, which
        # ``verify`` walks, and so would batches built in memory
        scan_batches(np.zeros(0, dtype=np.uint8), path="<empty segment>")
        runs.append("a walk of a writable buffer")
    return WarmupReport(
        compiled=clock.kernels,
        compile_seconds=clock.seconds,
        seconds=time.perf_counter() - started,
        cache_hits=_cache_hits(),
        cache_dir=os.environ.get("NUMBA_CACHE_DIR") or "next to the package (__pycache__)",
        kept=temporary_cache() is None,
        runs=runs,
    )


def _some_keys(partition: Path, count: int = 5) -> list[bytes]:
    """The keys of the first data records of the partition's first segment."""
    first = min(partition.glob("*.log"))
    keys: list[bytes] = []
    for item in dump_file(first, FileKind.LOG, batches=False, values=False):
        key = item.get("key_hex")
        if isinstance(key, str) and item.get("control") is None:
            keys.append(bytes.fromhex(key))
            if len(keys) == count:
                break
    return keys


def _cache_hits() -> int:
    """Kernel signatures numba loaded from its disk cache in this process."""
    dispatchers = [k.numba_dispatcher for k in kernels()]
    return sum(sum(d.stats.cache_hits.values()) for d in dispatchers if d is not None)


@click.command()
@format_option("text: a summary line; json: one document with every kernel compiled.")
def warmup(fmt: str) -> None:
    """Compile every numba kernel into the kernel cache, so commands and the daemon start warm.

    Runs the real code paths (every codec and strategy, multi-pass cleaning, sweeps,
    transactions, index rebuilds, verify, dump, and with the spark extra the Arrow columns of
    `cleanerd spark`) on small logs in a temporary dir. The cache is the first writable of:
    NUMBA_CACHE_DIR, next to the package, $CACHE_DIRECTORY/numba (systemd's CacheDirectory=),
    $XDG_CACHE_HOME/cleanerd/numba or ~/.cache/cleanerd/numba, then this user's own
    cleanerd-numba-UID in $TMPDIR, /var/tmp or /tmp (mode 0700; refused if anyone else could
    change it). The report names it; a second run compiles nothing. Run it with the
    environment the commands will have: in the image build, or as systemd's ExecStartPre=.
    When no cache can be kept it compiles nothing and exits 1, saying why.
    """
    temporary = temporary_cache()
    if temporary is not None:
        raise click.ClickException(
            f"compiled nothing: no kernel cache can be kept for this user ({temporary.why}), "
            f"and {temporary.path} is removed at exit. Set NUMBA_CACHE_DIR to a dir this user "
            "can write and run `cleanerd warmup` again with it."
        )
    verbose = fmt == "text" and sys.stderr.isatty()
    with tempfile.TemporaryDirectory(prefix="cleanerd-warmup-") as tmp:
        report = warm(Path(tmp), say=lambda s: click.echo(s, err=True) if verbose else None)
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    click.echo(
        f"compiled {len(report.compiled)} kernels in {report.compile_seconds:.1f} s "
        f"({report.cache_hits} loaded from cache; {report.seconds:.1f} s in all); "
        f"cache: {report.cache_dir}, kept for later runs"
    )
    if (why := snappy_fallback_reason()) is not None:
        click.echo(f"warning: {why}", err=True)
