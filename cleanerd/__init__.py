"""cleanerd: log compaction for Apache Kafka-format partition logs."""

from cleanerd._jitcache import configure_numba_cache

configure_numba_cache()

__version__ = "0.1.0"
