"""The compaction engine: plan, offset map, strategies, transactions, cleaner, swap, stats.

A driver (the daemon's worker, ``cleanerd compact``, the benchmarks, the snapshot and Spark
drivers) needs only what is named here: the front door of ``engine`` (open a partition, plan it,
clean it once) and the objects it takes and gives back. Everything else is the engine's inside.
"""

from __future__ import annotations

from cleanerd.compaction.cleaner import Cleaner, CleanResult
from cleanerd.compaction.engine import clean_once, open_log, plan_log
from cleanerd.compaction.offset_map import OffsetMap
from cleanerd.compaction.plan import CleaningPlan, LogMeta

__all__ = [
    "CleanResult",
    "Cleaner",
    "CleaningPlan",
    "LogMeta",
    "OffsetMap",
    "clean_once",
    "open_log",
    "plan_log",
]
