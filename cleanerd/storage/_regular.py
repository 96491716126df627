"""Segment and snapshot files must be regular files: the one rule for symlinks, FIFOs and devices.

cleanerd rewrites, truncates, renames and deletes a partition's segment files, so it must never
act on whatever a symlink named like a segment points at (an ``.index`` linked to
``/etc/passwd`` would be truncated or replaced), and a FIFO named like a segment would block
the first ``open`` forever. A partition dir holding such a file is refused as corrupt: every
lister of segment files goes through ``segment_logs`` here, and every open of one through
``open_regular`` (``O_NOFOLLOW | O_NONBLOCK``, then an ``fstat`` of what was opened).
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from pathlib import Path

import numpy as np
import numpy.typing as npt

from cleanerd.storage._errors import NotRegularFileError
from cleanerd.storage._files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    offset_from_name,
    parse_base_offset,
)

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str | None:
    """What a non-regular file is ("a symbolic link", "a FIFO", ...); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def file_kind(mode: int) -> str:
    """What ``st_mode`` is, in words, regular files included (for messages)."""
    return kind_of(mode) or "a regular file"


def why_refused(kind: str) -> str:
    """The words of a refusal, without the path (``kind`` as ``kind_of`` says it)."""
    return (
        f"not a regular file ({kind}); cleanerd never follows a symlink or opens a special "
        "file in a partition dir"
    )


def refusal(path: Path | str, kind: str) -> NotRegularFileError:
    return NotRegularFileError(f"{path}: {why_refused(kind)}")


def check_regular(path: Path | str) -> None:
    """Raise NotRegularFileError unless ``path`` itself (not a link's target) is a regular file.

    FileNotFoundError passes through: a missing file is each caller's own case.
    """
    kind = kind_of(os.lstat(path).st_mode)
    if kind is not None:
        raise refusal(path, kind)


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """``os.open`` that refuses symlinks and special files instead of following or blocking.

    ``O_NONBLOCK`` keeps a FIFO from blocking the open; it has no effect on a regular file.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        # ELOOP: a symlink under O_NOFOLLOW; ENXIO: a FIFO opened for writing with no reader
        if e.errno in (errno.ELOOP, errno.ENXIO):
            check_regular(path)
        raise
    try:
        kind = kind_of(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if kind is not None:
        os.close(fd)
        raise refusal(path, kind)
    return fd


def read_regular(path: Path | str, max_bytes: int | None = None) -> bytes:
    """The whole file, read through ``open_regular``; with ``max_bytes``, at most one byte more
    than that (a longer result says the file is too long, and memory stays bounded whatever
    length a hostile or sparse file claims)."""
    fd = open_regular(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read() if max_bytes is None else f.read(max_bytes + 1)


def map_regular(path: Path | str) -> tuple[mmap.mmap | None, os.stat_result]:
    """The whole file mapped read-only (None when it is empty) and its stat, both from one
    ``open_regular`` (so they agree). ``ACCESS_READ`` makes any write through the map fail."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)  # the file we map: a rename since an earlier stat shows here
        if st.st_size == 0:
            return None, st
        return mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ), st
    finally:
        os.close(fd)


def view_regular(path: Path | str) -> tuple[npt.NDArray[np.uint8], os.stat_result]:
    """``map_regular`` as a ``uint8`` array (mapped, so big segments cost no memory)."""
    mm, st = map_regular(path)
    if mm is None:
        return np.zeros(0, dtype=np.uint8), st
    return np.frombuffer(mm, dtype=np.uint8), st


def map_readonly(path: Path | str) -> npt.NDArray[np.uint8]:
    """The whole file as a read-only ``uint8`` array (``view_regular`` without the stat)."""
    return view_regular(path)[0]


def is_segment_file_name(name: str) -> bool:
    """``<digits>.log``, ``.index``, ``.timeindex`` or ``.txnindex``, with or without a
    temporary suffix (``.cleaned``, ``.swap``, ``.deleted``) after it."""
    if parse_base_offset(name) is None:
        return False
    for temp in (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX):
        name = name.removesuffix(temp)
    return name.endswith(SEGMENT_SUFFIXES)


def _lstat_entries(
    directory: Path, names: list[str] | None = None
) -> list[tuple[str, str, os.stat_result]]:
    """(name, path, lstat) of the entries named like segment files; ones that vanish while
    listed (a swap or a deletion by another process) are left out. ``names`` gets every
    entry's name, for a caller that needs the whole listing too."""
    out = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if names is not None:
                names.append(entry.name)
            if is_segment_file_name(entry.name):
                try:  # os.stat, not entry.stat: the same call as every other stat here
                    out.append((entry.name, entry.path, os.stat(entry.path, follow_symlinks=False)))
                except FileNotFoundError:
                    continue
    return out


def irregular_segment_files(directory: Path) -> list[tuple[Path, str]]:
    """``(path, what it is)`` of every file named like a segment file that is not a regular
    file, by name; for ``cleanerd verify``, which reports each instead of stopping."""
    found = []
    for _, path, st in _lstat_entries(directory):
        kind = kind_of(st.st_mode)
        if kind is not None:
            found.append((Path(path), kind))
    return sorted(found)


def segment_log_stats(
    directory: Path, *, skip: bool = False, names: list[str] | None = None
) -> dict[int, tuple[str, os.stat_result]]:
    """Base offset -> (path, lstat) of every ``<digits>.log`` in a partition dir (Kafka's
    loader's rule), after checking that every file named like a segment file is a regular file.

    Raises NotRegularFileError naming the first one that is not (by name); with ``skip`` those
    are left out instead (``verify`` reports them from ``irregular_segment_files``). ``names``
    gets the name of every entry of the dir.
    """
    found: dict[int, tuple[str, os.stat_result]] = {}
    bad: list[tuple[str, str]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if names is not None:
                names.append(name)
            if not is_segment_file_name(name):
                continue
            log = name.endswith(LOG_SUFFIX)
            # an index or temporary file the listing says is regular needs no stat: only the
            # .log files' stats are returned (the daemon's survey lists every partition)
            if not log and entry.is_file(follow_symlinks=False):
                continue
            try:  # os.stat, not entry.stat: the same call as every other stat here
                st = os.stat(entry.path, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone while listed (a swap or a deletion by another process)
            kind = kind_of(st.st_mode)
            if kind is not None:
                bad.append((entry.path, kind))
            elif log:
                found[offset_from_name(name)] = (entry.path, st)
    if bad and not skip:
        raise refusal(*min(bad))
    return found


def segment_logs(directory: Path, *, skip: bool = False) -> dict[int, tuple[Path, int]]:
    """``segment_log_stats`` as base offset -> (path, inode)."""
    found = segment_log_stats(directory, skip=skip)
    return {base: (Path(path), st.st_ino) for base, (path, st) in found.items()}


def truncate_regular(path: Path | str, size: int) -> bool:
    """Cut the file to ``size`` bytes through ``open_regular`` (``os.truncate`` of a path
    follows a symlink); False when there is no file."""
    try:
        fd = open_regular(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return True
