"""A topic's whole cleaning configuration, built from Kafka-named settings.

The one-shot CLI (``--config``) and the daemon's config (``cleanerd.config``) both resolve a
topic's settings to this value: the cleaner's rules, the KIP-280 strategy and the segment shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cleanerd.compaction.strategy import StrategyConfig
from cleanerd.compaction.topic_config import TopicCleanerConfig
from cleanerd.storage.log_config import LogConfig
from cleanerd.storage.retention import RetentionConfig
from cleanerd.topic_catalog import KNOWN_SETTINGS

__all__ = ["KNOWN_SETTINGS", "TopicSettings"]

_LOG_SETTINGS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
}
_RETENTION_SETTINGS = {"retention.ms": "retention_ms", "retention.bytes": "retention_bytes"}


@dataclass(frozen=True)
class TopicSettings:
    """What a topic is configured with: the cleaner's, the strategy's and storage's settings."""

    cleaner: TopicCleanerConfig
    strategy: StrategyConfig
    log: LogConfig
    retention: RetentionConfig = field(default_factory=RetentionConfig)  # with policy delete

    @classmethod
    def from_kafka(cls, settings: Mapping[str, object]) -> TopicSettings:
        """Build from Kafka-named settings; errors name the setting (ValueError)."""
        cleaner = TopicCleanerConfig.from_kafka(settings)
        log: dict[str, Any] = {"compact": cleaner.compact}
        log["max_compaction_lag_ms"] = cleaner.max_compaction_lag_ms
        log.update(_integers(settings, _LOG_SETTINGS))
        retention = RetentionConfig(**_integers(settings, _RETENTION_SETTINGS))
        return cls(cleaner, StrategyConfig.from_topic(settings), LogConfig(**log), retention)


def _integers(settings: Mapping[str, object], names: Mapping[str, str]) -> dict[str, int]:
    """The given ones of ``names`` (Kafka name -> field), parsed as integers."""
    out: dict[str, int] = {}
    for name, attr in names.items():
        if name in settings:
            raw = settings[name]
            try:
                out[attr] = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{name} = {raw!r}: must be an integer") from None
    return out
