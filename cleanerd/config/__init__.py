"""The daemon's configuration: its settings, where each value comes from, and what a check warns of.

One TOML file, Kafka's ``server.properties``, ``CLEANERD_*`` environment variables and
``--set`` are merged into one validated ``CleanerdConfig`` (``load_config``), each value with the
source that set it; per-topic tables go through the topic settings model (``cleanerd.topics``).
"""

import lazy_loader

# the names are in __init__.pyi (for type checkers too); each loads on first use, so
# importing the package costs nothing until a name of it is used
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
