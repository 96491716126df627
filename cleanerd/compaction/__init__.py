"""The compaction engine: plan, offset map, strategies, transactions, cleaner, swap, stats.

A driver (the daemon's worker, ``cleanerd compact``, the benchmarks, the snapshot and Spark
drivers) needs only what is named here: the front door of ``engine`` (open a partition, plan it,
clean it once) and the objects it takes and gives back. Everything else is the engine's inside.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
