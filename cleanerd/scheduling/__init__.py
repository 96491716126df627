"""Kafka's LogCleanerManager, synchronous: states, survey, metadata cache, ranking, grab, sizing.

No asyncio here: the daemon (service/) runs ``CleanerManager.scan`` in a thread and calls the
rest from its event loop; the tests drive it with a fake clock and no loop at all.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
