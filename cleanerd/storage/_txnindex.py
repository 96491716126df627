"""Kafka's ``.txnindex``: a 34-byte entry per aborted transaction whose marker is in the segment.

Readers use it to hide aborted data; the cleaner re-appends the entries it keeps to the cleaned
segment. Unlike the offset and time indexes there is no preallocation in Kafka either: the file is
created on the first append and is usually absent. Files are small, so entries are read once into a
list on first use (not in the constructor, so opening never fails on bad content; sanity_check and
the readers report it instead).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from cleanerd.format import LONG_MAX, LONG_MIN
from cleanerd.storage._checkpoints import atomic_write
from cleanerd.storage._errors import CorruptIndexError
from cleanerd.storage._regular import open_regular, read_regular, truncate_regular

CURRENT_VERSION = 0
TXN_ENTRY_SIZE = 34
_ENTRY = struct.Struct(">hqqqq")
_FIELDS = struct.Struct(">qqqq")


@dataclass(frozen=True)
class AbortedTxn:
    """An aborted transaction: its producer, first data offset, marker offset and LSO then."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def __post_init__(self) -> None:
        for name in ("producer_id", "first_offset", "last_offset", "last_stable_offset"):
            value = getattr(self, name)
            if not LONG_MIN <= value <= LONG_MAX:
                raise ValueError(f"AbortedTxn.{name} = {value} does not fit an int64")

    def to_bytes(self) -> bytes:
        """The 34-byte entry: int16 version 0, then the four int64 fields, big-endian."""
        return _ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Decode one entry. Like Kafka, the version is the single byte at position 0."""
        if len(data) != TXN_ENTRY_SIZE:
            raise ValueError(f"an AbortedTxn entry is {TXN_ENTRY_SIZE} bytes, got {len(data)}")
        version = data[0]
        if version != CURRENT_VERSION:
            raise ValueError(
                f"unsupported AbortedTxn version {version} (only {CURRENT_VERSION} exists)"
            )
        return cls(*_FIELDS.unpack_from(data, 2))


TXN_INDEX_MIN_BOUND = 64 << 20
"""A segment's ``.txnindex`` is loaded up to the larger of this and its ``.log``'s size. An
entry (34 bytes) stands for an aborted transaction whose records were in the segment's range;
a cleaning may remove those records and keep the entry, so the log alone does not bound it,
but 64 MiB is two million aborted transactions."""


class TransactionIndex:
    """The aborted-transaction index of one segment; entries kept in ``last_offset`` order."""

    def __init__(
        self, path: Path, base_offset: int, max_bytes: Callable[[], int] | None = None
    ) -> None:
        """``max_bytes``: the longest file loaded, asked when it is loaded (longer is corrupt,
        and never read whole)."""
        if base_offset < 0:
            raise ValueError(f"negative base offset {base_offset}")
        self._path = Path(path)
        self._base = base_offset
        self._max_bytes = max_bytes
        self._txns: list[AbortedTxn] | None = None  # loaded on first use
        self._tail = 0  # bytes of a trailing partial entry (a corrupt file)
        self._fd: int | None = None
        self._ino = -1  # inode of the file ``_fd`` is open on

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base

    @property
    def exists(self) -> bool:
        """Whether the file is on disk (it is only created by the first append)."""
        return self._path.exists()

    def _corrupt(self, reason: str) -> CorruptIndexError:
        return CorruptIndexError(f"corrupt transaction index {self._path}: {reason}")

    def _entries(self) -> list[AbortedTxn]:
        if self._txns is None:
            bound = None if self._max_bytes is None else self._max_bytes()
            try:
                data = read_regular(self._path, max_bytes=bound)
            except FileNotFoundError:
                data = b""
            if bound is not None and len(data) > bound:
                raise self._corrupt(
                    f"longer than {bound} bytes, more than its segment's aborted transactions "
                    "can take"
                )
            count, self._tail = divmod(len(data), TXN_ENTRY_SIZE)
            txns = []
            for i in range(count):
                chunk = data[i * TXN_ENTRY_SIZE : (i + 1) * TXN_ENTRY_SIZE]
                try:
                    txns.append(AbortedTxn.from_bytes(chunk))
                except ValueError as exc:
                    raise self._corrupt(f"entry {i}: {exc}") from exc
            self._txns = txns
        return self._txns

    def all_aborted(self) -> list[AbortedTxn]:
        return list(self._entries())

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; ``last_offset`` must rise strictly, as Kafka requires."""
        self._follow_rewrite()
        txns = self._entries()
        if self._tail:
            raise self._corrupt(f"trailing partial entry of {self._tail} bytes; cannot append")
        if txns and txn.last_offset <= txns[-1].last_offset:
            raise ValueError(
                f"last offset {txn.last_offset} does not exceed the previous entry's "
                f"{txns[-1].last_offset} in {self._path}"
            )
        if txn.last_offset < self._base:
            raise ValueError(
                f"last offset {txn.last_offset} is below base offset {self._base} of {self._path}"
            )
        if self._fd is None:
            self._fd = open_regular(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            self._ino = os.fstat(self._fd).st_ino
        data = txn.to_bytes()
        done = 0
        while done < len(data):
            done += os.write(self._fd, data[done:])
        txns.append(txn)

    def _follow_rewrite(self) -> None:
        """Drop what we hold of a file another process rewrote (``rewrite`` renames a new file
        in), so appends go to the file readers see."""
        if self._fd is None:
            return
        try:
            current = os.stat(self._path).st_ino
        except FileNotFoundError:
            current = -1
        if current != self._ino:
            self.close()
            self._txns = None
            self._tail = 0

    def rewrite(self, txns: Sequence[AbortedTxn]) -> None:
        """Replace the whole index with ``txns`` (no file when there are none, as Kafka leaves
        it): ``atomic_write``, as checkpoints are written, so readers see old or new."""
        order = [t.last_offset for t in txns]
        if order != sorted(set(order)) or (order and order[0] < self._base):
            raise ValueError(f"entries for {self._path} must have rising last offsets >= base")
        self.close()
        if not txns:
            self._path.unlink(missing_ok=True)
        else:
            atomic_write(self._path, b"".join(t.to_bytes() for t in txns))
        self._txns = list(txns)
        self._tail = 0

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted txns overlapping [fetch_offset, upper_bound), and whether the search is complete.

        Complete means an entry's LSO reached ``upper_bound``: no later segment can hold an
        aborted transaction that started below it, so the caller stops walking segments.
        """
        found = []
        for txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        """Length a multiple of 34, version 0, and every marker at or above the base offset."""
        txns = self._entries()
        if self._tail:
            length = len(txns) * TXN_ENTRY_SIZE + self._tail
            raise self._corrupt(f"length {length} is not a multiple of {TXN_ENTRY_SIZE}")
        for i, txn in enumerate(txns):
            if txn.last_offset < self._base:
                raise self._corrupt(
                    f"entry {i}: last offset {txn.last_offset} is below base offset {self._base}"
                )

    def truncate_to(self, offset: int) -> None:
        """Drop the entries from the first one whose marker is at or after ``offset``."""
        txns = self._entries()
        keep = next((i for i, t in enumerate(txns) if t.last_offset >= offset), len(txns))
        del txns[keep:]
        self._tail = 0
        truncate_regular(self._path, keep * TXN_ENTRY_SIZE)

    def flush(self) -> None:
        """fsync the file if it exists; an index never appended to stays absent."""
        if self._fd is not None:
            os.fsync(self._fd)
        elif self._path.exists():
            fd = open_regular(self._path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._ino = -1

    def delete(self) -> bool:
        """Forget all entries and remove the file; True if a file was removed."""
        self.close()
        self._txns = []
        self._tail = 0
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: Path) -> None:
        """Atomically rename the file if it exists; later appends go to the new name."""
        path = Path(path)
        if self._path.exists():
            os.replace(self._path, path)
        self._path = path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, base={self._base})"
