"""Kafka's on-disk log: partition dirs, segments and their indexes, checkpoints, the swap protocol.

Everything that reads or writes a partition's files goes through here: ``PartitionLog`` (open,
repair, append, roll, swap), the read-only ``ReadOnlyLog``, the checkpoint files, and the one
rule for which files are segments (``segment_logs``). No asyncio, no compaction logic.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
