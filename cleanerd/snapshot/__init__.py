"""Snapshots (KIP-630) of a compacted partition's state: files, writing, validating, loading.

Synchronous, below service/: the daemon and the CLI drive it. See docs/architecture.md.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
