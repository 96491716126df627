"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

Both files are flat arrays of fixed-size big-endian entries with no header. When Kafka opens an
existing index it trusts **every whole slot up to the file length** (it preallocates the files of
its active segment and trims them on roll). cleanerd therefore never preallocates: entries are only
ever appended, so the file is always exactly ``entries x entry size`` bytes and a crash can never
leave zero-filled slots that Kafka would read as real entries.

Entries live in growable numpy arrays (absolute offsets, not relative), so lookups are one
``np.searchsorted``. Appends are buffered in whole entries and written through an ``O_APPEND``
handle; ``flush()`` writes them out, fsyncs, and creates the file when it has no entries yet (a
Kafka segment is expected to have both index files, even empty ones).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt

from cleanerd.format import INT_MAX, LONG_MAX, LONG_MIN
from cleanerd.storage._errors import CorruptIndexError, OffsetOutOfRangeError
from cleanerd.storage._regular import open_regular, read_regular, truncate_regular

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes

_MIN_CAPACITY = 64
_PENDING_LIMIT = 64 * 1024  # bytes of buffered entries before they are written out
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")

Int64Array = npt.NDArray[np.int64]


def _clamp(value: int) -> int:
    """Keep search targets inside int64 so numpy never overflows on a huge Python int."""
    return min(max(value, LONG_MIN), LONG_MAX)


