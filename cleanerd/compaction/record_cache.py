"""What pass 1 saw of each record, kept for pass 2 so it need not decompress the dirty batches.

Pass 2 decides a record from its offset, whether it has a key, whether it is a tombstone, and
its key hash; pass 1 computed all of these. Kept per record (25 bytes) for the batches pass 1
indexed, they let pass 2 decide those batches without reading them: a batch that loses every
record is dropped, and one that keeps every record is copied, both without decompressing; only a
batch that keeps some of its records is read again (to rebuild it). The cache is bounded: once
full it stops taking records and pass 2 reads the other batches as usual.

Offset strategy only: under timestamp and header the record's version would be needed too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.format import kernels as k
from cleanerd.format.reader import I64

Arr = npt.NDArray[Any]
RECORD_BYTES = 16 + 8 + 1  # hash, offset, flags
FLAG_KEYED = 1
FLAG_TOMBSTONE = 2


@dataclass
class _Segment:
    positions: list[Arr] = field(default_factory=list)  # batch positions, ascending
    counts: list[Arr] = field(default_factory=list)
    hashes: list[Arr] = field(default_factory=list)
    offsets: list[Arr] = field(default_factory=list)
    flags: list[Arr] = field(default_factory=list)


@dataclass(frozen=True)
class CachedRecords:
    """Records of some batches of a chunk: ``batch`` is each record's row in the chunk."""

    batch: npt.NDArray[np.intp]
    hashes: Arr
    offsets: I64
    keyed: npt.NDArray[np.bool_]
    tombstone: npt.NDArray[np.bool_]


class RecordCache:
    """Per segment, per batch position: the records pass 1 indexed (up to ``max_bytes``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_records = max(0, max_bytes) // RECORD_BYTES
        self.records = 0
        self._segments: dict[int, _Segment] = {}
        self._frozen: dict[int, tuple[Arr, Arr, Arr, Arr, Arr, Arr]] = {}

    def add(self, segment_id: int, batches: I64, records: I64, hashes: Arr) -> None:
        """Remember ``records`` (an index of ``batches``, which all have records)."""
        n = records.shape[0]
        if n == 0 or self.records + n > self.max_records:
            return
        self.records += n
        seg = self._segments.setdefault(segment_id, _Segment())
        seg.positions.append(batches[:, k.B_POS].copy())
        seg.counts.append(np.bincount(records[:, k.R_BATCH], minlength=batches.shape[0]))
        seg.hashes.append(hashes.copy())
        seg.offsets.append(records[:, k.R_OFFSET].copy())
        flags = np.where(records[:, k.R_KEY_LEN] >= 0, FLAG_KEYED, 0) | np.where(
            records[:, k.R_VALUE_LEN] < 0, FLAG_TOMBSTONE, 0
        )
        seg.flags.append(flags.astype(np.uint8))

    def _segment(self, segment_id: int) -> tuple[Arr, Arr, Arr, Arr, Arr, Arr] | None:
        if segment_id not in self._frozen:
            seg = self._segments.pop(segment_id, None)
            if seg is None:
                return None
            counts = np.concatenate(seg.counts)
            first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
            self._frozen[segment_id] = (
                np.concatenate(seg.positions),
                first,
                counts,
                np.concatenate(seg.hashes),
                np.concatenate(seg.offsets),
                np.concatenate(seg.flags),
            )
        return self._frozen[segment_id]

    def lookup(
        self, segment_id: int, batches: I64, rows: npt.NDArray[np.intp]
    ) -> tuple[npt.NDArray[np.bool_], CachedRecords | None]:
        """Which of ``rows`` are cached, and their records (batch by batch, in row order)."""
        hit = np.zeros(rows.size, dtype=np.bool_)
        seg = self._segment(segment_id)
        if seg is None or rows.size == 0:
            return hit, None
        positions, first, counts, hashes, offsets, flags = seg
        at = np.minimum(np.searchsorted(positions, batches[rows, k.B_POS]), positions.size - 1)
        hit = positions[at] == batches[rows, k.B_POS]
        if not hit.any():
            return hit, None
        at = at[hit]
        n = counts[at]
        # record indexes of every hit batch, batch after batch
        starts = np.repeat(first[at] - np.concatenate(([0], np.cumsum(n)[:-1])), n)
        idx = starts + np.arange(int(n.sum()))
        f = flags[idx]
        return hit, CachedRecords(
            batch=np.repeat(rows[hit], n),
            hashes=hashes[idx],
            offsets=offsets[idx],
            keyed=(f & FLAG_KEYED) != 0,
            tombstone=(f & FLAG_TOMBSTONE) != 0,
        )
