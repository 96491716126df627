"""Every Kafka topic setting cleanerd reads, listed once: name, Kafka's default, broker synonym.

The config tree (defaults, ``[topics."glob"]`` tables, ``config show``) and the topic values
the engine and storage use (``topic_model``) read the same list, so a default or a synonym cannot
differ between them. It sits below all of them (it imports only format/_limits.py), with the
parsing rules Kafka applies to the values.
"""

from __future__ import annotations

from dataclasses import dataclass

from cleanerd._errors import PickledWhole
from cleanerd.format import INT_MAX, LONG_MAX, MAX_DECOMPRESSED_BYTES

COMPACT = "compact"
DELETE = "delete"


@dataclass(frozen=True, slots=True)
class TopicSetting:
    """One Kafka topic setting: its name, Kafka's default, the broker setting that sets it and
    what it does to a cleaning (the reference table in docs/configuration.md comes from these)."""

    name: str
    default: object
    broker: str
    meaning: str


TOPIC_SETTINGS = (
    TopicSetting(
        "cleanup.policy",
        DELETE,
        "log.cleanup.policy",
        "`compact`: the topic is cleaned; `delete`: never touched; `compact,delete`: cleaned, "
        "and its segments past retention deleted.",
    ),
    TopicSetting(
        "min.cleanable.dirty.ratio",
        0.5,
        "log.cleaner.min.cleanable.ratio",
        "A log is cleaned once this share of its cleanable bytes is not yet cleaned (or a "
        "record is past `max.compaction.lag.ms`).",
    ),
    TopicSetting(
        "delete.retention.ms",
        86_400_000,
        "log.cleaner.delete.retention.ms",
        "How long a tombstone or a transaction marker stays after the cleaning that first "
        "kept it (its batch's delete horizon, KIP-534).",
    ),
    TopicSetting(
        "min.compaction.lag.ms",
        0,
        "log.cleaner.min.compaction.lag.ms",
        "Records younger than this are not compacted.",
    ),
    TopicSetting(
        "max.compaction.lag.ms",
        LONG_MAX,
        "log.cleaner.max.compaction.lag.ms",
        "No record stays uncompacted longer than this, whatever the ratio (KIP-354): such a log "
        "is cleaned first, its idle active segment rolled.",
    ),
    TopicSetting(
        "segment.bytes",
        1_073_741_824,
        "log.segment.bytes",
        "The largest segment: a cleaning groups segments into outputs no longer than this.",
    ),
    TopicSetting(
        "segment.ms",
        604_800_000,
        "log.roll.ms",
        "The active segment's roll age on an append (or `max.compaction.lag.ms`, if lower), as "
        "Kafka's; the daemon's rolls of an idle one follow `max.compaction.lag.ms` alone.",
    ),
    TopicSetting(
        "segment.jitter.ms",
        0,
        "log.roll.jitter.ms",
        "Up to this much is taken off a segment's roll age on an append (a per-segment jitter, "
        "as Kafka's).",
    ),
    TopicSetting(
        "segment.index.bytes",
        10_485_760,
        "log.index.size.max.bytes",
        "The largest `.index` or `.timeindex`: a segment's output rolls when one is full, and a "
        "longer index file is corrupt.",
    ),
    TopicSetting(
        "index.interval.bytes",
        4096,
        "log.index.interval.bytes",
        "Log bytes between two entries of a written segment's indexes.",
    ),
    TopicSetting(
        "max.message.bytes",
        1_048_588,
        "message.max.bytes",
        "Kafka's limit on a produced batch, accepted for Kafka's configs: a cleaning reads any "
        "batch its segment holds whole.",
    ),
    # Kafka 4.x (LogConfig): bounds decompressed records. Kafka's default is no bound in practice
    # (Records.SOFT_MAX_ARRAY_LENGTH); cleanerd's is 128 MiB per batch, so a bomb is refused.
    TopicSetting(
        "max.decompressed.message.bytes",
        MAX_DECOMPRESSED_BYTES,
        "max.decompressed.message.bytes",
        "The most one batch's records may take decompressed; a batch past it is refused as "
        "corrupt.",
    ),
    TopicSetting(
        "retention.ms",
        604_800_000,
        "log.retention.ms",
        "`compact,delete` topics: segments whose newest record is older are deleted; -1: none.",
    ),
    TopicSetting(
        "retention.bytes",
        -1,
        "log.retention.bytes",
        "`compact,delete` topics: the oldest segments are deleted while the log is larger; "
        "-1: no limit.",
    ),
    TopicSetting(
        "compaction.strategy",
        "offset",
        "log.cleaner.compaction.strategy",
        "Which record of a key survives (KIP-280): the newest by `offset`, by `timestamp`, or "
        "by the `header` named below.",
    ),
    TopicSetting(
        "compaction.strategy.header",
        "",
        "log.cleaner.compaction.strategy.header",
        "The header holding a record's version, for `compaction.strategy = header`.",
    ),
    # a broker setting in Kafka (the producer state's); here a topic may override it too
    TopicSetting(
        "producer.id.expiration.ms",
        86_400_000,
        "producer.id.expiration.ms",
        "A producer with no open transaction and nothing newer than this is forgotten: its last "
        "batch is no longer kept.",
    ),
    # the codec of the topic's snapshots ("producer": uncompressed, as a snapshot has no producer)
    TopicSetting(
        "compression.type",
        "producer",
        "compression.type",
        "The codec of the topic's snapshots (`producer`: uncompressed).",
    ),
    # KIP-630 snapshots of the compacted state (cleanerd's own; Kafka has them only for KRaft)
    TopicSetting(
        "snapshot.enable",
        False,
        "log.cleaner.snapshot.enable",
        "Whether the daemon takes KIP-630 snapshots of the topic's compacted state.",
    ),
    TopicSetting(
        "snapshot.minimum.records",
        20_000,
        "log.cleaner.snapshot.minimum.records",
        "New records since the last snapshot before the next one is taken.",
    ),
    TopicSetting(
        "snapshot.retention.count",
        2,
        "log.cleaner.snapshot.retention.count",
        "Snapshots kept, newest first.",
    ),
    TopicSetting(
        "snapshot.truncate.log",
        False,
        "log.cleaner.snapshot.truncate.log",
        "Whether the log is truncated up to the oldest snapshot kept.",
    ),
)
"""The topic settings the cleaner uses, in the order ``config show`` lists their broker names."""

