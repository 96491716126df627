"""Python objects for batches and records (slow path: CLI, tests, checks), over the kernels.

Public names are reached through ``reader``.
"""

from __future__ import annotations

from collections.abc import Iterator

from cleanerd.format import kernels as k
from cleanerd.format._control import ControlType, parse_control_key
from cleanerd.format._header import BatchHeader
from cleanerd.format._indexing import index_batches
from cleanerd.format._records import Header, Record
from cleanerd.format._scan import I64, U8, Buffer, as_uint8, scan_batches
from cleanerd.format._varint import read_varint


def decode_headers(payload: U8 | memoryview, pos: int, count: int) -> tuple[Header, ...]:
    """Record headers at ``pos`` (already validated by the index kernel)."""
    mv = payload if isinstance(payload, memoryview) else payload.data
    out: list[Header] = []
    for _ in range(count):
        klen, pos = read_varint(mv, pos)
        key = bytes(mv[pos : pos + klen]).decode("utf-8", errors="replace")
        pos += klen
        vlen, pos = read_varint(mv, pos)
        if vlen < 0:
            out.append((key, None))
        else:
            out.append((key, bytes(mv[pos : pos + vlen])))
            pos += vlen
    return tuple(out)


def records_from_index(payload: U8, records: I64) -> Iterator[Record]:
    """Python Record objects for rows of a record index (slow path: CLI, tests)."""
    mv = payload if isinstance(payload, memoryview) else payload.data
    for row in records:
        klen = int(row[k.R_KEY_LEN])
        vlen = int(row[k.R_VALUE_LEN])
        kp = int(row[k.R_KEY_POS])
        vp = int(row[k.R_VALUE_POS])
        yield Record(
            offset=int(row[k.R_OFFSET]),
            timestamp=int(row[k.R_TIMESTAMP]),
            key=None if klen < 0 else bytes(mv[kp : kp + klen]),
            value=None if vlen < 0 else bytes(mv[vp : vp + vlen]),
            headers=decode_headers(payload, int(row[k.R_HEADERS_POS]), int(row[k.R_HEADER_COUNT])),
        )


class RecordBatch:
    """A view of one batch inside a buffer; decodes records only when asked."""

    __slots__ = ("_arr", "_row", "header", "path", "position", "prev_last_offset")

    def __init__(
        self,
        arr: U8,
        row: I64,
        header: BatchHeader,
        path: str | None,
        prev_last_offset: int = -1,
    ) -> None:
        self._arr = arr
        self._row = row
        self.header = header
        self.position = int(row[k.B_POS])
        self.path = path
        self.prev_last_offset = prev_last_offset  # for the error's last good offset

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def raw(self) -> memoryview:
        """The batch's bytes as stored (for whole-batch copies)."""
        return self._arr.data[self.position : self.position + self.size]

    def records(self) -> list[Record]:
        """Decode every record (decompressing if needed)."""
        payload, index = index_batches(
            self._arr,
            self._row.reshape(1, -1),
            path=self.path,
            prev_last_offset=self.prev_last_offset,
        )
        index[:, k.R_BATCH] = 0
        if payload is not self._arr:
            return list(records_from_index(payload, index))
        return list(records_from_index(self._arr, index))

    def control_type(self) -> ControlType | None:
        """The control record type of a control batch (None for data or emptied batches)."""
        if not self.header.is_control or self.header.records_count == 0:
            return None
        return parse_control_key(self.records()[0].key)


def iter_batches(
    buf: Buffer,
    *,
    path: str | None = None,
    start: int = 0,
    end: int | None = None,
    check_crc: bool = True,
) -> Iterator[RecordBatch]:
    """Yield every valid batch, then raise the scan's error if the data went bad."""
    arr = as_uint8(buf)
    scan = scan_batches(arr, start=start, end=end, path=path, check_crc=check_crc)
    for i in range(len(scan)):
        prev = int(scan.batches[i - 1, k.B_LAST_OFFSET]) if i else -1
        yield RecordBatch(arr, scan.batches[i], scan.header(i), path, prev)
    scan.raise_error()
