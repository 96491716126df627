"""The Spark engine: Kafka log dirs as Spark DataFrames and compaction distributed on Spark.

A driver over format/, storage/ and compaction/, like service/ is; nothing below it imports
pyspark. Needs the ``spark`` extra (``pip install 'cleanerd[spark]'``): importing a submodule
without it raises :class:`SparkMissingError` with that advice.
"""

from __future__ import annotations

INSTALL_HINT = "the Spark engine needs the spark extra: pip install 'cleanerd[spark]' (and Java 17)"


class SparkMissingError(ImportError):
    """pyspark (or pyarrow) is not installed; the message says how to install it."""


def require_pyspark() -> None:
    """Raise :class:`SparkMissingError` unless pyspark and pyarrow import."""
    try:
        import pyarrow  # noqa: F401, PLC0415 (optional: the spark extra)
        import pyspark  # noqa: F401, PLC0415
    except ImportError as e:
        raise SparkMissingError(f"{INSTALL_HINT} ({e})") from e


def __getattr__(name: str) -> object:
    """``cleanerd.spark.read_log``, imported on first use (it needs pyspark; this module not)."""
    if name == "read_log":
        require_pyspark()
        from cleanerd.spark.read import read_log  # noqa: PLC0415 (the spark extra, checked above)

        return read_log
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
