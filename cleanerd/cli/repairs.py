"""What a failed ``compact`` leaves: nothing, or exactly what it says.

Opening a partition repairs what Kafka's recovery repairs (a missing or corrupt index, a
``.txnindex`` that disagrees with the markers), and the cleaner checks the ``.txnindex`` files
before its passes. When the cleaning then fails before any segment was swapped, those repairs
are undone, so the partition dir is byte-identical to what the user had: index files are read
into memory first (they are small beside the logs), and written back (to a temporary name,
then renamed) if no ``.log`` file changed. After a swap the partition did change (groups swapped
before a failure stay swapped, as in Kafka); the message then names the files.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from cleanerd.storage.checkpoints import atomic_write
from cleanerd.storage.errors import StorageError
from cleanerd.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX

Fingerprint = dict[str, tuple[int, int, int]]
_INDEXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def fingerprint(directory: Path) -> Fingerprint:
    """Each file's (inode, size, mtime): a rename, write or deletion changes it."""
    out: Fingerprint = {}
    with contextlib.suppress(OSError):
        for p in directory.iterdir():
            st = p.stat()
            out[p.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def changed_files(directory: Path, before: Fingerprint) -> list[str]:
    after = fingerprint(directory)
    return sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))


def describe(changed: list[str]) -> str:
    """Said after a failure, and only when true."""
    if not changed:
        return "partition left as it was"
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return f"partition changed before the failure: {shown}"


class Repairs:
    """The partition dir before a compaction: file stats, and the index files' bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.before = fingerprint(directory)
        self.indexes: dict[str, bytes] = {}
        for name in self.before:
            if name.endswith(_INDEXES):
                with contextlib.suppress(OSError):
                    self.indexes[name] = (directory / name).read_bytes()

    def undo(self) -> str:
        """Put the index files back when no ``.log`` changed; what the dir holds now, in words."""
        changed = changed_files(self.directory, self.before)
        if changed and not any(n.endswith(LOG_SUFFIX) or ".log." in n for n in changed):
            for name in changed:
                self._restore(name)
            changed = [n for n in changed_files(self.directory, self.before) if not self._same(n)]
        return describe(changed)

    def _same(self, name: str) -> bool:
        """A restored index holds its old bytes (under a new inode)."""
        try:
            return (self.directory / name).read_bytes() == self.indexes[name]
        except (KeyError, OSError):
            return False

    def _restore(self, name: str) -> None:
        path = self.directory / name
        with contextlib.suppress(OSError, StorageError):
            if name not in self.indexes:
                if name.endswith((*_INDEXES, ".tmp")):
                    path.unlink(missing_ok=True)  # made by a repair
                return
            atomic_write(path, self.indexes[name])
            mtime = self.before[name][2]
            os.utime(path, ns=(mtime, mtime))
