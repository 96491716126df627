"""Whether the ``spark`` extra is installed, and the advice when it is not."""

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
