"""The numba kernels a cleaning calls, loaded before the daemon says it is ready.

numba compiles each kernel at its first call, or loads it from its cache dir (``cleanerd
warmup`` fills that ahead). A daemon that had not called them would pay for it in its first
cleaning, from seconds (cached) to minutes (compiled for this CPU for the first time). So the
daemon loads them at start, in a thread beside the first survey, and its readiness (``/readyz``,
systemd's READY=1) waits for them: a ready daemon cleans at full speed from its first cleaning.
The demo uses the same load to say how long the kernels took.

Rather than list kernels and guess their signatures, the load cleans a small generated log in a
temporary dir once per strategy: what that calls is what the daemon's cleanings call.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cleanerd.compaction import compact_directory, compile_clock
from cleanerd.storage import wall_clock_ms
from cleanerd.topics import LogConfig, Strategy, StrategyConfig, TopicCleanerConfig
from cleanerd.workload import WARMUP_VERSION_HEADER, generate, warmup_spec

MAP_BYTES = 1 << 20
"""The load's offset map: ample for the warm-up log's keys, so it costs no real memory."""


@dataclass(frozen=True)
class KernelLoad:
    """What loading the kernels took."""

    seconds: float
    compiled: int  # kernels numba compiled (0: every one came from its cache)
    compile_seconds: float


def load_kernels(
    temp_root: Path | None = None,
    abort_check: Callable[[], bool] = lambda: False,
    log_dirs: Sequence[Path] = (),
) -> KernelLoad:
    """Clean a small log under ``temp_root`` (the system's temporary dir by default) once per
    strategy, so numba loads or compiles every kernel a cleaning calls; blocking. A true
    ``abort_check`` (the daemon stopping) ends it with ``CleaningAbortedError`` at the next batch
    boundary, as it ends a cleaning.

    Never inside one of ``log_dirs`` (RuntimeError): Python falls back to the working dir when no
    temporary dir is writable (a read-only container root), and a dir left there by a crash
    would be taken for a partition by a broker, which refuses a name it cannot parse."""
    root = Path(temp_root if temp_root is not None else tempfile.gettempdir()).resolve()
    for log_dir in log_dirs:
        if root.is_relative_to(Path(log_dir).resolve()):
            raise RuntimeError(
                f"the temporary dir {root} is in the log dir {log_dir}: set TMPDIR to a dir "
                "outside the log dirs (in a container, mount a tmpfs on /tmp)"
            )
    started = time.perf_counter()
    sweep_all = TopicCleanerConfig(compact=True, delete=False, delete_retention_ms=0)
    with (
        tempfile.TemporaryDirectory(prefix="cleanerd-kernels-", dir=root) as tmp,
        compile_clock() as clock,
    ):
        logdir = Path(tmp)
        generate(logdir, warmup_spec("none"))
        for strategy in Strategy:
            compact_directory(
                logdir / "warmup-0",
                LogConfig(compact=True),
                sweep_all,
                StrategyConfig(strategy, WARMUP_VERSION_HEADER),
                wall_clock_ms(),
                map_bytes=MAP_BYTES,
                dry_run=True,  # each strategy on a fresh copy: a cleaned log calls less
                temp_root=logdir,
                roll_active=True,
                abort_check=abort_check,
            )
    return KernelLoad(time.perf_counter() - started, clock.compiled, clock.seconds)
