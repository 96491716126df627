"""What pass 1 saw of each segment, kept for pass 2 so it need not read the dirty batches again.

Pass 2 decides a record from its offset, whether it has a key, whether it is a tombstone, and
whether it won its key; pass 1 knows all of these. Kept per record (6 bytes: the offset from the
dirty range's first offset as a uint32, the ``FLAG_*`` flags, and pass 2's verdict) for the
batches pass 1 indexed, they let pass 2 decide those batches without reading them: a batch that
loses every record is dropped, and one that keeps every record is copied, both without
decompressing; only a batch that keeps some of its records is read again (to rebuild it).
Records live in preallocated arrays (pages are touched only as they fill), in the order pass 1
indexed them, so a batch's records are one contiguous range.

No key hash is kept: at the end of pass 1 every cached record that is its key's entry in the map
is flagged ``FLAG_WINNER`` (``_fill.mark_winners``, from the map's offsets alone), and pass 2
decides the cached records by that flag. So only batches wholly in the dirty range are cached (a
record before it would need a map lookup); when the flags cannot be set (offsets that do not
rise), the cache forgets its records (``forget_records``) and pass 2 reads those batches.

Pass 1 also leaves, per chunk, its batch matrix (checked: lengths, offsets, CRC32C) and each
batch's first cached record (-1: not cached). When pass 1 read a whole segment from its first
byte, pass 2 (and the producer-state walk) take the segment's batches from here instead of
walking it again. Both parts are bounded: records by ``max_bytes``, batch matrices by a quarter
of it. Once full, the cache stops taking records (or chunks) and pass 2 reads those as usual.
The bound is the cleaner's (``_cleaner.RECORD_CACHE_BYTES`` says how it is chosen). Besides,
the cache keeps pass 1's room for one chunk's hashes, offsets and flags (``scratch``, 25 bytes
a record of the largest chunk), so its pages are faulted in once rather than per chunk.

Offset strategy only: under timestamp and header the record's version would be needed too.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.format import I64, kernels as k

Arr = npt.NDArray[Any]
RECORD_BYTES = 4 + 1 + 1  # offset from ``base``, flags, pass 2's keep flag
MAX_SPAN = (1 << 32) - 1  # the last offset a record may have past ``base`` to be cached
# a record's flags (``RecordCache.flags``; pass 2 computes the same for records it reads itself)
FLAG_KEYED = 1
FLAG_TOMBSTONE = 2
FLAG_WINNER = 4  # the record's offset is its key's entry in the map (``_fill.mark_winners``)
BATCH_BYTES = 8 * (k.BATCH_COLUMNS + 1)  # a batch matrix row and its first record


def _anonymous(nbytes: int, dtype: type[np.generic]) -> Arr:
    """A zero-filled array in its own anonymous mapping, on small pages.

    numpy asks for transparent huge pages for large arrays; with the kernel's default THP
    ``defrag`` setting, a huge page fault may first compact memory, which here stalled the
    first pass of a clean by up to a quarter of a second. Small pages fault in at a steady
    ~1 us per 4 KiB as the cache fills, and the mapping goes when the cache does.
    """
    region = mmap.mmap(-1, max(nbytes, 1))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(region, dtype=dtype)[: nbytes // np.dtype(dtype).itemsize]


SCRATCH_ROW_BYTES = 16 + 8 + 1  # pass 1's room per record of a chunk: hash, offset, flags
MAX_KEPT_SCRATCH_BYTES = 64 << 20
"""``scratch`` keeps its room from one chunk (and clean) to the next up to this size; an honest
chunk needs a few MiB (16 MiB of uncompressed 120-byte records: 3.4 MiB)."""


@dataclass
class _Segment:
    chunks: list[tuple[I64, I64]] = field(default_factory=list)  # (batches, first record)
    payload_bytes: list[int] = field(default_factory=list)  # each chunk's records, decompressed
    whole: bool = True  # every chunk pass 1 read is in ``chunks``
    complete: bool = False  # ... and pass 1 read the segment from byte 0 to its end
    frozen: tuple[I64, I64] | None = None  # positions and first records of all chunks


class RecordCache:
    """Per segment: the batches pass 1 read and the records it indexed (up to ``max_bytes``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_records = max(0, max_bytes) // RECORD_BYTES
        self.max_batch_bytes = max(0, max_bytes) // 4
        self.records = 0
        self.batch_bytes = 0
        self.base = 0  # the dirty range's first offset: cached offsets are relative to it
        self.ascending = True  # record offsets rise strictly from one record to the next
        self._segments: dict[int, _Segment] = {}
        self.offsets = np.zeros(0, dtype=np.uint32)
        self.flags = np.zeros(0, dtype=np.uint8)
        self.keep = np.zeros(0, dtype=np.bool_)
        self._scratch: tuple[Arr, I64, Arr] = (
            np.zeros((0, 2), dtype=np.uint64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.uint8),
        )

    def reset(self, base: int = 0) -> None:
        """Forget everything (the record arrays stay allocated, for the next clean); records
        taken from now on are those of a dirty range starting at ``base``."""
        self.records = 0
        self.batch_bytes = 0
        self.base = base
        self.ascending = True
        self._segments.clear()

    def append(self, offsets: I64, flags: Arr) -> int:
        """Take records (absolute offsets, strictly rising as the record index checks them,
        and their flags): where the first went, or -1 if they do not fit (count, or offsets
        before ``base`` or past ``MAX_SPAN`` from it)."""
        n = offsets.shape[0]
        at = self.records
        if n <= 0 or at + n > self.max_records:
            return -1
        lo, hi = int(offsets[0]) - self.base, int(offsets[-1]) - self.base
        if lo < 0 or hi > MAX_SPAN:
            return -1
        if self.offsets.shape[0] == 0:  # allocated on first use; untouched pages cost nothing
            cap = self.max_records
            self.offsets = _anonymous(cap * 4, np.uint32)
            self.flags = _anonymous(cap, np.uint8)
            self.keep = _anonymous(cap, np.bool_)
        rel = self.offsets[at : at + n]
        np.subtract(offsets, self.base, out=rel, casting="unsafe")  # 0 <= each < 2^32: checked
        self.flags[at : at + n] = flags
        if at and rel[0] <= self.offsets[at - 1]:
            self.ascending = False  # segments whose offsets overlap
        self.records += n
        return at

    def scratch(self, n: int) -> tuple[Arr, I64, Arr]:
        """Room for ``n`` records' hashes, offsets and flags, for pass 1's kernel: kept from one
        chunk to the next (and one clean to the next), so its pages are faulted in once."""
        if self._scratch[1].shape[0] < n:
            size = max(n, 2 * self._scratch[1].shape[0])
            room = (
                np.empty((size, 2), dtype=np.uint64),
                np.empty(size, dtype=np.int64),
                np.empty(size, dtype=np.uint8),
            )
            if size * SCRATCH_ROW_BYTES > MAX_KEPT_SCRATCH_BYTES:
                # a chunk of tiny records (within the decompression bound, still many rows):
                # its room goes with the chunk instead of staying with the cleaner
                return room[0][:n], room[1][:n], room[2][:n]
            self._scratch = room
        hashes, offsets, flags = self._scratch
        return hashes[:n], offsets[:n], flags[:n]

    def forget_records(self) -> None:
        """Drop every cached record (pass 2 then reads their batches); the batch matrices stay."""
        self.records = 0
        for seg in self._segments.values():
            for _, first in seg.chunks:
                first.fill(-1)
            seg.frozen = None

    def add_chunk(self, segment_id: int, batches: I64, first: I64, payload_bytes: int) -> None:
        """Remember a chunk pass 1 read: its batches, each one's first cached record, and what
        its records took decompressed."""
        seg = self._segments.setdefault(segment_id, _Segment())
        size = BATCH_BYTES * batches.shape[0]
        if not seg.whole or self.batch_bytes + size > self.max_batch_bytes:
            seg.whole = False
            if not (first >= 0).any():
                return
            # keep only the cached batches, for lookups by position
            rows = np.flatnonzero(first >= 0)
            batches, first = batches[rows], first[rows]
            size = BATCH_BYTES * rows.size
        self.batch_bytes += size
        seg.chunks.append((batches, first))
        seg.payload_bytes.append(payload_bytes)
        seg.frozen = None

    def mark_complete(self, segment_id: int) -> None:
        """Pass 1 read the segment from its first byte to its end."""
        seg = self._segments.get(segment_id)
        if seg is not None and seg.whole:
            seg.complete = True

    def chunks(self, segment_id: int) -> list[tuple[I64, I64]] | None:
        """Every batch of the segment as pass 1 read it, chunk by chunk, if it read it whole."""
        seg = self._segments.get(segment_id)
        if seg is None or not seg.complete:
            return None
        return seg.chunks

    def payload_bytes(self, segment_id: int) -> list[int]:
        """What each of ``chunks``' chunks took decompressed, as pass 1 laid it out."""
        seg = self._segments.get(segment_id)
        return [] if seg is None else seg.payload_bytes

    def first_records(self, segment_id: int, batches: I64) -> I64 | None:
        """Each batch's first cached record (-1: not cached), matched by position."""
        seg = self._segments.get(segment_id)
        if seg is None or not seg.chunks:
            return None
        if seg.frozen is None:
            pos = np.concatenate([b[:, k.B_POS] for b, _ in seg.chunks])
            first = np.concatenate([f for _, f in seg.chunks])
            seg.frozen = (pos, first)
        positions, firsts = seg.frozen
        if positions.size == 0:
            return None
        want = batches[:, k.B_POS]
        at = np.minimum(np.searchsorted(positions, want), positions.size - 1)
        found: I64 = np.where(positions[at] == want, firsts[at], -1)
        return found
