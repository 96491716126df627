"""The per-topic settings the cleaner reads when planning, with Kafka's defaults and validation.

A small immutable value (not the daemon's pydantic model) so the engine, the CLI, the tests and
Spark executors can build one cheaply; ``config.py`` maps its per-topic overrides onto it. Errors
name the Kafka setting, the value and the rule, so a config layer can report them as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cleanerd.topic_catalog import (
    COMPACT,
    DELETE,
    INT_MAX,
    LONG_MAX,
    InvalidTopicConfigError,
    double_default,
    long_default,
    parse_cleanup_policy,
    parse_double,
    parse_long,
)

__all__ = [
    "COMPACT",
    "DELETE",
    "INT_MAX",
    "LONG_MAX",
    "InvalidTopicConfigError",
    "TopicCleanerConfig",
    "parse_cleanup_policy",
]

_LONG_SETTINGS = {
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
}
# producer.id.expiration.ms must fit a Java int when read by its Kafka name (``INT_SETTINGS``);
# the field itself takes any long, so tests (and tools) can switch expiration off as Kafka's own
# cleaner tests do by never running the expiration check.


@dataclass(frozen=True, slots=True)
class TopicCleanerConfig:
    """Kafka's topic settings that decide when and how far a log is cleaned.

    Names are Kafka's with dots as underscores; defaults are Kafka's (``cleanup.policy=delete``,
    ratio 0.5, no minimum lag, no maximum lag, tombstones kept one day, producers expire after
    one day). ``producer.id.expiration.ms`` is a broker setting in Kafka (the producer state's);
    here a topic may override it too.
    """

    compact: bool = False  # cleanup.policy contains "compact"
    delete: bool = True  # cleanup.policy contains "delete"
    min_cleanable_dirty_ratio: float = double_default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = long_default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = long_default("max.compaction.lag.ms")
    delete_retention_ms: int = long_default("delete.retention.ms")
    producer_id_expiration_ms: int = long_default("producer.id.expiration.ms")

    def __post_init__(self) -> None:
        ratio = self.min_cleanable_dirty_ratio
        if not (isinstance(ratio, int | float) and not isinstance(ratio, bool)):
            raise InvalidTopicConfigError("min.cleanable.dirty.ratio", ratio, "must be a number")
        # Kafka's Range validator lets NaN through (every comparison is false); we do not.
        if math.isnan(ratio) or not 0.0 <= ratio <= 1.0:
            raise InvalidTopicConfigError(
                "min.cleanable.dirty.ratio", ratio, "must be between 0 and 1"
            )
        for setting, minimum in (
            ("min.compaction.lag.ms", 0),
            ("max.compaction.lag.ms", 1),
            ("delete.retention.ms", 0),
            ("producer.id.expiration.ms", 1),
        ):
            value = getattr(self, _LONG_SETTINGS[setting])
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTopicConfigError(setting, value, "must be an integer (a Java long)")
            if value > LONG_MAX:
                raise InvalidTopicConfigError(setting, value, "does not fit a Java long")
            if value < minimum:
                raise InvalidTopicConfigError(setting, value, f"must be at least {minimum}")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:  # LogConfig.validateValues
            raise InvalidTopicConfigError(
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms,
                f"conflicts with max.compaction.lag.ms ({self.max_compaction_lag_ms}): "
                "min.compaction.lag.ms must not exceed max.compaction.lag.ms",
            )

    @property
    def cleanup_policy(self) -> str:
        """The policy list as Kafka writes it."""
        return ",".join(p for p, on in ((COMPACT, self.compact), (DELETE, self.delete)) if on)

    @property
    def compact_and_delete(self) -> bool:
        """Kafka does not warn of checkpoints below the log start for these (retention moves it)."""
        return self.compact and self.delete

    @classmethod
    def from_kafka(cls, settings: Mapping[str, object]) -> TopicCleanerConfig:
        """Build from Kafka-named settings (strings as in a properties file, or typed values).

        Settings the planner does not use (``segment.bytes``, ...) are ignored, so a topic's whole
        config can be passed.
        """
        values: dict[str, Any] = {}
        for name, raw in settings.items():
            if name == "cleanup.policy":
                if not isinstance(raw, str):
                    raise InvalidTopicConfigError(name, raw, "must be a comma-separated list")
                values["compact"], values["delete"] = parse_cleanup_policy(raw)
            elif name == "min.cleanable.dirty.ratio":
                values["min_cleanable_dirty_ratio"] = parse_double(name, raw)
            elif name in _LONG_SETTINGS:
                values[_LONG_SETTINGS[name]] = parse_long(name, raw)
        return cls(**values)
