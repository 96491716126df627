"""Producer-state ``.snapshot`` files read with bounded memory, whatever length they claim.

Files are built with ``struct`` and the ``crc32c`` library from the documented layout
(docs/kafka-format.md §3.8), not with cleanerd's encoder.
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import crc32c
import pytest

from cleanerd.storage._producer_snapshot import (
    ENTRY_SIZE,
    CorruptSnapshotError,
    SnapshotEntry,
    read_snapshot,
)


def _snapshot(path: Path, count: int, body: bytes) -> None:
    tail = struct.pack(">i", count) + body
    path.write_bytes(struct.pack(">hI", 1, crc32c.crc32c(tail)) + tail)


def _peak(path: Path) -> tuple[list[SnapshotEntry] | CorruptSnapshotError, int]:
    """What reading ``path`` gives (its entries or its error) and the traced peak it took."""
    tracemalloc.start()
    try:
        try:
            got: list[SnapshotEntry] | CorruptSnapshotError = list(read_snapshot(path))
        except CorruptSnapshotError as e:
            got = e
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_sparse_file_past_its_count_is_refused_without_being_read(tmp_path: Path) -> None:
    """A 4 GiB sparse file whose header counts one entry: the length is checked against the
    count before any CRC, so nothing past the header is read."""
    path = tmp_path / "00000000000000000000.snapshot"
    _snapshot(path, 1, bytes(ENTRY_SIZE))
    with open(path, "r+b") as f:
        f.truncate(4 << 30)
    got, peak = _peak(path)
    assert isinstance(got, CorruptSnapshotError)
    assert f"{path} at byte {10 + ENTRY_SIZE}: {(4 << 30) - 10 - ENTRY_SIZE} bytes after" in str(
        got
    )
    assert peak < 1 << 20


@pytest.mark.slow
def test_a_sparse_file_its_count_covers_is_checked_in_blocks(tmp_path: Path) -> None:
    """A 1 GiB file whose header counts every entry it could hold: the CRC is streamed (and
    fails on the zeros) in blocks, never the whole file at once."""
    path = tmp_path / "00000000000000000000.snapshot"
    count = ((1 << 30) - 10) // ENTRY_SIZE
    with open(path, "wb") as f:
        f.write(struct.pack(">hIi", 1, 12345, count))
        f.truncate(10 + count * ENTRY_SIZE)
    got, peak = _peak(path)
    assert isinstance(got, CorruptSnapshotError)
    assert f"{path} at byte 2: CRC mismatch (stored 12345" in str(got)
    assert peak < 1 << 20


def test_many_entries_come_out_in_order_in_bounded_memory(tmp_path: Path) -> None:
    """100,000 producers (4.6 MB): every entry read back as written, with the traced peak a
    fraction of the file (a block of entries, not the file nor a list of them)."""
    path = tmp_path / "00000000000000000000.snapshot"
    count = 100_000
    row = struct.Struct(">qhiqiqiq")
    body = b"".join(row.pack(i, i % 7, i, 10 * i, 3, 1000 + i, 2, -1) for i in range(count))
    _snapshot(path, count, body)
    tracemalloc.start()
    try:
        seen = 0
        for e in read_snapshot(path):
            assert (e.producer_id, e.last_offset, e.timestamp) == (seen, 10 * seen, 1000 + seen)
            seen += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == count
    assert peak < 1 << 20  # the file is 4.6 MB


def test_a_file_that_shrinks_after_its_check_names_the_byte(tmp_path: Path) -> None:
    """A snapshot cut short between its check and its read (a broker's deletion racing a
    ``dump``) ends the entries with an error, not a short list passed off as whole."""
    path = tmp_path / "00000000000000000000.snapshot"
    count = 40_000  # more than one block
    _snapshot(path, count, bytes(count * ENTRY_SIZE))
    entries = read_snapshot(path)
    next(entries)
    with open(path, "r+b") as f:
        f.truncate(10 + 20_000 * ENTRY_SIZE)
    with pytest.raises(CorruptSnapshotError, match=r"at byte \d+: the file ended early"):
        list(entries)
