"""What a failed cleaning leaves: nothing, or exactly what it says.

Opening a partition repairs what Kafka's recovery repairs (a missing or corrupt index, a
``.txnindex`` that disagrees with the markers), and the cleaner checks the ``.txnindex`` files
before its passes. When the cleaning then fails before any segment was swapped, those repairs
are undone, so the partition dir is byte-identical to what the user had: index files are read
into memory first (they are small beside the logs: about 0.5% of them at Kafka's index
interval; one past ``COPY_MAX_BYTES`` is not copied, and keeps its repair), and written back
(to a temporary name, then renamed) if no ``.log`` file changed.
After a swap the partition did change (groups swapped before a failure stay swapped, as in
Kafka); the message then names the files.

Every driver of a cleaning uses it the same way: ``cleanerd compact`` and Spark's plans A and B
(``Repairs(dir)`` before the partition is opened, ``undo()`` after a failure, the log closed).

Writers may append meanwhile (the writer contract: the cleaner holds the writer lock only for
a swap). Their files are the active segment's at the snapshot and those of any later segment:
a change there (an append, a roll) blocks only the undo of that tail, never of the older
segments, whose ``.log`` files no writer touches. A roll of the cleaning's own
(``compact --roll-active``) is not a writer's: the one-shot driver takes it back when the run
fails (``PartitionLog.unroll``, while no writer has used the new segment), before this undo,
so the closed segment's indexes go back too. The undo itself runs under the partition's
writer lock, so no append lands between its check and its writes.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from cleanerd.storage._checkpoints import atomic_write
from cleanerd.storage._errors import StorageError
from cleanerd.storage._files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_base_offset,
)
from cleanerd.storage._regular import read_regular
from cleanerd.storage._writer_lock import PartitionWriterLock

__all__ = ["Fingerprint", "Repairs", "changed_files", "describe", "fingerprint"]

Fingerprint = dict[str, tuple[int, int, int]]
_INDEXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

COPY_MAX_BYTES = 64 << 20
"""The longest index file kept for an undo; Kafka's indexes of a 1 GiB segment at its default
``index.interval.bytes`` are about 2 and 3 MiB."""


def fingerprint(directory: Path) -> Fingerprint:
    """Each file's (inode, size, mtime): a rename, write or deletion changes it."""
    out: Fingerprint = {}
    with contextlib.suppress(OSError):
        for p in directory.iterdir():
            with contextlib.suppress(OSError):  # removed since the listing
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


def _is_log(name: str) -> bool:
    return name.endswith(LOG_SUFFIX) or ".log." in name


class Repairs:
    """The partition dir before a cleaning: file stats, and the index files' bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.before = fingerprint(self.directory)
        self.indexes: dict[str, bytes] = {}
        for name, (_, size, _) in self.before.items():
            # a longer file (a sparse one of gigabytes, say) is not copied: if a repair
            # replaces it, the undo leaves the repaired one and says the partition changed
            if name.endswith(_INDEXES) and size <= COPY_MAX_BYTES:
                with contextlib.suppress(OSError):
                    data = read_regular(self.directory / name, COPY_MAX_BYTES)
                    if len(data) <= COPY_MAX_BYTES:  # it grew past the bound since its stat
                        self.indexes[name] = data
        logs = (n for n in self.before if n.endswith(LOG_SUFFIX))
        bases = [b for n in logs if (b := parse_base_offset(n)) is not None]
        self.active = max(bases, default=None)  # writers' from here on

    def undo(self) -> str:
        """Put the index files back where no ``.log`` changed; what the dir holds now, in words."""
        try:
            lock = PartitionWriterLock(self.directory)
            lock.acquire()
        except (StorageError, OSError):  # the dir is gone or unreadable: nothing to put back
            return describe(changed_files(self.directory, self.before))
        try:
            return self._undo()
        finally:
            lock.release()

    def _undo(self) -> str:
        changed = changed_files(self.directory, self.before)
        tail = [n for n in changed if self._in_tail(n)]
        older = [n for n in changed if not self._in_tail(n)]
        if any(_is_log(n) for n in older):
            return describe(changed)  # a swap: the partition did change
        # a tail appended to or rolled is the writers' now: only the older files go back
        for name in older if any(_is_log(n) for n in tail) else changed:
            self._restore(name)
        now = changed_files(self.directory, self.before)
        return describe([n for n in now if not self._same(n)])

    def _in_tail(self, name: str) -> bool:
        base = parse_base_offset(name)
        return base is not None and self.active is not None and base >= self.active

    def _same(self, name: str) -> bool:
        """A restored index holds its old bytes (under a new inode). The kept copy's length
        bounds the read: a file grown past it since differs whatever it holds."""
        kept = self.indexes.get(name)
        if kept is None:
            return False
        try:
            return read_regular(self.directory / name, len(kept)) == kept
        except OSError:
            return False

    def _restore(self, name: str) -> None:
        path = self.directory / name
        with contextlib.suppress(OSError, StorageError):
            if name not in self.indexes:
                if name not in self.before and name.endswith((*_INDEXES, ".tmp")):
                    path.unlink(missing_ok=True)  # made by a repair
                return
            atomic_write(path, self.indexes[name])
            mtime = self.before[name][2]
            os.utime(path, ns=(mtime, mtime))
