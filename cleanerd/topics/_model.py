"""The topic-settings model: what one topic is configured with, as small immutable values.

``TopicSettings`` and its parts (the cleaner's settings, the KIP-280 strategy, the segment shape,
retention) are built from Kafka-named settings with Kafka's defaults and rules. They sit below the
config tree, storage and the engine (this module imports only ``topic_catalog`` and
``format._limits``), so the config can validate ``[topics."glob"]`` tables with the engine's own
rules without importing the engine, and storage, the engine, the CLI and Spark executors all
build the same values cheaply. Errors name the Kafka setting, the value and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from cleanerd.format import LONG_MAX
from cleanerd.topics._catalog import (
    COMPACT,
    DEFAULTS,
    DELETE,
    KNOWN_SETTINGS,
    InvalidTopicConfigError,
    double_default,
    long_default,
    parse_boolean,
    parse_cleanup_policy,
    parse_compression_type,
    parse_double,
    parse_long,
)

__all__ = [
    "BROKER_STRATEGY",
    "BROKER_STRATEGY_HEADER",
    "DEFAULT_RETENTION_MS",
    "KNOWN_SETTINGS",
    "TOPIC_STRATEGY",
    "TOPIC_STRATEGY_HEADER",
    "LogConfig",
    "RetentionConfig",
    "SnapshotSettings",
    "Strategy",
    "StrategyConfig",
    "TopicCleanerConfig",
    "TopicSettings",
]

BROKER_STRATEGY = "log.cleaner.compaction.strategy"
BROKER_STRATEGY_HEADER = "log.cleaner.compaction.strategy.header"
TOPIC_STRATEGY = "compaction.strategy"
TOPIC_STRATEGY_HEADER = "compaction.strategy.header"


class Strategy(StrEnum):
    """How the winner per key is chosen (KIP-280 names, as written in the settings)."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    HEADER = "header"


