"""Seeded workload generation for Kafka-format logs, and the expected-survivor oracle.

Plain library code (no click, no rich) so ``cleanerd gen``, tests and benchmarks share it.
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
