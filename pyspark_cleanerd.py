"""Spark's way to cleanerd's ``kafka-log`` data source, in any session.

pyspark 4 registers the ``DefaultSource`` of every installed top-level module whose name starts
with ``pyspark_`` in each session it starts (it imports them all in one Python worker when a
query first names a format Spark does not know). So with cleanerd installed with its ``spark``
extra, ``spark.read.format("kafka-log")`` works in the pyspark shell, a notebook or a plain
``SparkSession.builder`` session, without ``cleanerd.spark.build_session``.

Importing this module must never raise: Spark does not catch what one of those modules raises,
and its lookup then fails for all of them, so one broken install would hide every other
package's data sources too. Without cleanerd's source (pyspark missing, a broken install) the
module has no ``DefaultSource``, Spark skips it, and ``LOAD_ERROR`` says why.
"""

from __future__ import annotations

LOAD_ERROR: Exception | None = None
"""Why ``DefaultSource`` is missing, or None when it is there."""

try:
    # imports pyspark's data source classes only (the lookup worker has them loaded already)
    from cleanerd.spark import KafkaLogDataSource as DefaultSource  # noqa: F401 (Spark's name)
except Exception as error:  # see the module docstring: nothing may escape
    LOAD_ERROR = error
