"""A topic's whole cleaning configuration, built from Kafka-named settings.

The one-shot CLI (``--config``) and the daemon's config (``cleanerd.config``) both resolve a
topic's settings to ``TopicSettings``: the cleaner's rules, the KIP-280 strategy and the segment
shape. It is defined in ``cleanerd.topic_model``, below the config tree; this is its name inside
the engine.
"""

from __future__ import annotations

from cleanerd.topic_catalog import KNOWN_SETTINGS
from cleanerd.topic_model import TopicSettings

__all__ = ["KNOWN_SETTINGS", "TopicSettings"]