class _EntryFile:
    """File and array machinery shared by both indexes: load, append, truncate, rename, delete.

    Each entry is a pair of int64 columns: ``_keys`` is what lookups search (offset or timestamp),
    ``_vals`` the other field. Subclasses define the on-disk layout and the checks.
    """

    ENTRY_SIZE: ClassVar[int]
    _STRUCT: ClassVar[struct.Struct]
    _DTYPE: ClassVar[np.dtype[Any]]
    _FIELDS: ClassVar[tuple[str, str]]  # (key, value) field names; "rel" is the offset

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int = DEFAULT_MAX_INDEX_SIZE
    ) -> None:
        if max_index_size < self.ENTRY_SIZE:
            raise ValueError(f"max index size {max_index_size} is smaller than one entry")
        if base_offset < 0:
            raise ValueError(f"negative base offset {base_offset}")
        self._path = Path(path)
        self._base = base_offset
        self._max_entries = max_index_size // self.ENTRY_SIZE
        self._pending = bytearray()
        self._fd: int | None = None
        try:
            data = read_regular(self._path, max_bytes=max_index_size)
        except FileNotFoundError:
            data = b""
        # Kafka never writes an index longer than segment.index.bytes (it preallocates to that
        # and trims): a longer file is not loaded, and its sanity check fails
        self._too_long = len(data) > max_index_size
        if self._too_long:
            data = b""
        n = len(data) // self.ENTRY_SIZE
        self._n = n
        self._tail = len(data) - n * self.ENTRY_SIZE  # bytes of a partial slot (corrupt file)
        capacity = max(n, _MIN_CAPACITY)
        self._keys: Int64Array = np.empty(capacity, dtype=np.int64)
        self._vals: Int64Array = np.empty(capacity, dtype=np.int64)
        rec = np.frombuffer(data, dtype=self._DTYPE, count=n)
        for column, field in zip((self._keys, self._vals), self._FIELDS, strict=True):
            column[:n] = rec[field]
            if field == "rel":  # relative offsets on disk, absolute in memory
                column[:n] += self._base

    def _offsets(self) -> Int64Array:
        """The absolute-offset column of the current entries (what truncate_to searches)."""
        return (self._keys if self._FIELDS[0] == "rel" else self._vals)[: self._n]

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base

    @property
    def entries(self) -> int:
        return self._n

    @property
    def too_long(self) -> bool:
        """The file is longer than the index may be, and was not loaded (its check fails)."""
        return self._too_long

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def size_bytes(self) -> int:
        """Length the file has once flushed (Kafka's sizeInBytes of a trimmed index)."""
        return self._n * self.ENTRY_SIZE

    @classmethod
    def decode_entry(cls, raw: bytes, base_offset: int) -> tuple[int, int]:
        """One entry's ``ENTRY_SIZE`` bytes as ``entry`` gives it (the offset made absolute),
        for readers that stream a file instead of loading it."""
        key, val = cls._STRUCT.unpack(raw)
        if cls._FIELDS[0] == "rel":
            return key + base_offset, val
        return key, val + base_offset

    def entry(self, i: int) -> tuple[int, int]:
        """Entry ``i`` as stored, with the relative offset made absolute."""
        if not 0 <= i < self._n:
            raise IndexError(f"entry {i} out of range for {self._path} ({self._n} entries)")
        return self._at(i, (0, 0))

    def _at(self, slot: int, empty: tuple[int, int]) -> tuple[int, int]:
        """Entry at ``slot`` as Python ints, or ``empty`` when slot is -1 (nothing there)."""
        return empty if slot < 0 else (int(self._keys[slot]), int(self._vals[slot]))

    def _relative(self, offset: int) -> int:
        """Both indexes store 32-bit offsets relative to the segment base."""
        rel = offset - self._base
        if not 0 <= rel <= INT_MAX:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the 32-bit relative range of {self._path} "
                f"(base offset {self._base})"
            )
        return rel

    def _floor_slot(self, target: int) -> int:
        """Slot of the largest key <= target, or -1."""
        return int(np.searchsorted(self._keys[: self._n], _clamp(target), side="right")) - 1

    def _add(self, key: int, val: int, raw: bytes) -> None:
        self._check_length()  # never append after a partial slot
        if self._n == len(self._keys):
            self._keys = np.concatenate([self._keys, np.empty_like(self._keys)])
            self._vals = np.concatenate([self._vals, np.empty_like(self._vals)])
        self._keys[self._n] = key
        self._vals[self._n] = val
        self._n += 1
        self._pending += raw
        if len(self._pending) >= _PENDING_LIMIT:
            self._drain()

    def _corrupt(self, reason: str) -> CorruptIndexError:
        return CorruptIndexError(f"corrupt index {self._path}: {reason}")

    def _check_length(self) -> None:
        if self._too_long:
            raise self._corrupt(
                f"longer than segment.index.bytes ({self._max_entries * self.ENTRY_SIZE} bytes "
                f"of {self.ENTRY_SIZE}-byte entries), which no index written under it is"
            )
        if self._tail:
            length = self._n * self.ENTRY_SIZE + self._tail
            raise self._corrupt(f"length {length} is not a multiple of {self.ENTRY_SIZE}")

    def _check_rising(self, column: Int64Array, what: str, *, strict: bool) -> None:
        """Raise at the first entry that is lower than (or, if strict, equal to) the one before."""
        steps = np.diff(column[: self._n])
        bad = np.flatnonzero(steps <= 0 if strict else steps < 0)
        if len(bad):
            i = int(bad[0]) + 1
            verb = "does not exceed" if strict else "is below"
            raise self._corrupt(
                f"entry {i} {what} {int(column[i])} {verb} entry {i - 1} {what} "
                f"{int(column[i - 1])}"
            )

    def _open(self) -> int:
        if self._fd is None:
            self._fd = open_regular(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return self._fd

    def _drain(self) -> None:
        """Write buffered entries; always whole entries, so the file stays a whole number."""
        if not self._pending:
            return
        fd = self._open()
        data = bytes(self._pending)
        self._pending.clear()
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])

    def flush(self) -> None:
        """Write buffered entries and fsync; creates the (possibly empty) file."""
        self._drain()
        os.fsync(self._open())

    def close(self) -> None:
        """Write buffered entries and release the handle; the object may be used again."""
        self._drain()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> bool:
        """Drop all entries and remove the file; True if a file was removed."""
        self._pending.clear()
        self.close()
        self._n = 0
        self._tail = 0
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: Path) -> None:
        """Atomically rename the file (swap protocol); later appends go to the new name."""
        self._drain()
        path = Path(path)
        if self._path.exists():
            os.replace(self._path, path)  # an open handle follows the inode
        self._path = path

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset`` and cut the file to match."""
        self._drain()
        self._n = int(np.searchsorted(self._offsets(), _clamp(offset), side="left"))
        self._tail = 0
        truncate_regular(self._path, self._n * self.ENTRY_SIZE)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._path)!r}, base={self._base}, entries={self._n})"


class OffsetIndex(_EntryFile):
    """``.index``: 8-byte entries (int32 relative offset, int32 position in the ``.log``)."""

    ENTRY_SIZE = 8
    _STRUCT = _OFFSET_ENTRY
    _DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    _FIELDS = ("rel", "pos")

    def is_full(self) -> bool:
        return self._n >= self._max_entries

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (Kafka's lastOffset)."""
        return self._at(self._n - 1, (self._base, 0))[0]

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets strictly rise and positions never fall."""
        if self.is_full():
            raise ValueError(f"{self._path} is full ({self._n} entries)")
        rel = self._relative(offset)
        if not 0 <= position <= INT_MAX:
            raise ValueError(f"position {position} does not fit an int32 in {self._path}")
        last_offset, last_position = self._at(self._n - 1, (self._base - 1, 0))
        if offset <= last_offset or position < last_position:
            raise ValueError(
                f"entry ({offset}, {position}) does not follow the last entry "
                f"({last_offset}, {last_position}) of {self._path}: offsets must rise, "
                "positions must not fall"
            )
        self._add(offset, position, _OFFSET_ENTRY.pack(rel, position))

    def lookup(self, target: int) -> tuple[int, int]:
        """(offset, position) of the largest entry offset <= target, else (base, 0)."""
        return self._at(self._floor_slot(target), (self._base, 0))

    def sanity_check(self) -> None:
        """Kafka's checks plus two that catch garbage a Kafka-written file can never contain."""
        self._check_length()
        if self._n and self.last_offset < self._base:
            raise self._corrupt(f"last offset {self.last_offset} is below base {self._base}")
        self._check_rising(self._keys, "offset", strict=True)
        if self._n and self._vals[0] < 0:
            raise self._corrupt(f"entry 0 has negative position {int(self._vals[0])}")
        self._check_rising(self._vals, "position", strict=False)