DEFAULTS = {s.name: s.default for s in TOPIC_SETTINGS}
"""Kafka's default of each topic setting, by its topic name."""
BROKER_TOPIC_DEFAULTS: dict[str, tuple[str, object]] = {
    s.broker: (s.name, s.default) for s in TOPIC_SETTINGS
}
"""Broker settings that default a topic setting: broker name -> (topic name, Kafka's default)."""
KNOWN_SETTINGS = frozenset(DEFAULTS)
"""The Kafka topic settings the cleaner uses; others in a config file are reported and ignored."""
INT_SETTINGS = frozenset({"producer.id.expiration.ms", "max.decompressed.message.bytes"})
"""Kafka defines these as INT: read by their Kafka name they must fit a Java int, as Kafka
refuses more."""

UNUSED_TOPIC_SETTINGS = frozenset(
    (
        *("compression.gzip.level", "compression.lz4.level"),
        *("compression.zstd.level", "file.delete.delay.ms", "flush.messages", "flush.ms"),
        *("follower.replication.throttled.replicas", "leader.replication.throttled.replicas"),
        *("local.retention.bytes", "local.retention.ms", "message.downconversion.enable"),
        *("message.format.version", "message.timestamp.after.max.ms", "min.insync.replicas"),
        *("message.timestamp.before.max.ms", "message.timestamp.difference.max.ms"),
        *("message.timestamp.type", "preallocate", "remote.storage.enable"),
        "unclean.leader.election.enable",
    )
)
"""Kafka topic settings the cleaner has no use for: a note, not an error, in a topic table."""


class InvalidTopicConfigError(PickledWhole, ValueError):
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


def parse_long(setting: str, value: object) -> int:
    """A Java long (or int, for the settings Kafka defines as INT) as Kafka parses it from a
    properties file or a typed value."""
    top, kind = (INT_MAX, "a Java int") if setting in INT_SETTINGS else (LONG_MAX, "a Java long")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidTopicConfigError(setting, value, f"must be an integer ({kind})")
    try:
        number = int(value.strip()) if isinstance(value, str) else value
    except ValueError:
        raise InvalidTopicConfigError(setting, value, f"must be an integer ({kind})") from None
    if not -top - 1 <= number <= top:
        raise InvalidTopicConfigError(setting, value, f"does not fit {kind}")
    return number


def parse_double(setting: str, value: object) -> float:
    """A Java double as Kafka parses it; booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidTopicConfigError(setting, value, "must be a number")
    try:
        return float(value)
    except ValueError:
        raise InvalidTopicConfigError(setting, value, "must be a number") from None


COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
"""Kafka's ``compression.type`` values."""


def parse_boolean(setting: str, value: object) -> bool:
    """A Kafka BOOLEAN: a bool, or ``true``/``false`` in any case (a properties file's text)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidTopicConfigError(setting, value, "must be true or false")


def parse_compression_type(setting: str, value: object) -> str:
    """One of Kafka's ``compression.type`` values (case-insensitive)."""
    text = str(value).strip().lower()
    if text not in COMPRESSION_TYPES:
        raise InvalidTopicConfigError(
            setting, value, f"must be one of {', '.join(COMPRESSION_TYPES)}"
        )
    return text


def long_default(name: str) -> int:
    """Kafka's default of an integer topic setting, typed for a dataclass field."""
    value = DEFAULTS[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} has no integer default")
    return value


def double_default(name: str) -> float:
    """Kafka's default of a number topic setting, typed for a dataclass field."""
    value = DEFAULTS[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} has no number default")
    return float(value)
