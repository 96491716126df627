"""Spark's Python workers choose numba's cache dir before a task imports a kernel, although
importing cleanerd chooses none: ``build_session`` runs them under ``cleanerd.spark.executor``.

The driver runs in its own process with a session of its own, the executors' environment set
through ``spark.executorEnv``: a cache dir nobody can write, and a user cache dir that can be.
Without the executor daemon numba would fall back to the package's own dir where that is
writable, and refuse to define the kernels where it is not (a read-only install).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is part of the test install")

REPO = Path(__file__).resolve().parents[2]
UNWRITABLE = "/proc/cleanerd-no-such-dir"  # /proc refuses new dirs even to root

_DRIVER = """
import json, sys
from cleanerd.spark._session import build_session

def task(_):
    import os
    from cleanerd.format._builder import build_batch
    from cleanerd.format import scan_batches
    from cleanerd.format._records import Record
    from cleanerd.format._walk import walk_batches
    scan_batches(build_batch([Record(0, 1, b"k", b"v")]))
    kept = len(walk_batches.light_signatures())  # loaded from its kept copy, without numba
    stats = walk_batches.stats
    yield [os.environ.get("NUMBA_CACHE_DIR"), stats.cache_path, os.getpid(),
           sum(stats.cache_hits.values()) + kept, sum(stats.cache_misses.values())]

conf = {
    "spark.executorEnv.NUMBA_CACHE_DIR": sys.argv[1],
    "spark.executorEnv.XDG_CACHE_HOME": sys.argv[2],
    "spark.python.worker.reuse": "false",  # every task in a new worker process
}
spark = build_session("local[1]", conf, app_name="cleanerd-executor-test")
sc = spark.sparkContext
first = sc.parallelize([0], 1).mapPartitions(task).collect()
second = sc.parallelize([0], 1).mapPartitions(task).collect()
spark.stop()
print(json.dumps({"first": first, "second": second}))
"""


def test_executors_cache_kernels_in_a_dir_they_choose_and_load_them_in_later_tasks(
    tmp_path: Path,
) -> None:
    xdg = tmp_path / "xdg"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))}
    env |= {"PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "driver-cache")  # the driver's own, unused by tasks
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, UNWRITABLE, str(xdg)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    ((cache, path1, pid1, hits1, misses1),) = report["first"]
    ((cache2, path2, pid2, hits2, misses2),) = report["second"]
    chosen = xdg / "cleanerd" / "numba"
    assert cache == cache2 == str(chosen)
    # numba's own fallback (next to the package) would be a dir of the source tree
    assert Path(path1).is_relative_to(chosen)
    assert Path(path2).is_relative_to(chosen)
    assert {".nbi", ".nbc"} <= {p.suffix for p in chosen.rglob("*") if p.is_file()}
    assert pid1 != pid2  # a new worker process: nothing compiled in memory carries over
    assert hits1 == 0  # the first task compiled into that dir
    assert misses1 > 0
    assert hits2 > 0  # the second loaded it (numba-free, from the copy kept beside numba's
    # cache: cleanerd/_kernel.py) and compiled none
    assert misses2 == 0