class TimeIndex(_EntryFile):
    """``.timeindex``: 12-byte entries (int64 max timestamp so far, int32 relative offset)."""

    ENTRY_SIZE = 12
    _STRUCT = _TIME_ENTRY
    _DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    _FIELDS = ("ts", "rel")

    def is_full(self) -> bool:
        """Full one slot early: the last slot is kept for the entry written on roll."""
        return self._n >= self._max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base) when empty."""
        return self._at(self._n - 1, (-1, self._base))

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append only if ``timestamp`` beats the last entry's; True if an entry was written.

        ``skip_full_check`` lets the final entry of a rolled segment into the reserved last slot.
        """
        if not skip_full_check and self.is_full():
            raise ValueError(f"{self._path} is full ({self._n} entries)")
        if self._n >= self._max_entries:
            raise ValueError(f"{self._path} has no slot left ({self._n} entries)")
        rel = self._relative(offset)
        last_ts, last_offset = self.last_entry
        if offset < last_offset:  # when empty, last_offset is the base: _relative checked it
            raise ValueError(
                f"offset {offset} is below the last entry's offset {last_offset} in {self._path}"
            )
        if timestamp > LONG_MAX:
            raise ValueError(f"timestamp {timestamp} does not fit an int64")
        if timestamp <= last_ts:
            return False
        self._add(timestamp, offset, _TIME_ENTRY.pack(timestamp, rel))
        return True

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest timestamp <= target, else (-1, base)."""
        return self._at(self._floor_slot(target_ts), (-1, self._base))

    def sanity_check(self) -> None:
        """Kafka's checks plus non-decreasing timestamps and offsets across all entries."""
        self._check_length()
        if self._n:
            first_ts = int(self._keys[0])
            last_ts, last_offset = self.last_entry
            if last_ts < first_ts:
                raise self._corrupt(f"last timestamp {last_ts} is below first {first_ts}")
            if last_offset < self._base:
                raise self._corrupt(f"last offset {last_offset} is below base {self._base}")
        self._check_rising(self._keys, "timestamp", strict=False)
        self._check_rising(self._vals, "offset", strict=False)
