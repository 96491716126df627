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


def parse_base_offset(name: str) -> int | None:
    """The base offset a segment file's name starts with (the decimal text before the first
    dot); None when the name does not start with one."""
    head = name.split(".", 1)[0]
    # ASCII only: int() takes other scripts' digits too
    return int(head) if head.isascii() and head.isdigit() else None


def offset_from_name(name: str) -> int:
    """``parse_base_offset`` for a name known to be a segment file's; ValueError otherwise."""
    base = parse_base_offset(name)
    if base is None:
        raise ValueError(f"{name!r} does not start with an offset")
    return base


def segment_file(directory: Path, base_offset: int, suffix: str, temp_suffix: str = "") -> Path:
    """e.g. ``segment_file(d, 0, ".log", ".cleaned")`` -> ``d/00000000000000000000.log.cleaned``."""
    return directory / f"{filename_prefix(base_offset)}{suffix}{temp_suffix}"
