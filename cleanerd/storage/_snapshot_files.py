"""Where KIP-630 snapshots live and how they are named (kafka-format.md §6); snapshot/ writes them.

In storage/ because the log's own keepers read it too: the cleaner keeps the tombstones a
snapshot still needs (``oldest_snapshot_end``).

``<partition dir>/checkpoints/<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``: the seed
document's place, a sub-directory, so a snapshot never looks like a segment to the log's own
open, recovery or verify. In-progress files end in ``.checkpoint.part``, deleted ones are renamed
to ``.checkpoint.deleted`` first, as Kafka's ``Snapshots`` does.

A name is not a file: anyone who can write to ``checkpoints/`` can put a symlink (to
``/etc/passwd``), a FIFO (a reader blocks forever) or a directory there under a snapshot's name.
Only regular files count as snapshots, and every read goes through :func:`open_regular`, which
follows no symlink and never blocks.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from cleanerd.storage._checkpoints import fsync_dir
from cleanerd.storage._regular import file_kind

SNAPSHOT_DIR = "checkpoints"
SNAPSHOT_FILE_SUFFIX = ".checkpoint"
SNAPSHOT_PART_SUFFIX = ".checkpoint.part"
SNAPSHOT_DELETED_SUFFIX = ".checkpoint.deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, order=True, slots=True)
class SnapshotId:
    """A snapshot's id: it holds the state of every record below ``end_offset``.

    ``epoch`` is the leader epoch of the last record below the end offset. Ordered by end offset
    first, so the newest snapshot sorts last.
    """

    end_offset: int
    epoch: int

    def file_name(self, suffix: str = SNAPSHOT_FILE_SUFFIX) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{suffix}"


def snapshot_dir(partition_dir: Path) -> Path:
    return Path(partition_dir) / SNAPSHOT_DIR


def snapshot_path(partition_dir: Path, sid: SnapshotId, suffix: str = SNAPSHOT_FILE_SUFFIX) -> Path:
    return snapshot_dir(partition_dir) / sid.file_name(suffix)


def parse_name(name: str) -> SnapshotId | None:
    """The id a finished snapshot's file name gives, or None for any other name."""
    m = _NAME.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True, slots=True)
class SnapshotDir:
    """What ``checkpoints/`` holds under snapshot names: the regular files (the snapshots,
    oldest first) and the other entries, which are never opened (path, what it is)."""

    snapshots: list[tuple[SnapshotId, Path]]
    impostors: list[tuple[Path, str]]


def scan_snapshot_dir(partition_dir: Path) -> SnapshotDir:
    """``checkpoints/`` read without following links: a ``checkpoints`` that is itself a
    symlink holds no snapshot (it is reported as an impostor)."""
    directory = snapshot_dir(partition_dir)
    try:
        mode = os.lstat(directory).st_mode
    except FileNotFoundError:
        return SnapshotDir([], [])
    if not stat.S_ISDIR(mode):
        return SnapshotDir([], [(directory, file_kind(mode))])
    found: list[tuple[SnapshotId, Path]] = []
    impostors: list[tuple[Path, str]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            sid = parse_name(entry.name)
            if sid is None:
                continue
            path = directory / entry.name
            try:
                regular = entry.is_file(follow_symlinks=False)
                kind = "" if regular else file_kind(entry.stat(follow_symlinks=False).st_mode)
            except FileNotFoundError:
                continue  # deleted meanwhile
            if regular:
                found.append((sid, path))
            else:
                impostors.append((path, kind))
    return SnapshotDir(sorted(found), sorted(impostors))


def list_snapshots(partition_dir: Path) -> list[tuple[SnapshotId, Path]]:
    """Finished snapshots, oldest first: regular files named ``<id>.checkpoint`` (``.part`` and
    ``.deleted`` files, symlinks, FIFOs and the like are not snapshots)."""
    return scan_snapshot_dir(partition_dir).snapshots


def snapshot_leftovers(partition_dir: Path) -> list[tuple[SnapshotId | None, Path]]:
    """The ``.part`` and ``.deleted`` files of ``checkpoints/`` (whatever kind of file), each
    with the id its name gives (None for a name that gives none), sorted by name."""
    directory = snapshot_dir(partition_dir)
    if not os.path.isdir(directory) or os.path.islink(directory):
        return []
    with os.scandir(directory) as entries:
        names = sorted(
            e.name
            for e in entries
            if e.name.endswith((SNAPSHOT_PART_SUFFIX, SNAPSHOT_DELETED_SUFFIX))
        )
    found: list[tuple[SnapshotId | None, Path]] = []
    for name in names:
        part = name.endswith(SNAPSHOT_PART_SUFFIX)
        stem = name.removesuffix(SNAPSHOT_PART_SUFFIX if part else SNAPSHOT_DELETED_SUFFIX)
        found.append((parse_name(stem + SNAPSHOT_FILE_SUFFIX), directory / name))
    return found


def remove_leftovers(partition_dir: Path) -> list[Path]:
    """Delete ``.part`` files (a write cut short) and ``.deleted`` files (a delete cut short)."""
    directory = snapshot_dir(partition_dir)
    if not os.path.isdir(directory) or os.path.islink(directory):
        return []
    gone = []
    with os.scandir(directory) as entries:
        doomed = [
            e.name
            for e in entries
            if e.name.endswith((SNAPSHOT_PART_SUFFIX, SNAPSHOT_DELETED_SUFFIX))
            and not e.is_dir(follow_symlinks=False)
        ]
    for name in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / name)  # a symlink goes, never what it points at
        gone.append(directory / name)
    if gone:
        fsync_dir(directory)
    return gone


def delete_snapshot(path: Path) -> None:
    """Rename to ``.deleted`` (durable), then unlink: a crash between leaves no half snapshot."""
    path = Path(path)
    doomed = path.with_name(path.name.removesuffix(SNAPSHOT_FILE_SUFFIX) + SNAPSHOT_DELETED_SUFFIX)
    os.replace(path, doomed)
    fsync_dir(path.parent)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(doomed)


def oldest_snapshot_end(partition_dir: Path) -> int | None:
    """End offset of the oldest snapshot file kept (None: no snapshot). A tombstone at or
    past it must stay: a reader starting from that snapshot would otherwise bring its key back."""
    found = list_snapshots(partition_dir)
    return found[0][0].end_offset if found else None
