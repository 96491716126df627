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

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
COMPACT = "compact"
DELETE = "delete"


class InvalidTopicConfigError(ValueError):
    """A topic setting Kafka would refuse; ``setting`` is its Kafka name."""

    def __init__(self, setting: str, value: object, rule: str) -> None:
        super().__init__(f"{setting} = {value!r}: {rule}")
        self.setting = setting
        self.value = value
        self.rule = rule


def parse_cleanup_policy(value: str) -> tuple[bool, bool]:
    """(compact, delete) from Kafka's comma-separated ``cleanup.policy`` list.

    Kafka checks the entries case-insensitively against ``compact`` and ``delete``; an empty list
    passes its validator, so it is accepted here too (neither flag set).
    """
    compact = delete = False
    for raw in value.split(","):
        item = raw.strip().lower()
        if item == COMPACT:
            compact = True
        elif item == DELETE:
            delete = True
        elif item:
            raise InvalidTopicConfigError(
                "cleanup.policy", value, f"{raw.strip()!r} is not one of 'compact', 'delete'"
            )
    return compact, delete


def _long(setting: str, value: object) -> int:
    """A Java long (or int, for the settings Kafka defines as INT) as Kafka parses it from a
    properties file or a typed value."""
    top, kind = (INT_MAX, "a Java int") if setting in _INT_SETTINGS else (LONG_MAX, "a Java long")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidTopicConfigError(setting, value, f"must be an integer ({kind})")
    try:
        number = int(value.strip()) if isinstance(value, str) else value
    except ValueError:
        raise InvalidTopicConfigError(setting, value, f"must be an integer ({kind})") from None
    if not -top - 1 <= number <= top:
        raise InvalidTopicConfigError(setting, value, f"does not fit {kind}")
    return number


def _double(setting: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidTopicConfigError(setting, value, "must be a number")
    try:
        return float(value)
    except ValueError:
        raise InvalidTopicConfigError(setting, value, "must be a number") from None


_LONG_SETTINGS = {
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
}
_INT_SETTINGS = frozenset({"producer.id.expiration.ms"})
"""Kafka defines these as INT: read by their Kafka name they must fit a Java int, as Kafka
refuses more. The field itself takes any long, so tests (and tools) can switch expiration off as
Kafka's own cleaner tests do by never running the expiration check."""


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
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    delete_retention_ms: int = 86_400_000  # delete.retention.ms
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms (broker setting)

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
                values["min_cleanable_dirty_ratio"] = _double(name, raw)
            elif name in _LONG_SETTINGS:
                values[_LONG_SETTINGS[name]] = _long(name, raw)
        return cls(**values)
