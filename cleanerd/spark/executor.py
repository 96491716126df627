"""Spark's Python daemon for cleanerd's executors: numba's cache dir first, then pyspark's daemon.

Every task that reads a log or compacts on an executor runs in a Python worker forked by this
daemon, and imports the kernels when it unpickles its function. Importing ``cleanerd`` does not
choose numba's cache dir (``cleanerd._jitcache``), so the daemon chooses it once, before any
worker exists: the forked workers inherit ``NUMBA_CACHE_DIR`` and load the kernels that an
earlier task, or ``cleanerd warmup``, compiled, rather than compiling them in every worker or,
in a read-only install with no writable HOME, failing to define them at all.

Sessions from ``cleanerd.spark._session.build_session`` name this module in
``spark.python.daemon.module``; a session built otherwise can set the same. Spark runs it as
``python -m cleanerd.spark.executor [worker module]``; the worker module argument is pyspark's
daemon's own and passes through unchanged.
"""

from __future__ import annotations

import runpy

from cleanerd._jitcache import configure_numba_cache


def main() -> None:
    """Choose the cache dir, then run pyspark's daemon as Spark would have."""
    configure_numba_cache()
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
