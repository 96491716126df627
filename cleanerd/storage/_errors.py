"""Errors about a log dir on disk: bad files, bad checkpoints, locks held by others."""

from __future__ import annotations


class StorageError(Exception):
    """A log dir, partition dir or file is not usable; the message names the path."""


class CorruptIndexError(StorageError):
    """An index file fails its sanity check (Kafka rebuilds it from the .log)."""


class CheckpointError(StorageError):
    """A checkpoint file does not parse; the message names the file and line."""


class LogDirLockedError(StorageError):
    """Another process (a running broker, or another cleanerd) holds the log dir's .lock."""


class OffsetOutOfRangeError(StorageError):
    """An offset lies outside the log, or outside a segment's 32-bit relative range."""


class UnsafeSwapError(StorageError):
    """A ``.swap`` or ``.cleaned`` file that recovery cannot trust: the partition is refused and
    nothing in its dir was renamed or deleted (finishing a bad swap would replace good data)."""


class NotRegularFileError(StorageError, OSError):
    """A file named like a segment or snapshot file is a symlink, a FIFO or another special
    file: it is refused rather than a link followed or a FIFO opened (``storage._regular``). An
    ``OSError`` too, as the open it stands for would have raised one."""
