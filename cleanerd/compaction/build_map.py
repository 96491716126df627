"""Pass 1: the offset map over the dirty range (reference 3.7: ``buildOffsetMap``).

Per chunk of batches: the transaction verdicts (aborted data and control batches never enter the
map), one index-and-hash kernel call over the other data batches, the strategy's versions, and
one ``put_batch`` call for the keyed records at or after the first dirty offset. Kafka's full
rule lives in ``put_batch``; Kafka's latest-offset bookkeeping (after every batch reaching the
dirty range, and over offset gaps at the end of each segment) is done here with array maxima, so
when the map fills mid-chunk the latest offset is exactly what Kafka's record loop leaves.

For the timestamp and header strategies the already-clean part of the log takes part too
(``update_from_clean_prefix``): a key of the dirty range may have its best record before the first
dirty offset, and the map must hold that one, or pass 2 would keep both it and the dirty record.
Those records only update keys already in the map, so they never fill it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from cleanerd.compaction.batches import (
    collect_aborted,
    index_and_hash,
    iter_chunks,
    transaction_verdicts,
)
from cleanerd.compaction.offset_map import OffsetMap
from cleanerd.compaction.record_cache import RecordCache
from cleanerd.compaction.stats import CleanerStats
from cleanerd.compaction.strategy import StrategyConfig, compute_versions
from cleanerd.compaction.transactions import CleanedTransactionMetadata
from cleanerd.format import kernels as k
from cleanerd.format.reader import I64, U8
from cleanerd.storage.segment import LogSegment

OnChunk = Callable[[int], None]
"""Called before each chunk with its size in bytes: abort check and throttling."""

_NO_HASHES = np.zeros((0, 2), dtype=np.uint64)
_NO_RECORDS = np.zeros((0, k.RECORD_COLUMNS), dtype=np.int64)


@dataclass
class MapBuild:
    """What pass 1 found: the end of the range it covered, and which segments it fully checked."""

    end_offset: int
    full: bool
    checked: set[int] = field(default_factory=set)  # id() of segments validated from byte 0


def _data_records(arr: U8, batches: I64, rows: np.ndarray, path: str) -> tuple[U8, I64, np.ndarray]:
    if rows.size == 0:
        return arr, _NO_RECORDS, _NO_HASHES
    return index_and_hash(arr, batches[rows], path)


def _map_chunk(
    arr: U8,
    batches: I64,
    path: str,
    start: int,
    omap: OffsetMap,
    strategy: StrategyConfig,
    meta: CleanedTransactionMetadata,
    stats: CleanerStats,
    cache: RecordCache | None = None,
    segment_id: int = 0,
) -> bool:
    """Put one chunk's records into the map; True when the map filled up."""
    is_control, aborted = transaction_verdicts(meta, arr, batches, path)
    counts = batches[:, k.B_COUNT]
    lasts = batches[:, k.B_LAST_OFFSET]
    data_rows = np.flatnonzero(~is_control & ~aborted & (counts > 0))
    payload, recs, hashes = _data_records(arr, batches, data_rows, path)
    if cache is not None:
        cache.add(segment_id, batches[data_rows], recs, hashes)
    offsets = recs[:, k.R_OFFSET]
    cand = np.flatnonzero((recs[:, k.R_KEY_LEN] >= 0) & (offsets >= start))
    versions = has_version = None
    if strategy.versioned:
        versions, has_version, wrong = compute_versions(strategy, payload, recs[cand])
        stats.add(anomalous_version_headers=wrong)
    nxt, full = omap.put_batch(hashes[cand], offsets[cand], versions, has_version)
    # Kafka counts a control batch as one message and an aborted batch by its record count
    skipped = np.where(is_control, 1, np.where(aborted, counts, 0))
    if full:
        g = int(cand[nxt])  # the record that did not fit: Kafka stops right before it
        b = int(data_rows[recs[g, k.R_BATCH]])
    else:
        g, b = recs.shape[0], batches.shape[0]
    stats.index_messages_read(g + int(skipped[:b].sum()))
    stats.index_bytes_read(int(batches[:b, k.B_SIZE].sum()))
    reached = lasts[:b][lasts[:b] >= start]
    if reached.size:
        omap.update_latest_offset(max(omap.latest_offset, int(reached.max())))
    return full


