"""The daemon and its asyncio code: workers, budget, maintenance, HTTP, metrics, systemd, logs.

What to clean next and each partition's state live in the synchronous ``scheduling`` package.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
