"""File names inside a partition dir: 20-digit base offsets and Kafka's temporary suffixes."""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def filename_prefix(offset: int) -> str:
    """Kafka writes base offsets with at least 20 digits, zero padded."""
    return f"{offset:020d}"


def offset_from_name(name: str) -> int:
    """The decimal text before the first dot; ValueError if it is not a number."""
    head = name.split(".", 1)[0]
    if not (head.isascii() and head.isdigit()):  # int() takes other scripts' digits too
        raise ValueError(f"{name!r} does not start with an offset")
    return int(head)


def segment_file(directory: Path, base_offset: int, suffix: str, temp_suffix: str = "") -> Path:
    """e.g. ``segment_file(d, 0, ".log", ".cleaned")`` -> ``d/00000000000000000000.log.cleaned``."""
    return directory / f"{filename_prefix(base_offset)}{suffix}{temp_suffix}"
