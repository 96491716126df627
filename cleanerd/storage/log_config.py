"""The per-topic settings storage needs (segment rolling, indexes), with Kafka's defaults.

``LogConfig`` is one part of the topic-settings model in ``cleanerd.topic_model`` (below the
config tree, which validates topic tables with it); this is its name inside storage.
"""

from __future__ import annotations

from cleanerd.topic_model import LogConfig

__all__ = ["LogConfig"]
