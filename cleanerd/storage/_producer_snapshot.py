"""Kafka's producer-state snapshot files, ``<offset>.snapshot`` (docs/kafka-format.md §3.8).

A broker writes one per segment roll (``ProducerStateManager.writeSnapshot``): the producers it
knew up to that offset, so a restart need not replay the whole log. Version 1 layout, big
endian: int16 version, uint32 CRC32C of every byte after the CRC, int32 entry count, then
46-byte entries (producer id, epoch, last sequence, last offset, offset delta, timestamp,
coordinator epoch, first offset of the open transaction or -1).

cleanerd reads them only to show them (``dump``); it rebuilds producer state from the batch
headers instead (``producer_state``). ``encode`` exists so a snapshot can be written exactly
as a broker would, for tests and tools.
"""

from __future__ import annotations

import struct
from dataclasses import astuple, dataclass
from pathlib import Path

from cleanerd.format import INT_MAX, checksum
from cleanerd.storage._errors import StorageError
from cleanerd.storage._regular import read_regular

VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, CRC, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
CRC_START = 6  # the CRC covers the entry count and the entries
ENTRY_SIZE = _ENTRY.size  # 46


class CorruptSnapshotError(StorageError):
    """A producer snapshot that does not decode; the message names the file and byte."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer as the snapshot keeps it (field order is the file's)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int  # last offset of its last data batch; -1: no batch kept
    offset_delta: int  # last offset - first offset of that batch
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction

    @property
    def first_sequence(self) -> int:
        """The batch's first sequence, wrapping below 0 as Kafka's ``decrementSequence``."""
        if self.last_sequence < self.offset_delta:
            return INT_MAX - (self.offset_delta - self.last_sequence) + 1
        return self.last_sequence - self.offset_delta


def decode(data: bytes, path: Path | str) -> list[SnapshotEntry]:
    """The entries of a snapshot file's bytes; CorruptSnapshotError names ``path`` and the byte
    where it goes wrong (Kafka checks version, then CRC, then reads the entries)."""
    size = len(data)
    if size < _HEADER.size:
        raise CorruptSnapshotError(
            f"{path} at byte {size}: the file ends inside the {_HEADER.size}-byte header "
            "(version, CRC, entry count)"
        )
    version, stored, count = _HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(
            f"{path} at byte 0: unknown producer snapshot version {version} (Kafka writes "
            f"{VERSION})"
        )
    if count < 0:
        raise CorruptSnapshotError(f"{path} at byte {CRC_START}: negative entry count {count}")
    expected = _HEADER.size + count * ENTRY_SIZE
    if size < expected:
        whole = (size - _HEADER.size) // ENTRY_SIZE
        raise CorruptSnapshotError(
            f"{path} at byte {_HEADER.size + whole * ENTRY_SIZE}: the file ends inside entry "
            f"{whole} of {count} ({size} bytes, {expected} expected)"
        )
    computed = checksum(data[CRC_START:])
    if computed != stored:
        raise CorruptSnapshotError(
            f"{path} at byte 2: CRC mismatch (stored {stored}, computed {computed} over bytes "
            f"{CRC_START}..{size})"
        )
    if size > expected:
        raise CorruptSnapshotError(
            f"{path} at byte {expected}: {size - expected} bytes after the {count} entries "
            "the header counts"
        )
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, _HEADER.size + i * ENTRY_SIZE))
        for i in range(count)
    ]


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    """The entries of the snapshot file at ``path`` (CorruptSnapshotError if it is bad)."""
    return decode(read_regular(path), path)


def encode(entries: list[SnapshotEntry]) -> bytes:
    """A version 1 snapshot holding ``entries``, byte for byte as Kafka writes it."""
    body = struct.pack(">i", len(entries)) + b"".join(_ENTRY.pack(*astuple(e)) for e in entries)
    return struct.pack(">hI", VERSION, checksum(body)) + body
