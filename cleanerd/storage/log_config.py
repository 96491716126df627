"""The per-topic settings storage needs (segment rolling, indexes), with Kafka's defaults.

The daemon's pydantic config maps Kafka's names onto this; storage itself stays a plain,
immutable value so the engine, the CLI and Spark executors can all build one cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

from cleanerd.topic_catalog import long_default


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka topic settings that shape segments; names are Kafka's with dots as underscores."""

    segment_bytes: int = long_default("segment.bytes")
    segment_ms: int = long_default("segment.ms")
    segment_jitter_ms: int = long_default("segment.jitter.ms")
    segment_index_bytes: int = long_default("segment.index.bytes")
    index_interval_bytes: int = long_default("index.interval.bytes")
    max_message_bytes: int = long_default("max.message.bytes")
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
