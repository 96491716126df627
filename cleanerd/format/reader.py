"""Zero-copy reading of v2 batches from a buffer (bytes, memoryview, mmap or numpy array).

``scan_batches`` walks a whole buffer with the numba kernel and checks CRCs and offsets, returning
the batch matrix and, separately, the first problem found: callers that print (``dump``) or salvage
(recovery) keep what was valid before it. ``RecordBatch`` is the per-batch view for code that wants
Python objects (CLI, tests); ``index_batches`` is the hot-path record index over many batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import numpy.typing as npt

from cleanerd.format import kernels as k
from cleanerd.format.codecs import Compression, decompress
from cleanerd.format.control import ControlType, parse_control_key
from cleanerd.format.errors import CorruptRecordError
from cleanerd.format.header import ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE, CRC_START, BatchHeader
from cleanerd.format.records import Header, Record
from cleanerd.format.varint import read_varint

Buffer = Any  # bytes | bytearray | memoryview | mmap.mmap | np.ndarray
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_WALK_REASONS = {
    k.WALK_PARTIAL_HEADER: "truncated batch: fewer bytes left than a batch header",
    k.WALK_PAST_END: "batch length field runs past the end of the data",
    k.WALK_TOO_SMALL: "batch length field is smaller than a v2 batch header",
    k.WALK_BAD_MAGIC: "unsupported magic byte (only v2 batches are supported)",
}
_RECORD_REASONS = {
    k.REC_VARINT_TOO_LONG: "record varint overflows (longer than Kafka allows)",
    k.REC_OUT_OF_BOUNDS: "record runs past the end of its batch",
    k.REC_LENGTH_MISMATCH: "record fields do not end where its length says",
    k.REC_COUNT_MISMATCH: "record count in the header does not match the records in the batch",
    k.REC_BAD_LENGTH: "record has an invalid negative length",
    k.REC_BAD_OFFSET: "record offset outside its batch's offset range or not increasing",
}


def as_uint8(buf: Buffer) -> U8:
    """A ``uint8`` numpy view of any buffer, without copying."""
    if isinstance(buf, np.ndarray):
        return buf.view(np.uint8)
    if len(buf) == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


@dataclass(frozen=True)
class BatchScan:
    """Batches found in a buffer (matrix with ``kernels.B_*`` columns) and the first problem."""

    batches: I64
    end: int  # position just after the last good batch
    error: CorruptRecordError | None

    def __len__(self) -> int:
        return int(self.batches.shape[0])

    def header(self, i: int) -> BatchHeader:
        """The header of batch ``i`` as an object (slow path)."""
        b = self.batches[i]
        return BatchHeader(
            base_offset=int(b[k.B_BASE_OFFSET]),
            batch_length=int(b[k.B_SIZE]) - k.LOG_OVERHEAD,
            partition_leader_epoch=int(b[k.B_LEADER_EPOCH]),
            magic=int(b[k.B_MAGIC]),
            crc=int(b[k.B_CRC]),
            attributes=int(b[k.B_ATTRIBUTES]),
            last_offset_delta=int(b[k.B_LAST_OFFSET] - b[k.B_BASE_OFFSET]),
            base_timestamp=int(b[k.B_BASE_TIMESTAMP]),
            max_timestamp=int(b[k.B_MAX_TIMESTAMP]),
            producer_id=int(b[k.B_PRODUCER_ID]),
            producer_epoch=int(b[k.B_PRODUCER_EPOCH]),
            base_sequence=int(b[k.B_BASE_SEQUENCE]),
            records_count=int(b[k.B_COUNT]),
        )

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def scan_batches(
    buf: Buffer,
    *,
    start: int = 0,
    end: int | None = None,
    path: str | None = None,
    check_crc: bool = True,
    prev_last_offset: int = -1,
) -> BatchScan:
    """Walk the batches of ``buf[start:end]``; stop at the first invalid one.

    Checks: header complete, length within the data, magic 2, CRC32C, last offset >= base
    offset, and base offsets strictly above the previous batch's last offset (starting from
    ``prev_last_offset``). Positions in the result and in the error are positions in ``buf``.
    """
    arr = as_uint8(buf)
    stop = arr.shape[0] if end is None else end
    batches, walk_end, code = k.walk_batches(arr, start, stop)
    n = batches.shape[0]
    bad = n  # index of the first invalid batch among the walked ones
    reason = ""
    deltas_ok = batches[:, k.B_LAST_OFFSET] >= batches[:, k.B_BASE_OFFSET]
    prev = np.empty(n, dtype=np.int64)
    if n:
        prev[0] = prev_last_offset
        prev[1:] = batches[:-1, k.B_LAST_OFFSET]
    order_ok = batches[:, k.B_BASE_OFFSET] > prev
    attrs_ok = (batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK) <= 4
    ok = deltas_ok & order_ok & attrs_ok
    if not ok.all():
        bad = int(np.argmin(ok))
        if not deltas_ok[bad]:
            reason = "batch last offset delta is negative"
        elif not order_ok[bad]:
            reason = (
                f"offsets not increasing: batch base offset {int(batches[bad, k.B_BASE_OFFSET])}"
                f" follows offset {int(prev[bad])}"
            )
        else:
            codec = int(batches[bad, k.B_ATTRIBUTES]) & ATTR_CODEC_MASK
            reason = f"unknown compression codec id {codec}"
    if check_crc:
        # one crc32c call per batch; the loop runs on Python ints (numpy scalars cost ~1 us a batch)
        mv = arr.data
        crc = crc32c.crc32c
        starts = (batches[:bad, k.B_POS] + CRC_START).tolist()
        stops = (batches[:bad, k.B_POS] + batches[:bad, k.B_SIZE]).tolist()
        stored = batches[:bad, k.B_CRC].tolist()
        for i, (lo, hi, expected) in enumerate(zip(starts, stops, stored, strict=True)):
            if crc(mv[lo:hi]) != expected:
                bad = i
                reason = f"CRC mismatch: stored {expected:#010x}, computed {crc(mv[lo:hi]):#010x}"
                break
    error = None
    if bad < n:
        good = batches[:bad]
        position = int(batches[bad, k.B_POS])
        error = CorruptRecordError(
            reason,
            path=path,
            position=position,
            last_good_offset=_last_offset(good, prev_last_offset),
        )
        return BatchScan(good, position, error)
    if code != k.WALK_OK:
        error = CorruptRecordError(
            _WALK_REASONS[code],
            path=path,
            position=int(walk_end),
            last_good_offset=_last_offset(batches, prev_last_offset),
        )
    return BatchScan(batches, int(walk_end), error)


def _last_offset(batches: I64, default: int) -> int:
    return int(batches[-1, k.B_LAST_OFFSET]) if batches.shape[0] else default


def batch_payload(arr: U8, row: npt.NDArray[np.int64]) -> bytes | memoryview:
    """The uncompressed record bytes of one batch (a view when the batch is uncompressed)."""
    pos = int(row[k.B_POS])
    data = arr.data[pos + k.HEADER_SIZE : pos + int(row[k.B_SIZE])]
    codec = Compression(int(row[k.B_ATTRIBUTES]) & ATTR_CODEC_MASK)
    if codec == Compression.NONE:
        return data
    if int(row[k.B_COUNT]) == 0:
        return b""  # Kafka never decompresses a batch with no records (DefaultRecordBatch.iterator)
    return decompress(codec, bytes(data))


def index_batches(
    buf: Buffer, batches: I64, *, path: str | None = None, prev_last_offset: int = -1
) -> tuple[U8, I64]:
    """Index every record of ``batches`` (rows of a scan of ``buf``).

    Returns ``(payload_buffer, records)``: when no batch is compressed the payload buffer is
    ``buf`` itself; otherwise payloads (decompressed where needed) are laid end to end in a new
    buffer. Record positions (``R_*_POS``) are positions in the returned buffer and ``R_BATCH``
    is the batch's row in ``batches``. Raises CorruptRecordError naming the batch's position;
    its last good offset is ``prev_last_offset`` when the first batch is the bad one.
    """
    arr = as_uint8(buf)
    n = batches.shape[0]
    codecs = batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK
    if n == 0 or not codecs.any():
        payload = arr
        starts = batches[:, k.B_POS] + k.HEADER_SIZE
        ends = batches[:, k.B_POS] + batches[:, k.B_SIZE]
    else:
        parts: list[bytes | memoryview] = []
        for i in range(n):
            try:
                parts.append(batch_payload(arr, batches[i]))
            except CorruptRecordError as e:
                last_good = int(batches[i - 1, k.B_LAST_OFFSET]) if i else prev_last_offset
                raise CorruptRecordError(
                    e.reason,
                    path=path,
                    position=int(batches[i, k.B_POS]),
                    last_good_offset=last_good,
                ) from e
        lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=n)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        # lay the payloads out in a numpy buffer rather than b"".join: numpy allocates big arrays
        # on huge pages, a bytes object of the same size pays twice as much in page faults
        payload = np.empty(int(ends[-1]), dtype=np.uint8)
        dst = payload.data
        for part, lo, hi in zip(parts, starts.tolist(), ends.tolist(), strict=True):
            dst[lo:hi] = part
    log_append = np.where(
        batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE, batches[:, k.B_MAX_TIMESTAMP], -1
    )
    records, err, bad, _pos = k.index_records(
        payload,
        np.ascontiguousarray(starts),
        np.ascontiguousarray(ends),
        np.ascontiguousarray(batches[:, k.B_BASE_OFFSET]),
        np.ascontiguousarray(batches[:, k.B_LAST_OFFSET]),
        np.ascontiguousarray(batches[:, k.B_BASE_TIMESTAMP]),
        np.ascontiguousarray(batches[:, k.B_COUNT]),
        np.ascontiguousarray(log_append),
    )
    if err == k.REC_OK and records.shape[0]:
        # The kernel reads -1 as "not LogAppendTime"; a LogAppendTime batch whose maxTimestamp
        # is -1 must still give every record -1, as Kafka's reader does.
        lat_unset = ((batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE) != 0) & (
            batches[:, k.B_MAX_TIMESTAMP] == -1
        )
        if lat_unset.any():
            records[lat_unset[records[:, k.R_BATCH]], k.R_TIMESTAMP] = -1
    if err != k.REC_OK:
        reason = _RECORD_REASONS.get(err, f"record error {err}")
        raise CorruptRecordError(
            f"{reason} (batch base offset {int(batches[bad, k.B_BASE_OFFSET])})",
            path=path,
            position=int(batches[bad, k.B_POS]),
            last_good_offset=int(batches[bad - 1, k.B_LAST_OFFSET]) if bad else prev_last_offset,
        )
    return payload, records


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
