"""Reading a segment in chunks of whole batches, and giving back the pages a chunk used.

Both cleaner passes (and producer-state folding) walk segments through ``iter_chunks`` so memory
stays bounded however large a segment is: each chunk is checked as ``scan_batches`` checks it,
and once the caller moves on, ``release`` drops the mapped pages of the chunk it is done with.

A cleaning reads its segments several times (the plan's producer-state walk, pass 1, pass 2, and
the checks of whatever changed in between), and dropping pages only to fault them in again costs
more than the rest of a pass over an uncompressed segment (a page fault per 64 KiB and a
page-table teardown per chunk: about a third of a cleaning of 1M records on the dev VM). So a
cleaning that reads no more than ``RESIDENT_LOG_BYTES`` of log keeps its pages mapped
(``pages_kept``), every walk in it going through the segment's one kept map
(``LogSegment.view``), until its segments' maps go (``LogSegment.drop_map``: on close, on delete
after the swap, or by the kept-maps LRU). They are clean file pages, which the kernel can take
back under memory pressure.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import cast

import numpy as np

from cleanerd.format import (
    ATTR_CODEC_MASK,
    I64,
    U8,
    CorruptRecordError,
    kernels as k,
    layout as at,
    scan_batches,
)

CHUNK_BYTES = 4 << 20
"""Batch bytes handled per step of a pass; a batch larger than this is one chunk on its own."""

UNCOMPRESSED_CHUNK_FACTOR = 4
"""A run of uncompressed batches is read ``UNCOMPRESSED_CHUNK_FACTOR * CHUNK_BYTES`` at a time
(``iter_chunks``). Nothing of theirs is decompressed (their records are read where they lie), so
what a chunk of them costs in memory is its pages and its records' rows (``CHUNK_RECORDS``
bounds those), while every chunk costs every pass a fixed share of Python work: at 4 MiB that
share was about 8% of a 1M-record uncompressed clean (bench/compare.py, docs/speed.md)."""

CHUNK_RECORDS = 1 << 19
"""Records a chunk holds at most (a batch holding more is a chunk on its own). Whoever takes a
chunk indexes its records at once (pass 1's rows: 25 bytes a record; a record index: 104), and
records are as small as 7 bytes: cut by bytes alone, a 4 MiB chunk of compressed batches could
hold tens of millions, bounded only by the decompression bound. Honest chunks come nowhere near
(40k records of 100 bytes uncompressed), so the cut costs them nothing."""


RESIDENT_LOG_BYTES = 128 << 20
"""A cleaning that reads no more log than this keeps the pages it read mapped (``pages_kept``)."""

_KEPT: ContextVar[bool] = ContextVar("pages_kept", default=False)


@contextmanager
def pages_kept(nbytes: int) -> Iterator[bool]:
    """In the block (this thread's context), ``release`` leaves pages mapped if the block reads
    at most ``RESIDENT_LOG_BYTES`` of log (``nbytes``); yields whether it does."""
    keep = nbytes <= RESIDENT_LOG_BYTES
    token = _KEPT.set(keep or _KEPT.get())
    try:
        yield keep
    finally:
        _KEPT.reset(token)


def pages_are_kept() -> bool:
    """Whether this thread is inside ``pages_kept`` for a cleaning small enough to keep them."""
    return _KEPT.get()


def chunk_bytes() -> int:
    """How many bytes a chunk reads now (``CHUNK_BYTES``, which tests shrink)."""
    return CHUNK_BYTES


def uncompressed_chunk_bytes() -> int:
    """How many bytes a chunk of uncompressed batches reads now (a multiple of ``chunk_bytes``:
    tests that shrink one shrink both)."""
    return CHUNK_BYTES * UNCOMPRESSED_CHUNK_FACTOR


def chunk_records() -> int:
    """How many records a chunk holds at most now (``CHUNK_RECORDS``, which tests shrink)."""
    return CHUNK_RECORDS


def iter_chunks(
    arr: U8,
    *,
    path: str,
    start: int = 0,
    prev_last_offset: int = -1,
    check_crc: bool = True,
    chunk_bytes: int | None = None,
    strict: bool = True,
    release_pages: bool = True,
) -> Generator[I64, None, None]:
    """Batch matrices of consecutive chunks of ``arr[start:]``; raises at the first bad batch.

    Every batch is checked as ``scan_batches`` checks it (lengths, magic, CRC, rising offsets),
    and a truncated last batch is an error: the cleaner only reads inactive segments. Once the
    caller asks for the next chunk, the pages of the previous ones are released (``release``):
    it must not keep views into them. With ``release_pages=False`` the caller releases each
    chunk itself once done with it: one that asks for the next chunk before it is done with
    this one. With ``strict=False`` the walk ends quietly at the first problem (a writer may be
    appending to the active segment).

    A chunk holds at most ``chunk_bytes`` of compressed batches and ``chunk_records()``
    records. After a chunk of uncompressed batches only, the next read takes
    ``uncompressed_chunk_bytes()`` (when larger), and its uncompressed batches come in chunks of
    that size: segments keep one codec as a rule, so a compressed segment is read as before.
    """
    size = int(arr.shape[0])
    step = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    wide = max(step, uncompressed_chunk_bytes())
    pos = start
    prev = prev_last_offset
    plain = False  # the last chunk held uncompressed batches only: read wide
    while pos < size:
        end = min(size, pos + (wide if plain else step))
        scan = scan_batches(
            arr, start=pos, end=end, path=path, check_crc=check_crc, prev_last_offset=prev
        )
        if len(scan) == 0 and end < size:
            # one batch larger than the chunk, or a real problem: scan exactly that batch
            whole = _batch_extent(arr, pos, size)
            scan = scan_batches(
                arr, start=pos, end=whole, path=path, check_crc=check_crc, prev_last_offset=prev
            )
        if len(scan):
            compressed = compressed_sizes(scan.batches)
            plain = not compressed.any()
            for batches in _runs(scan.batches, compressed, step, wide):
                yield batches
                end_of = int(batches[-1, k.B_POS] + batches[-1, k.B_SIZE])
                if release_pages:
                    release(arr, pos, end_of)  # the caller is done with this chunk's bytes
                pos = end_of
            prev = int(scan.batches[-1, k.B_LAST_OFFSET])
            pos = scan.end
        if len(scan) == 0 or (scan.error is not None and end >= size):
            if not strict:
                return
            scan.raise_error()
            if len(scan) == 0:  # pragma: no cover - scan_batches always reports why
                raise CorruptRecordError("no batch found", path=path, position=pos)


def compressed_sizes(batches: I64) -> I64:
    """Each batch's size if it is compressed, else 0: what chunks of them are bounded by."""
    codecs = batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK
    return np.where(codecs != 0, batches[:, k.B_SIZE], 0)


def _runs(batches: I64, compressed: I64, step: int, wide: int) -> Iterator[I64]:
    """``batches`` in chunks of at most ``step`` bytes of compressed batches (``compressed``:
    each batch's size if it is compressed, else 0), ``wide`` bytes in all and
    ``chunk_records()`` records; a batch past a bound is a chunk on its own."""
    for lo, hi in batch_runs(compressed, step):
        for mid, top in batch_runs(batches[lo:hi, k.B_SIZE], wide):
            part = batches[lo + mid : lo + top]
            for a, b in batch_runs(part[:, k.B_COUNT], chunk_records()):
                yield part[a:b]


def batch_runs(values: I64, most: int) -> Iterator[tuple[int, int]]:
    """Consecutive runs ``[lo, hi)`` of batches, in order, whose ``values`` (one a batch: its
    records, its bytes) add up to at most ``most``; a batch past ``most`` is a run on its own."""
    ends = np.cumsum(values)
    lo = 0
    while lo < values.shape[0]:
        before = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, before + most, side="right")))
        yield lo, hi
        lo = hi


