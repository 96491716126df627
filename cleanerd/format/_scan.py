"""``scan_batches``: a buffer's batches as one matrix, checked, with the first problem apart.

Callers that print (``dump``) or salvage (recovery) keep what was valid before the problem, so
the error is returned beside the good batches rather than raised. Public names are reached
through ``reader``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.format import _crc as crc, _legacy as legacy, kernels as k
from cleanerd.format._crc import crc_reason
from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._header import ATTR_CODEC_MASK, BatchHeader

Buffer = Any  # bytes | bytearray | memoryview | mmap.mmap | np.ndarray
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]

_WALK_REASONS = {
    k.WALK_PARTIAL_HEADER: "truncated batch: fewer bytes left than a batch header",
    k.WALK_PAST_END: "batch length field runs past the end of the data",
    k.WALK_TOO_SMALL: "batch length field is smaller than a v2 batch header (or a legacy message)",
    k.WALK_BAD_MAGIC: "unsupported magic byte (Kafka's formats are magic 0, 1 and 2)",
}


def as_uint8(buf: Buffer) -> U8:
    """A ``uint8`` numpy view of any buffer, without copying (except a non-contiguous array)."""
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).view(np.uint8)
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

    Checks: header complete, length within the data, magic 2 (CRC32C) or a legacy message set
    of magic 0 or 1 (CRC32, a wrapper's inner messages: ``_legacy``), last offset >= base
    offset, a record count that is not negative (nor 0 over uncompressed records), and base
    offsets strictly above the previous batch's last offset (starting from
    ``prev_last_offset``). Positions in the result and in the error are positions in ``buf``.
    Raises ValueError unless ``0 <= start <= end <= len(buf)``.
    """
    arr = as_uint8(buf)
    size = arr.shape[0]
    stop = size if end is None else end
    if not 0 <= start <= stop <= size:
        raise ValueError(
            f"scan bounds start={start}, end={end} are outside the {size}-byte buffer"
            " (need 0 <= start <= end <= len(buf))"
        )
    batches, walk_end, code = k.walk_batch_matrix(arr, start, stop)
    n = batches.shape[0]
    legacy_bad, legacy_reason = n, ""
    if legacy.is_legacy(batches):
        batches, legacy_bad, legacy_reason = legacy.complete_rows(arr, batches, check_crc)
    bad = n  # index of the first invalid batch among the walked ones
    reason = ""
    deltas_ok = batches[:, k.B_LAST_OFFSET] >= batches[:, k.B_BASE_OFFSET]
    prev = np.empty(n, dtype=np.int64)
    if n:
        prev[0] = prev_last_offset
        prev[1:] = batches[:-1, k.B_LAST_OFFSET]
    order_ok = batches[:, k.B_BASE_OFFSET] > prev
    codecs = batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK
    attrs_ok = codecs <= 4
    # Readers that skip batches without records (count 0) must not skip one whose records a
    # hostile count hides: a negative count, or 0 over an uncompressed payload.
    counts = batches[:, k.B_COUNT]
    counts_ok = (counts > 0) | (
        (counts == 0) & ((codecs != 0) | (batches[:, k.B_SIZE] == k.HEADER_SIZE))
    )
    ok = deltas_ok & order_ok & counts_ok & attrs_ok
    if not ok.all():
        bad = int(np.argmin(ok))
        if not deltas_ok[bad]:
            reason = "batch last offset delta is negative"
        elif not order_ok[bad]:
            reason = (
                f"offsets not increasing: batch base offset {int(batches[bad, k.B_BASE_OFFSET])}"
                f" follows offset {int(prev[bad])}"
            )
        elif not counts_ok[bad]:
            count = int(counts[bad])
            reason = (
                f"record count in the header is negative ({count})"
                if count < 0
                else "record count in the header is 0 but the batch holds records"
            )
        else:
            reason = f"unknown compression codec id {int(codecs[bad])}"
    if legacy_bad <= bad:  # a legacy message says what is wrong with it in its own words
        bad, reason = legacy_bad, legacy_reason
    if check_crc:
        crc_bad = first_crc_mismatch(arr, batches, bad)
        if crc_bad >= 0:
            bad = crc_bad
            reason = crc_reason(arr, batches, bad)
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


def first_crc_mismatch(arr: U8, batches: I64, stop: int) -> int:
    """The first of v2 batches ``0..stop-1`` whose CRC32C does not match, or -1: all of them in one
    kernel call where the CPU has CRC32C (``crc.first_bad_crc``), and the library, batch by
    batch, only when there is none or the kernel finds a mismatch (the library's answer is
    reported, so both paths give the same error)."""
    if legacy.is_legacy(batches[:stop]):  # their CRC32s are checked by ``_legacy``
        v2 = np.flatnonzero(~legacy.legacy_rows(batches[:stop]))
        bad = first_crc_mismatch(arr, batches[v2], v2.shape[0])
        return int(v2[bad]) if bad >= 0 else -1
    if crc.AVAILABLE and stop and crc.first_bad_crc(arr, batches[:stop]) < 0:
        return -1
    return crc.first_bad_crc_each(arr, batches, 0, stop, release_gil=False)


def _last_offset(batches: I64, default: int) -> int:
    return int(batches[-1, k.B_LAST_OFFSET]) if batches.shape[0] else default
