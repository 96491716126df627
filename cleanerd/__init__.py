"""cleanerd: log compaction for Apache Kafka-format partition logs.

Importing the package (or any module in it) has no side effects: it writes no file, prints
nothing and sets no environment variable. Numba's kernel cache dir is chosen by the entry points,
before they import numba: the command line as it looks up a command (every command, the daemon
and ``cleanerd warmup`` included; not ``--help`` or ``--version``), Spark's Python daemon on
executors (``cleanerd.spark.executor``) and the bench scripts, through
``cleanerd._jitcache.configure_numba_cache``. A program that imports ``cleanerd.format`` or the
engine directly gets numba's default behaviour: the cache goes to ``NUMBA_CACHE_DIR`` or next to
the package, and a read-only install with neither writable fails when a kernel is defined
("no locator available") unless the program calls ``configure_numba_cache()`` first.
"""

# The one home of the version: pyproject.toml reads it from here, the image labels and
# cleanerd_build_info show it; CHANGELOG.md has an entry for it.
__version__ = "0.1.0"
