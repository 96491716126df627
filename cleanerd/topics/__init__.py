"""The topic settings model: every Kafka topic setting cleanerd knows, parsed and validated once.

The catalogue (names, Kafka defaults, parsers) and the typed settings the engine and storage
take (``LogConfig``, ``TopicCleanerConfig``, ``StrategyConfig``, ``TopicSettings``).
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