@dataclass(frozen=True)
class StrategyConfig:
    """A strategy with its header name, normalised by KIP-280's rules.

    A ``header`` strategy with a blank header name falls back to ``offset`` (the KIP's rule), and
    the header name is kept only for the ``header`` strategy, so equal behaviour compares equal.
    """

    strategy: Strategy = Strategy.OFFSET
    header_name: str = ""

    def __post_init__(self) -> None:
        strategy = Strategy(self.strategy)
        name = self.header_name if strategy is Strategy.HEADER else ""
        if strategy is Strategy.HEADER and not name.strip():
            strategy, name = Strategy.OFFSET, ""
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "header_name", name)

    @property
    def versioned(self) -> bool:
        """True when the map must store a version per key (32-byte slots instead of 24)."""
        return self.strategy is not Strategy.OFFSET

    @property
    def header_name_bytes(self) -> bytes:
        """The header name as it appears on the wire (UTF-8)."""
        return self.header_name.encode("utf-8")

    @classmethod
    def parse(
        cls,
        strategy: object,
        header_name: object = "",
        *,
        setting: str = TOPIC_STRATEGY,
        header_setting: str = TOPIC_STRATEGY_HEADER,
    ) -> StrategyConfig:
        """Validate raw setting values; errors name the setting they came from."""
        if strategy is None:
            strategy = Strategy.OFFSET.value
        if not isinstance(strategy, str):
            raise ValueError(f"{setting}: expected a string, got {strategy!r}")
        text = strategy.strip().lower()
        try:
            parsed = Strategy(text)
        except ValueError:
            allowed = ", ".join(s.value for s in Strategy)
            raise ValueError(
                f"{setting}: unknown strategy {strategy!r} (one of {allowed})"
            ) from None
        if header_name is None:
            header_name = ""
        if not isinstance(header_name, str):
            raise ValueError(f"{header_setting}: expected a string, got {header_name!r}")
        return cls(parsed, header_name)

    @classmethod
    def from_broker(cls, props: Mapping[str, object]) -> StrategyConfig:
        """The broker-wide default from ``log.cleaner.compaction.strategy[.header]``."""
        return cls.parse(
            props.get(BROKER_STRATEGY),
            props.get(BROKER_STRATEGY_HEADER),
            setting=BROKER_STRATEGY,
            header_setting=BROKER_STRATEGY_HEADER,
        )

    @classmethod
    def from_topic(
        cls, topic: Mapping[str, object], broker: Mapping[str, object] | None = None
    ) -> StrategyConfig:
        """A topic's strategy: each topic setting overrides its broker-wide synonym.

        The two settings are resolved separately (as Kafka resolves topic configs), so a topic
        that sets only ``compaction.strategy=header`` uses the broker's header name.
        """
        broker = broker or {}
        if TOPIC_STRATEGY in topic:
            strategy, setting = topic[TOPIC_STRATEGY], TOPIC_STRATEGY
        else:
            strategy, setting = broker.get(BROKER_STRATEGY), BROKER_STRATEGY
        if TOPIC_STRATEGY_HEADER in topic:
            header, header_setting = topic[TOPIC_STRATEGY_HEADER], TOPIC_STRATEGY_HEADER
        else:
            header, header_setting = broker.get(BROKER_STRATEGY_HEADER), BROKER_STRATEGY_HEADER
        return cls.parse(strategy, header, setting=setting, header_setting=header_setting)


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


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka topic settings that shape segments; names are Kafka's with dots as underscores."""

    segment_bytes: int = long_default("segment.bytes")
    segment_ms: int = long_default("segment.ms")
    segment_jitter_ms: int = long_default("segment.jitter.ms")
    segment_index_bytes: int = long_default("segment.index.bytes")
    index_interval_bytes: int = long_default("index.interval.bytes")
    max_message_bytes: int = long_default("max.message.bytes")
    max_decompressed_message_bytes: int = long_default("max.decompressed.message.bytes")
    compact: bool = False  # cleanup.policy contains "compact"
    max_compaction_lag_ms: int = long_default("max.compaction.lag.ms")

    def __post_init__(self) -> None:
        checks = (
            ("segment.bytes", self.segment_bytes, 14),
            ("segment.ms", self.segment_ms, 1),
            ("segment.jitter.ms", self.segment_jitter_ms, 0),
            ("segment.index.bytes", self.segment_index_bytes, 4),
            ("index.interval.bytes", self.index_interval_bytes, 0),
            ("max.message.bytes", self.max_message_bytes, 0),
            ("max.decompressed.message.bytes", self.max_decompressed_message_bytes, 1),
            ("max.compaction.lag.ms", self.max_compaction_lag_ms, 1),
        )
        for name, value, minimum in checks:
            if value < minimum:
                raise ValueError(f"{name} = {value}: must be at least {minimum}")

    @property
    def max_segment_ms(self) -> int:
        """Age at which the active segment rolls: compacted topics roll by the max lag too."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms


DEFAULT_RETENTION_MS = long_default("retention.ms")  # log.retention.hours = 168


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """``retention.ms`` and ``retention.bytes``; a negative value means unlimited."""

    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = long_default("retention.bytes")

    def __post_init__(self) -> None:
        for name, value in (
            ("retention.ms", self.retention_ms),
            ("retention.bytes", self.retention_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} = {value!r}: must be an integer")
            if value < -1:
                raise ValueError(f"{name} = {value}: must be -1 (unlimited) or at least 0")


_LOG_SETTINGS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
    "max.decompressed.message.bytes": "max_decompressed_message_bytes",
}
_RETENTION_SETTINGS = {"retention.ms": "retention_ms", "retention.bytes": "retention_bytes"}


@dataclass(frozen=True)
class SnapshotSettings:
    """A topic's KIP-630 snapshots: taken by the daemon when enabled, once more than
    ``minimum_records`` offsets lie between the newest snapshot and the high watermark; the
    newest ``retention_count`` kept; with ``truncate_log`` the segments a snapshot replaces go."""

    enable: bool = False
    minimum_records: int = long_default("snapshot.minimum.records")
    retention_count: int = long_default("snapshot.retention.count")
    truncate_log: bool = False
    compression_type: str = "producer"

    def __post_init__(self) -> None:
        if self.minimum_records < 0:
            raise InvalidTopicConfigError(
                "snapshot.minimum.records", self.minimum_records, "must be at least 0"
            )
        if self.retention_count < 1:
            raise InvalidTopicConfigError(
                "snapshot.retention.count", self.retention_count, "must be at least 1"
            )

    @classmethod
    def from_kafka(cls, settings: Mapping[str, object]) -> SnapshotSettings:
        def get(name: str) -> object:
            return settings.get(name, DEFAULTS[name])

        return cls(
            enable=parse_boolean("snapshot.enable", get("snapshot.enable")),
            minimum_records=parse_long("snapshot.minimum.records", get("snapshot.minimum.records")),
            retention_count=parse_long("snapshot.retention.count", get("snapshot.retention.count")),
            truncate_log=parse_boolean("snapshot.truncate.log", get("snapshot.truncate.log")),
            compression_type=parse_compression_type("compression.type", get("compression.type")),
        )


@dataclass(frozen=True)
class TopicSettings:
    """What a topic is configured with: the cleaner's, the strategy's and storage's settings."""

    cleaner: TopicCleanerConfig
    strategy: StrategyConfig
    log: LogConfig
    retention: RetentionConfig = field(default_factory=RetentionConfig)  # with policy delete
    snapshot: SnapshotSettings = field(default_factory=SnapshotSettings)

    @classmethod
    def from_kafka(cls, settings: Mapping[str, object]) -> TopicSettings:
        """Build from Kafka-named settings; errors name the setting (ValueError)."""
        cleaner = TopicCleanerConfig.from_kafka(settings)
        log: dict[str, Any] = {"compact": cleaner.compact}
        log["max_compaction_lag_ms"] = cleaner.max_compaction_lag_ms
        log.update(_integers(settings, _LOG_SETTINGS))
        retention = RetentionConfig(**_integers(settings, _RETENTION_SETTINGS))
        strategy = StrategyConfig.from_topic(settings)
        snapshot = SnapshotSettings.from_kafka(settings)
        return cls(cleaner, strategy, LogConfig(**log), retention, snapshot)


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
