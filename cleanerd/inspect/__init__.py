"""The logic behind ``cleanerd dump``, ``verify`` and ``erasure check``, free of click and rich.

Everything here only reads: files are mapped read-only and no storage object that repairs on open
(``PartitionLog``) is used, so these commands are safe on a log dir a broker may open later.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
