"""Kafka's retention settings for logs whose ``cleanup.policy`` contains ``delete``.

For ``compact,delete`` topics the cleaner also deletes whole old segments by time
(``retention.ms``) and size (``retention.bytes``), as Kafka's ``UnifiedLog.deleteOldSegments``
does; -1 means no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RETENTION_MS = 604_800_000  # log.retention.hours = 168


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """``retention.ms`` and ``retention.bytes``; a negative value means unlimited."""

    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = -1

    def __post_init__(self) -> None:
        for name, value in (
            ("retention.ms", self.retention_ms),
            ("retention.bytes", self.retention_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} = {value!r}: must be an integer")
            if value < -1:
                raise ValueError(f"{name} = {value}: must be -1 (unlimited) or at least 0")
