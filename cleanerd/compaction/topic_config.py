"""The per-topic settings the cleaner reads when planning, with Kafka's defaults and validation.

``TopicCleanerConfig`` is one part of the topic-settings model in ``cleanerd.topic_model``, which
sits below the config tree so the config can check ``[topics."glob"]`` tables with the engine's
own rules; this is its name inside the engine, beside the catalogue's parsing rules.
"""

from __future__ import annotations

from cleanerd.format.limits import INT_MAX, LONG_MAX
from cleanerd.topic_catalog import (
    COMPACT,
    DELETE,
    InvalidTopicConfigError,
    parse_cleanup_policy,
)
from cleanerd.topic_model import TopicCleanerConfig

__all__ = [
    "COMPACT",
    "DELETE",
    "INT_MAX",
    "LONG_MAX",
    "InvalidTopicConfigError",
    "TopicCleanerConfig",
    "parse_cleanup_policy",
]
