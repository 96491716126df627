"""Batch payloads: each batch's record bytes, decompressed where needed, laid end to end.

The one place a batch's payload is decompressed and laid out, for the reader's record index
and the cleaner's fused pass 1 alike. Each payload is copied into place as soon as it is
decompressed, while it is still in cache, into a numpy buffer (numpy puts big arrays on huge
pages; a ``bytes`` of the same size pays about twice the page faults). When no batch is
compressed nothing is copied: the payloads are read where they lie. Public names are reached
through ``reader``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from cleanerd.format import kernels as k
from cleanerd.format._codecs import (
    DECOMPRESS_ERRORS,
    LIMIT_SETTING,
    Compression,
    decompress,
    decompression_limit,
    decompressor,
    one_call_decompressor,
)
from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._header import ATTR_CODEC_MASK
from cleanerd.format._limits import MAX_DECOMPRESSED_BYTES
from cleanerd.format._native_lay_out import decoders, lay_out_native, zstd_context

if TYPE_CHECKING:  # the aliases only: ``_scan`` reads legacy sets, whose reader needs this module
    from cleanerd.format._scan import I64, U8

__all__ = [
    "CHUNK_PAYLOADS_FACTOR",
    "CHUNK_PAYLOADS_FLOOR",
    "RECORD_INDEX_BYTES",
    "REUSED_BUFFER_MAX",
    "Payloads",
    "batch_payload",
    "batch_records_bound",
    "chunk_payloads_bound",
    "lay_out",
    "past_batch_records",
    "past_chunk_bound",
    "payload_ranges",
]

_CODECS = tuple(Compression)
_Decode = Callable[[bytes | memoryview], bytes]
_local = threading.local()
REUSED_BUFFER_MAX = 64 << 20
"""With ``reuse``, the buffer a thread keeps for the next call is at most this large."""
_MIN_REUSED = 1 << 20
_EXPANSION = 3  # first guess of decompressed / compressed size; the buffer grows past it
CHUNK_PAYLOADS_FACTOR = 4
"""One call lays out at most this many times the larger of ``max.decompressed.message.bytes``
and ``CHUNK_PAYLOADS_FLOOR`` (``chunk_payloads_bound``): what a reader holds of decompressed
records at once (a chunk of many batches, each within its own bound, cannot add up to more)."""
CHUNK_PAYLOADS_FLOOR = MAX_DECOMPRESSED_BYTES
"""The chunk bound never follows the setting below cleanerd's default for it. The setting bounds
each batch (Kafka's meaning: a bomb is one batch); a chunk is 4 MiB of compressed batches, so
four times a lowered setting (1 MiB, say) refused honest logs compressed more than 1:1."""


def chunk_payloads_bound(limit: int) -> int:
    """The most the payloads of one chunk may take decompressed together, with ``limit`` the
    per-batch bound (``decompression_limit``)."""
    return CHUNK_PAYLOADS_FACTOR * max(limit, CHUNK_PAYLOADS_FLOOR)


def past_chunk_bound(cap: int, limit: int) -> str:
    """Why a chunk is refused when its payloads together pass ``cap`` (``chunk_payloads_bound``
    of ``limit``, or a caller's share of it)."""
    return (
        f"this batch and the ones read with it decompress past {cap} bytes together "
        f"({CHUNK_PAYLOADS_FACTOR} x the larger of {LIMIT_SETTING} = {limit} "
        f"and {CHUNK_PAYLOADS_FLOOR})"
    )


RECORD_INDEX_BYTES = 8 * k.RECORD_COLUMNS + 16
"""What a reader holds for each record it indexes: its row of the record index (``R_*`` int64
columns) and its 128-bit key hash. Pass 1's own rows take less (25 bytes)."""


def batch_records_bound(limit: int, record_bytes: int | None = None) -> int:
    """The most records one batch may hold, with ``limit`` the per-batch bound
    (``decompression_limit``): what a reader holds for that many records (``record_bytes``
    each, ``RECORD_INDEX_BYTES`` by default) and the batch's payload (within ``limit``) fit in
    ``chunk_payloads_bound(limit)`` together.

    A record takes at least 7 bytes, so a batch's own size bounds its count no better than one
    per 7 bytes decompressed, and one batch is indexed whole: at the default 128 MiB that
    allows 19M records, whose index would take 15 times the bound. Honest batches are far below
    this bound (3.9M records at the default): Kafka's ``max.message.bytes`` is 1 MiB compressed.
    """
    return (chunk_payloads_bound(limit) - limit) // (record_bytes or RECORD_INDEX_BYTES)


def past_batch_records(count: int, limit: int) -> str:
    """Why a batch is refused when its header claims more records than ``batch_records_bound``
    of ``limit``."""
    most = batch_records_bound(limit)
    return (
        f"batch claims {count} records, more than the {most} that {LIMIT_SETTING} = {limit} "
        f"allows one batch (their index takes {RECORD_INDEX_BYTES} bytes a record); raise "
        f"{LIMIT_SETTING} for this topic if the batch is genuine"
    )


def payload_ranges(batches: I64) -> tuple[I64, I64]:
    """Where each batch's records lie in the segment it was scanned from: ``(starts, ends)``,
    after the batch header to the end of the batch (compressed, for a compressed batch)."""
    pos = batches[:, k.B_POS]
    return pos + k.HEADER_SIZE, pos + batches[:, k.B_SIZE]


def batch_payload(arr: U8, row: npt.NDArray[np.int64]) -> bytes | memoryview:
    """The uncompressed record bytes of one batch (a view when the batch is uncompressed)."""
    pos = int(row[k.B_POS])
    data = arr.data[pos + k.HEADER_SIZE : pos + int(row[k.B_SIZE])]
    codec = Compression(int(row[k.B_ATTRIBUTES]) & ATTR_CODEC_MASK)
    if codec == Compression.NONE:
        return data
    if int(row[k.B_COUNT]) == 0:
        return b""  # Kafka never decompresses a batch with no records (DefaultRecordBatch.iterator)
    return decompress(codec, data)


@dataclass(frozen=True, slots=True)
class Payloads:
    """Batch ``i``'s record bytes are ``buffer[starts[i]:ends[i]]``, for every batch before the
    first one that does not decompress; ``error`` says why that one did not (no position)."""

    buffer: U8
    starts: I64
    ends: I64
    error: CorruptRecordError | None = None

    @property
    def usable(self) -> int:
        """How many batches, from the first, have their payload laid out."""
        return int(self.starts.shape[0])


def lay_out(arr: U8, batches: I64, *, reuse: bool = False, cap: int | None = None) -> Payloads:
    """The payloads of ``batches`` (rows of a scan of ``arr``), decompressed where needed.

    Uncompressed batches only: the buffer is ``arr`` itself. Otherwise every payload is laid
    end to end in a new buffer or, with ``reuse``, in one the calling thread keeps (valid
    until its next ``reuse`` call: for a pass that is done with a chunk before the next one).
    A compressed batch with no records is never decompressed (Kafka's rule): its payload is
    empty. ``cap`` lowers the bound on what the call lays out (``chunk_payloads_bound`` of the
    limit): for a caller that splits one chunk between threads and gives each part its share.
    """
    starts, ends = payload_ranges(batches)
    codecs = batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK
    if not codecs.any():
        return Payloads(arr, starts, ends)
    mv = arr.data
    n = batches.shape[0]
    out_ends = np.empty(n, dtype=np.int64)
    limit = decompression_limit()
    bound = chunk_payloads_bound(limit)
    cap = bound if cap is None else min(cap, bound)
    fns: dict[int, tuple[_Decode, int, _Decode]] = {}  # codec -> (one call, below, bounded)
    buf = _buffer(min(int((ends - starts).sum()) * _EXPANSION, cap), reuse)
    dst = buf.data
    q = 0
    i = 0
    counts = np.ascontiguousarray(batches[:, k.B_COUNT])
    # lz4 and zstd decode in a kernel, without the GIL, through their libraries' C decoders; the
    # batches it leaves (another codec, no room, anything the binding must decide: see
    # ``_native_lay_out``) are done here, one at a time, before it goes on from the next
    found = decoders()
    # the codecs present (0-7: attribute bits); np.unique would import numpy.ma on first use
    fast = not found.codecs.isdisjoint(np.flatnonzero(np.bincount(codecs)).tolist())
    zstd = zstd_context() if fast else None
    los, his, cs, nums = starts.tolist(), ends.tolist(), codecs.tolist(), counts.tolist()
    try:
        while i < n:
            if zstd is not None:
                i, q = lay_out_native(
                    arr,
                    starts,
                    ends,
                    codecs,
                    counts,
                    buf,
                    out_ends,
                    i,
                    q,
                    limit,
                    cap,
                    found.addresses,
                    zstd.address,
                    zstd.buffers,
                )
                if i >= n:
                    break
            lo, hi, c, count = los[i], his[i], cs[i], nums[i]
            if c == 0:
                part: bytes | memoryview = mv[lo:hi]
            elif count == 0:
                part = b""
            else:
                fn = fns.get(c)
                if fn is None:
                    fn = fns[c] = (
                        *one_call_decompressor(_CODECS[c], limit),
                        decompressor(_CODECS[c], limit),
                    )
                part = fn[0](mv[lo:hi]) if hi - lo < fn[1] else fn[2](mv[lo:hi])
            size = len(part)
            if q + size > cap:  # checked here too: a kept buffer may be larger than cap
                raise CorruptRecordError(past_chunk_bound(cap, limit))
            if q + size > buf.shape[0]:
                buf = _buffer(q + size, reuse, buf, q, cap)
                dst = buf.data
            dst[q : q + size] = part
            q += size
            out_ends[i] = q
            i += 1
    except (*DECOMPRESS_ERRORS, IndexError) as e:
        laid = buf if reuse else buf[:q]
        why = e if isinstance(e, CorruptRecordError) else _why(arr, batches[i])
        return Payloads(laid, *_starts_ends(out_ends[:i]), why)
    return Payloads(buf if reuse else buf[:q], *_starts_ends(out_ends))


def _starts_ends(ends: I64) -> tuple[I64, I64]:
    starts = np.empty_like(ends)
    if ends.shape[0]:
        starts[0] = 0
        starts[1:] = ends[:-1]
    return starts, ends


def _why(arr: U8, row: npt.NDArray[np.int64]) -> CorruptRecordError:
    """The reader's error for a payload that does not decompress (worded by ``decompress``)."""
    codec = int(row[k.B_ATTRIBUTES]) & ATTR_CODEC_MASK
    if codec >= len(_CODECS):
        return CorruptRecordError(f"unknown compression codec id {codec}")
    try:
        batch_payload(arr, row)
    except CorruptRecordError as e:
        return e
    return CorruptRecordError(f"{_CODECS[codec].label} payload does not decompress")


def _buffer(
    size: int, reuse: bool, keep: U8 | None = None, used: int = 0, cap: int | None = None
) -> U8:
    """A buffer of at least ``size`` bytes holding the first ``used`` bytes of ``keep``; with
    ``reuse`` the one this thread keeps (up to ``REUSED_BUFFER_MAX``). Growth doubles, up to
    ``cap``."""
    buf: U8 | None = getattr(_local, "payload", None) if reuse else keep
    if buf is None or buf.shape[0] < size:
        grown = 2 * keep.shape[0] if keep is not None else 0
        if cap is not None:
            grown = min(grown, cap)
        buf = np.empty(max(size, grown, _MIN_REUSED if reuse else 0), np.uint8)
        if reuse and buf.shape[0] <= REUSED_BUFFER_MAX:
            _local.payload = buf
    if keep is not None and keep is not buf and used:
        buf[:used] = keep[:used]
    return buf
