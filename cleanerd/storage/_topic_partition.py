"""A topic-partition pair, and Kafka's topic-name rules (which also block path tricks)."""

from __future__ import annotations

import re
from typing import NamedTuple

from cleanerd.format import INT_MAX
from cleanerd.storage._errors import StorageError

MAX_TOPIC_NAME_LENGTH = 249
"""Kafka's limit (``Topic.MAX_NAME_LENGTH``): leaves room for ``-<partition>`` and dir suffixes."""

MAX_PARTITION = INT_MAX
"""Partitions are Java ints on the wire and in files."""

_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raise StorageError unless ``name`` is a topic name Kafka itself would accept.

    Kafka only allows ASCII letters, digits, '.', '_' and '-', so a valid name can never contain
    a path separator, whitespace, or be "." / ".."; that is what makes ``<topic>-<partition>``
    safe to join onto a log dir and safe to write into whitespace-separated checkpoint lines.
    """
    if not name:
        raise StorageError("invalid topic name '': it is empty")
    if name in (".", ".."):
        raise StorageError(f"invalid topic name {name!r}: '.' and '..' are not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise StorageError(
            f"invalid topic name {name[:40]!r}...: {len(name)} characters,"
            f" at most {MAX_TOPIC_NAME_LENGTH} allowed"
        )
    if _LEGAL_TOPIC.fullmatch(name) is None:
        raise StorageError(
            f"invalid topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' are allowed"
        )


def is_valid_topic_name(name: str) -> bool:
    """Boolean form of :func:`validate_topic_name`, for filtering directory listings."""
    try:
        validate_topic_name(name)
    except StorageError:
        return False
    return True


class TopicPartition(NamedTuple):
    """Sorts by (topic, partition), which is the order checkpoints and listings use."""

    topic: str
    partition: int

    @property
    def dir_name(self) -> str:
        """The partition directory name inside a log dir (Kafka ``logDirName``)."""
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name
