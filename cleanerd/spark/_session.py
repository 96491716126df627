"""One way to get a SparkSession that cleanerd's data source and jobs work with.

Two traps the defaults set (both checked with pyspark 4.3): Python workers run ``python3`` from
PATH, not this interpreter, unless ``PYSPARK_PYTHON`` says otherwise; and the Python data source's
``pushFilters`` is never called unless ``spark.sql.python.filterPushdown.enabled`` is true.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from cleanerd.spark._extra import require_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.daemon.module": "cleanerd.spark.executor",
}
"""Settings cleanerd's sources and jobs rely on; a caller's ``conf`` overrides them. The Python
daemon is ``cleanerd.spark.executor``, which chooses numba's cache dir before a task imports a
kernel (importing ``cleanerd`` does not)."""


def build_session(
    master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "cleanerd"
) -> SparkSession:
    """Get (or create) a session with :data:`DEFAULT_CONF` and the data source registered.

    For a ``local`` master the workers are pointed at this interpreter (``PYSPARK_PYTHON``, unless
    already set) so they import the same cleanerd; on a cluster the executors'
    own Python must have cleanerd installed.
    """
    require_pyspark()
    from pyspark.sql import SparkSession  # noqa: PLC0415 (the spark extra, checked above)

    settings = dict(DEFAULT_CONF)
    if (master is None or master.startswith("local")) and "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # read when the context launches
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    _register_sources(session)
    return session


def _register_sources(session: SparkSession) -> None:
    """Register the ``kafka-log`` data source (as the session's pushdown setting needs it)."""
    from cleanerd.spark._datasource import source_for  # noqa: PLC0415 (needs pyspark, checked)

    source_for(session, None)