def build_offset_map(
    dirty: Sequence[LogSegment],
    log_segments: Sequence[LogSegment],
    start: int,
    end: int,
    omap: OffsetMap,
    strategy: StrategyConfig,
    stats: CleanerStats,
    on_chunk: OnChunk,
    cache: RecordCache | None = None,
) -> MapBuild:
    """Fill ``omap`` from the dirty segments over [start, end); Kafka's ``buildOffsetMap``.

    ``log_segments`` is the whole log (aborted txns are looked up in every later ``.txnindex``).
    The returned end offset is ``latest_offset + 1``: ``end`` unless the map filled up.
    ``cache`` (if given) keeps what pass 1 saw of each record, for pass 2.
    """
    omap.clear()
    meta = CleanedTransactionMetadata(collect_aborted(log_segments, start, end))
    result = MapBuild(end_offset=start, full=False)
    for i, seg in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        _, position = seg.offset_index.lookup(start)
        arr = seg.view()
        path = str(seg.log_path)
        prev = seg.base_offset - 1 if position == 0 else -1
        for batches in iter_chunks(arr, path=path, start=position, prev_last_offset=prev):
            on_chunk(int(batches[:, k.B_SIZE].sum()))
            if _map_chunk(arr, batches, path, start, omap, strategy, meta, stats, cache, id(seg)):
                result.full = True
                break
        if result.full:
            break
        if position == 0:
            result.checked.add(id(seg))
        omap.update_latest_offset(next_start - 1)  # steps over offset gaps (Kafka test 44)
    if omap.latest_offset >= 0:
        result.end_offset = omap.latest_offset + 1
    return result


def update_from_clean_prefix(
    clean: Sequence[LogSegment],
    log_segments: Sequence[LogSegment],
    first_dirty: int,
    omap: OffsetMap,
    strategy: StrategyConfig,
    on_chunk: OnChunk,
) -> None:
    """Let records before ``first_dirty`` compete for the keys already in the map.

    Only for versioned strategies (under ``offset`` a dirty record always beats a clean one).
    Keys not in the map are left out, so the map never grows; the latest offset is unchanged.
    """
    if not strategy.versioned or omap.size == 0 or not clean:
        return
    meta = CleanedTransactionMetadata(
        collect_aborted(log_segments, clean[0].base_offset, first_dirty)
    )
    latest = omap.latest_offset
    max_entries = omap.max_entries
    try:
        omap.max_entries = omap.size + 1  # present keys only: no put can add an entry
        for seg in clean:
            arr = seg.view()
            path = str(seg.log_path)
            for batches in iter_chunks(arr, path=path, prev_last_offset=seg.base_offset - 1):
                on_chunk(int(batches[:, k.B_SIZE].sum()))
                is_control, aborted = transaction_verdicts(meta, arr, batches, path)
                counts = batches[:, k.B_COUNT]
                rows = np.flatnonzero(~is_control & ~aborted & (counts > 0))
                payload, recs, hashes = _data_records(arr, batches, rows, path)
                offsets = recs[:, k.R_OFFSET]
                cand = np.flatnonzero((recs[:, k.R_KEY_LEN] >= 0) & (offsets < first_dirty))
                if cand.size == 0:
                    continue
                found, _, _ = omap.get(hashes[cand])
                idx = cand[found >= 0]
                if idx.size == 0:
                    continue
                versions, has_version, _ = compute_versions(strategy, payload, recs[idx])
                omap.put_batch(hashes[idx], offsets[idx], versions, has_version)
    finally:
        omap.max_entries = max_entries
        omap.update_latest_offset(latest)