def release(arr: U8, start: int, end: int) -> None:
    """Drop the pages of ``arr[start:end]`` from this process if ``arr`` maps a file.

    Only the process's mapping goes (the page cache keeps the data; a later read faults it back
    in), so resident memory stays at about one chunk per segment however large it is. The call
    goes through ctypes where it can, which lets go of the GIL (``mmap.madvise`` holds it while
    the kernel tears the page tables down, a tenth of a worker's GIL time). Within ``pages_kept``
    the pages stay.
    """
    if pages_are_kept():
        return
    base = arr.base.obj if isinstance(arr.base, memoryview) else arr.base
    if not isinstance(base, mmap.mmap):
        return
    page = mmap.PAGESIZE
    lo = start - start % page
    hi = end - end % page
    if hi <= lo:
        return
    if _madvise is not None and arr.size and arr.ctypes.data % page == 0:
        _madvise(arr.ctypes.data + lo, hi - lo, mmap.MADV_DONTNEED)
    else:
        base.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` through ctypes (which releases the GIL), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int], int], fn)


_madvise = _libc_madvise()


def _batch_extent(arr: U8, pos: int, size: int) -> int:
    """End of the batch at ``pos`` by its length field, capped at ``size``."""
    if pos + k.LOG_OVERHEAD > size:
        return size
    field = arr[pos + at.LENGTH_AT : pos + at.LENGTH_AT + 4]
    length = int.from_bytes(field.tobytes(), "big", signed=True)
    return min(size, pos + k.LOG_OVERHEAD + max(length, 0))
