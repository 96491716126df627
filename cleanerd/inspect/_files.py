"""Read-only access to files on disk, and what kind of Kafka file a path is."""

from __future__ import annotations

import enum
from pathlib import Path

from cleanerd.storage import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    OFFSET_CHECKPOINTS,
    PARTITION_METADATA,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_base_offset,
    parse_partition_dir_name,
    segment_logs as segment_files,
)

_TEMP_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)
_CHECKPOINT_NAMES = (*OFFSET_CHECKPOINTS, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA)


class FileKind(enum.Enum):
    """What ``cleanerd dump`` can print."""

    LOG = "log"
    OFFSET_INDEX = "offset_index"
    TIME_INDEX = "time_index"
    TXN_INDEX = "txn_index"
    CHECKPOINT = "checkpoint"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    PARTITION_DIR = "partition_dir"


class UnknownFileKindError(ValueError):
    """The path is not a file ``dump`` understands (a usage error, not corrupt data)."""


def strip_temp_suffix(name: str) -> str:
    """``x.log.swap`` -> ``x.log``: leftovers of a swap are dumped like the file they became."""
    for suffix in _TEMP_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def segment_logs(directory: Path, *, skip: bool = False) -> list[tuple[int, Path]]:
    """``(base offset, path)`` of the live ``<offset>.log`` files of a partition dir, in order;
    NotRegularFileError names a file named like a segment file that is a symlink or a FIFO
    (``skip``: such files are left out instead)."""
    found = segment_files(directory, skip=skip)
    return sorted((base, path) for base, (path, _) in found.items())


def classify(path: Path) -> FileKind:
    """Decide how to dump ``path`` from its name (Kafka's files are named by kind).

    Index files must be named by their base offset: their entries are relative to it.
    """
    if path.is_dir():
        if segment_logs(path) or parse_partition_dir_name(path.name) is not None:
            return FileKind.PARTITION_DIR
        raise UnknownFileKindError(
            f"{path} is a directory without segments and not named <topic>-<partition>; "
            "pass a partition dir (use 'cleanerd verify' for a whole log dir)"
        )
    name = strip_temp_suffix(path.name)
    if name.removesuffix(TMP_SUFFIX) in _CHECKPOINT_NAMES:
        return FileKind.CHECKPOINT
    if name.endswith(LOG_SUFFIX):
        return FileKind.LOG
    if name.endswith(SNAPSHOT_SUFFIX):
        return FileKind.PRODUCER_SNAPSHOT
    kinds = {
        INDEX_SUFFIX: FileKind.OFFSET_INDEX,
        TIME_INDEX_SUFFIX: FileKind.TIME_INDEX,
        TXN_INDEX_SUFFIX: FileKind.TXN_INDEX,
    }
    for suffix, kind in kinds.items():
        if name.endswith(suffix):
            if parse_base_offset(path.name) is None:
                raise UnknownFileKindError(
                    f"{path}: an index file name must start with the segment base offset"
                )
            return kind
    raise UnknownFileKindError(
        f"{path}: unknown file kind; expected a .log, .index, .timeindex, .txnindex or "
        f".snapshot file, a partition dir, or one of: {', '.join(_CHECKPOINT_NAMES)}"
    )
