"""A partition's compacted state as a stream: every live key's winning record, in bounded memory.

The state below an end offset is, for each key, the record its topic's strategy picks among all
records below it (a previous snapshot's records stand for the log before the snapshot's end),
unless that record is a tombstone; aborted data, control records and unkeyed records never take
part. It is computed the way the cleaner computes winners: pass 1 puts every candidate into the
offset map (the same map, strategies and tie rules as cleaning), pass 2 reads the candidates
again and emits those that are their key's winner. When the candidates may not fit the map, the
key-hash space is split and the two passes run once per slice, so memory stays the map's budget
whatever the number of keys; no dict of values is ever built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.compaction import (
    DEFAULT_LOAD_FACTOR,
    CleanedTransactionMetadata,
    OffsetMap,
    compute_versions,
    index_and_hash,
    slot_bytes,
    transaction_verdicts,
)
from cleanerd.format import (
    ATTR_CONTROL,
    CorruptRecordError,
    Record,
    as_uint8,
    kernels as k,
    records_from_index,
)
from cleanerd.storage import LogSegment, collect_aborted, iter_chunks
from cleanerd.topics import StrategyConfig

Arr = npt.NDArray[Any]
Chunk = tuple[Arr, Arr, Arr]
"""``(payload, records, key hashes)``: candidate records only (keyed data, not aborted)."""
Source = Callable[[], Iterator[Chunk]]
"""Starts a fresh walk over the candidates; each pass of the build walks them again."""


def _candidates(payload: Arr, recs: Arr, hashes: Arr, keep: Arr) -> Chunk:
    if keep.all():
        return payload, recs, hashes  # the usual case: no copy
    return payload, recs[keep], hashes[keep]


def log_candidates(segments: Sequence[LogSegment], start: int, end: int) -> Source:
    """The candidates of the log over ``[start, end)``: data records of committed or open
    transactions with keys, as the cleaner's pass 1 sees them (aborted ones and markers out)."""

    def walk() -> Iterator[Chunk]:
        if end <= start:
            return
        meta = CleanedTransactionMetadata(collect_aborted(segments, start, end))
        reached = start - 1
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is not None and nxt <= start:
                continue  # wholly below the range (a segment's offsets end below the next base)
            if seg.base_offset >= end:
                break
            _, position = seg.offset_index.lookup(start)
            arr = seg.view()
            path = str(seg.log_path)
            prev = seg.base_offset - 1 if position == 0 else -1
            for batches in iter_chunks(
                arr, path=path, start=position, prev_last_offset=prev, strict=False
            ):
                counts = batches[:, k.B_COUNT]
                is_control, aborted = transaction_verdicts(meta, arr, batches, path)
                rows = np.flatnonzero(~is_control & ~aborted & (counts > 0))
                reached = max(reached, int(batches[:, k.B_LAST_OFFSET].max()))
                if rows.size:
                    payload, recs, hashes = index_and_hash(arr, batches[rows], path)
                    offs = recs[:, k.R_OFFSET]
                    keep = (recs[:, k.R_KEY_LEN] >= 0) & (offs >= start) & (offs < end)
                    yield _candidates(payload, recs, hashes, keep)
                if reached >= end - 1:
                    return
        if reached < end - 1:
            raise CorruptRecordError(
                f"the log ends at offset {reached} (torn or damaged), below the end offset "
                f"{end} the state was asked for",
                path=str(segments[-1].log_path) if segments else None,
                last_good_offset=reached,
            )

    return walk


def snapshot_candidates(buffer: Any, path: str) -> Source:
    """A snapshot file's records as candidates; their offsets become ``file offset - 1`` so
    they sort below every log offset at or after the snapshot's end (see ``SnapshotWriter``)."""
    arr = as_uint8(buffer)

    def walk() -> Iterator[Chunk]:
        for batches in iter_chunks(arr, path=path, chunk_bytes=None):
            rows = np.flatnonzero((batches[:, k.B_ATTRIBUTES] & ATTR_CONTROL) == 0)
            if rows.size == 0:
                continue
            payload, recs, hashes = index_and_hash(arr, batches[rows], path)
            recs = recs.copy()
            recs[:, k.R_OFFSET] -= 1
            yield _candidates(payload, recs, hashes, recs[:, k.R_KEY_LEN] >= 0)

    return walk


def _slice(hashes: Arr, modulus: int, residue: int) -> Arr | slice:
    """The rows whose key hash falls in the slice ``h1 % modulus == residue`` (all: a view)."""
    if modulus == 1:
        return slice(None)
    return np.flatnonzero(hashes[:, 0] % np.uint64(modulus) == np.uint64(residue))


def _empty(sel: Arr | slice, rows: Arr) -> bool:
    return rows.shape[0] == 0 if isinstance(sel, slice) else sel.size == 0


def _fill(omap: OffsetMap, sources: Sequence[Source], modulus: int, residue: int) -> bool:
    """Pass 1 over one slice; False when the map filled up."""
    if omap.size:
        omap.clear()
    for source in sources:
        for payload, recs, hashes in source():
            sel = _slice(hashes, modulus, residue)
            if _empty(sel, recs):
                continue
            versions, has_version, _ = compute_versions(omap.config, payload, recs[sel])
            _, full = omap.put_batch(hashes[sel], recs[sel, k.R_OFFSET], versions, has_version)
            if full:
                return False
    return True


def _emit(
    omap: OffsetMap, sources: Sequence[Source], modulus: int, residue: int, tombstones: bool
) -> Iterator[Record]:
    """Pass 2 over one slice: each key's winner, as a record (tombstones only if asked)."""
    for source in sources:
        for payload, recs, hashes in source():
            sel = _slice(hashes, modulus, residue)
            if _empty(sel, recs):
                continue
            winner, _, _ = omap.get(hashes[sel])
            rows = recs[sel]
            live = winner == rows[:, k.R_OFFSET]
            if not tombstones:
                live &= rows[:, k.R_VALUE_LEN] >= 0
            if live.any():
                yield from records_from_index(payload, rows[live])


def _slice_state(
    omap: OffsetMap, sources: Sequence[Source], modulus: int, residue: int, tombstones: bool
) -> Iterator[Record]:
    """One slice's winners; a slice whose keys overflow the map is split in two (the rows
    with ``h1 % 2m`` equal to ``r`` or ``r + m``), which never touches a slice already done."""
    if _fill(omap, sources, modulus, residue):
        yield from _emit(omap, sources, modulus, residue, tombstones)
        return
    for sub in (residue, residue + modulus):
        yield from _slice_state(omap, sources, modulus * 2, sub, tombstones)


def live_records(
    sources: Sequence[Source],
    strategy: StrategyConfig,
    budget_bytes: int,
    candidate_bound: int,
    *,
    tombstones: bool = False,
) -> Iterator[Record]:
    """Every live key's winning record among ``sources`` (oldest source first); with
    ``tombstones`` also the keys whose winner is a tombstone.

    ``candidate_bound`` is an upper bound on the candidates (offsets spanned plus a snapshot's
    records): the key space is cut into enough slices for that many keys to fit the map, and a
    slice is cut finer when it still fills it (keys need not spread evenly).
    """
    # no bigger than the candidates need: a smaller table stays in cache and costs less to zero
    need = slot_bytes(strategy) * (math.ceil(max(candidate_bound, 1) / DEFAULT_LOAD_FACTOR) + 2)
    omap = OffsetMap(min(budget_bytes, need), strategy)
    slices = max(1, math.ceil(candidate_bound / omap.max_entries))
    for residue in range(slices):
        yield from _slice_state(omap, sources, slices, residue, tombstones)
