"""Log dirs for the cleaner manager's tests, with exact timestamps: topics whose names say their
settings (``_settings``), partitions of one rolled segment per timestamp (``_log``), and a clock
the tests set (``Clock``). Shared by ``tests/scheduling/test_manager.py`` and
``tests/service/test_workers.py``.
"""

from __future__ import annotations

from pathlib import Path

from cleanerd.format import Record
from cleanerd.storage import PartitionLog, TopicPartition
from cleanerd.topics import LogConfig, TopicSettings

HOUR = 3_600_000
LAG = 6 * HOUR  # max.compaction.lag.ms of the compacted test topics
NOW = 1_700_000_000_000
OLD = NOW - 2 * LAG  # overdue
RECENT = NOW - HOUR
PER_SEGMENT = 4
BUDGET = 1 << 20


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _tp(topic: str) -> TopicPartition:
    return TopicPartition(topic, 0)


def _settings(topic: str) -> TopicSettings:
    """Topics named ``plain*`` are delete-only, ``bad*`` have an invalid config, ``cd*`` are
    compact,delete with one hour's retention; the rest are compacted with ``LAG``."""
    if topic.startswith("bad"):
        raise ValueError("min.cleanable.dirty.ratio = 2.0: must be between 0 and 1")
    kafka: dict[str, object] = {"cleanup.policy": "compact", "max.compaction.lag.ms": LAG}
    if topic.startswith("plain"):
        kafka = {"cleanup.policy": "delete"}
    elif topic.startswith("cd"):
        kafka = {**kafka, "cleanup.policy": "compact,delete", "retention.ms": HOUR}
    return TopicSettings.from_kafka(kafka)


def _log(log_dir: Path, topic: str, stamps: list[int], active: int | None = RECENT) -> PartitionLog:
    """One rolled segment of ``PER_SEGMENT`` equal batches per timestamp, then an active segment
    holding one batch (stamped ``active``) or none."""
    log = PartitionLog.create(log_dir / _tp(topic).dir_name, LogConfig(), clock=lambda: NOW)
    for ts in stamps:
        for _ in range(PER_SEGMENT):
            n = log.log_end_offset
            log.append([Record(0, ts, f"k{n:05d}".encode(), b"v" * 30)])
        log.roll()
    if active is not None:
        log.append([Record(0, active, b"kactive", b"v" * 30)])
    return log
