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

import os
import struct
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import BinaryIO, cast

from cleanerd.format import INT_MAX, checksum
from cleanerd.storage._errors import StorageError
from cleanerd.storage._regular import open_regular

VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, CRC, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
CRC_START = 6  # the CRC covers the entry count and the entries
ENTRY_SIZE = _ENTRY.size  # 46
_BLOCK_ENTRIES = 1 << 12  # entries a read takes (184 KiB): what ``read_snapshot`` holds at once


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


def read_snapshot(path: Path | str) -> Iterator[SnapshotEntry]:
    """The entries of the snapshot file at ``path``; CorruptSnapshotError names the file and the
    byte where it goes wrong.

    The whole file is checked before the first entry comes out: version, count, its length
    against the count (before any CRC, so a file of a hostile length is refused without being
    read), then the CRC, streamed. Memory stays at one block of entries whatever the file's
    size; Kafka's ``ProducerStateManager.readSnapshot`` reads the file whole.
    """
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(_HEADER.size)
        count, stored = _checked_header(head, size, path)
        _crc_holds(f, head, stored, size, path)
        f.seek(_HEADER.size)
        while count > 0:
            take = min(count, _BLOCK_ENTRIES)
            block = f.read(take * ENTRY_SIZE)
            if len(block) != take * ENTRY_SIZE:  # the file shrank after it was checked
                raise CorruptSnapshotError(
                    f"{path} at byte {f.tell()}: the file ended early; it changed while it was read"
                )
            for fields in _ENTRY.iter_unpack(block):
                yield SnapshotEntry(*fields)
            count -= take


def _checked_header(head: bytes, size: int, path: Path | str) -> tuple[int, int]:
    """The entry count and stored CRC of a snapshot whose first bytes are ``head`` and whose
    length is ``size``, once the version is known and the length is the count's."""
    if len(head) < _HEADER.size:
        raise CorruptSnapshotError(
            f"{path} at byte {len(head)}: the file ends inside the {_HEADER.size}-byte header "
            "(version, CRC, entry count)"
        )
    version, stored, count = cast(tuple[int, int, int], _HEADER.unpack(head))
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
    if size > expected:
        raise CorruptSnapshotError(
            f"{path} at byte {expected}: {size - expected} bytes after the {count} entries "
            "the header counts"
        )
    return count, stored


def _crc_holds(f: BinaryIO, head: bytes, stored: int, size: int, path: Path | str) -> None:
    """CorruptSnapshotError unless the CRC32C of bytes ``CRC_START..size`` of ``f`` (``head``,
    then the rest read in blocks) is ``stored``."""
    crc = checksum(head[CRC_START:])
    f.seek(_HEADER.size)
    left = size - _HEADER.size
    while left > 0 and (block := f.read(min(left, _BLOCK_ENTRIES * ENTRY_SIZE))):
        crc = checksum(block, initial=crc)
        left -= len(block)
    if crc != stored:
        raise CorruptSnapshotError(
            f"{path} at byte 2: CRC mismatch (stored {stored}, computed {crc} over bytes "
            f"{CRC_START}..{size})"
        )


def encode(entries: list[SnapshotEntry]) -> bytes:
    """A version 1 snapshot holding ``entries``, byte for byte as Kafka writes it."""
    body = struct.pack(">i", len(entries)) + b"".join(_ENTRY.pack(*astuple(e)) for e in entries)
    return struct.pack(">hI", VERSION, checksum(body)) + body
