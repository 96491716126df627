"""Pass 2 decisions for one chunk of batches (reference 3.9, 3.10, 3.12: ``filterTo``).

Kafka decides batch by batch and record by record; here the same rules are numpy masks over the
chunk's batch matrix and record index:

* batch: the transaction verdict (``transaction_verdicts``, the only per-batch Python, and only
  for transactional and control batches), then ``checkBatchRetention``'s modes as masks:
  RETAIN_EMPTY for a producer's last batch or the batch ending at the cleaning round's upper
  bound, DELETE for discarded records, else DELETE_EMPTY;
* record: beyond the map's latest offset -> keep; control record -> keep; unkeyed -> drop and
  count; else the map's verdict (one vectorised ``should_retain``) and, for tombstones, the
  batch's delete horizon;
* output per batch: DROP, COPY (every record kept and no horizon to stamp: the bytes as they
  are), REBUILD (some records dropped, or a horizon to stamp) or EMPTY (a header-only batch).

Batches deleted whole (aborted data, expired markers) are never decompressed, nor are the
batches pass 1 already read (``record_cache``) unless they must be rebuilt.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.compaction.batches import Bools, index_and_hash, transaction_verdicts
from cleanerd.compaction.offset_map import OffsetMap
from cleanerd.compaction.rebuild import NO_HORIZON
from cleanerd.compaction.record_cache import RecordCache
from cleanerd.compaction.stats import CleanerStats
from cleanerd.compaction.strategy import StrategyConfig, compute_versions
from cleanerd.compaction.transactions import CleanedTransactionMetadata, LastRecord
from cleanerd.format import kernels as k
from cleanerd.format.header import ATTR_DELETE_HORIZON
from cleanerd.format.reader import I64, U8, index_batches

LONG_MAX = 2**63 - 1


class Action(enum.IntEnum):
    DROP = 0
    COPY = 1
    REBUILD = 2
    EMPTY = 3


class ProducerTable:
    """Kafka's ``lastRecordsOfActiveProducers`` as sorted arrays, for a vectorised lookup."""

    def __init__(self, last_records: Mapping[int, LastRecord]) -> None:
        pids = sorted(last_records)
        self.pids = np.array(pids, dtype=np.int64)
        self.last_offsets = np.array(
            [-1 if last_records[p][0] is None else last_records[p][0] for p in pids],
            dtype=np.int64,
        )
        self.epochs = np.array([last_records[p][1] for p in pids], dtype=np.int64)

    def is_last_record(self, batches: I64, is_control: Bools) -> Bools:
        """Whether each batch holds its (active) producer's latest state (reference 3.9)."""
        n = self.pids.shape[0]
        pid = batches[:, k.B_PRODUCER_ID]
        if n == 0:
            return np.zeros(batches.shape[0], dtype=np.bool_)
        idx = np.minimum(np.searchsorted(self.pids, pid), n - 1)
        found = (pid >= 0) & (self.pids[idx] == pid)
        last = self.last_offsets[idx]
        by_offset = batches[:, k.B_LAST_OFFSET] == last
        by_epoch = is_control & (batches[:, k.B_PRODUCER_EPOCH] == self.epochs[idx])
        result: Bools = found & np.where(last >= 0, by_offset, by_epoch)
        return result


@dataclass(frozen=True)
class PassContext:
    """What stays fixed for a whole pass 2."""

    omap: OffsetMap
    strategy: StrategyConfig
    now_ms: int
    new_horizon_ms: int  # now + delete.retention.ms: stamped on batches that need one
    upper_bound: int  # first uncleanable offset (KAFKA-17076)
    producers: ProducerTable


@dataclass
class ChunkDecision:
    """Per batch: its action and kept-record count; the records of the batches to rebuild."""

    batches: I64
    action: npt.NDArray[np.int8]
    kept: npt.NDArray[np.int64]  # kept records per batch
    stamp_horizon: I64  # horizon to write into a REBUILD batch, NO_HORIZON for none
    payload: U8
    records: I64  # an index of (at least) the REBUILD batches
    record_batch: npt.NDArray[np.intp]  # chunk row of each of those records
    keep: Bools


_NO_RECORDS = np.zeros((0, k.RECORD_COLUMNS), dtype=np.int64)
_NO_HASHES = np.zeros((0, 2), dtype=np.uint64)
_NO_ROWS = np.zeros(0, dtype=np.intp)


def _per_batch(rb: npt.NDArray[np.intp], mask: Bools, nb: int) -> npt.NDArray[np.int64]:
    """Count of ``mask`` records per batch row."""
    return np.bincount(rb[mask], minlength=nb).astype(np.int64)


def decide_chunk(
    ctx: PassContext,
    meta: CleanedTransactionMetadata,
    arr: U8,
    batches: I64,
    path: str,
    stats: CleanerStats,
    cache: RecordCache | None = None,
    segment_id: int = 0,
) -> ChunkDecision:
    """Kafka's batch and record decisions for one chunk, as masks; updates the read counters.

    Batches found in ``cache`` (pass 1's view of their records) are decided without reading
    them; of those, only the ones to rebuild are read, at the end.
    """
    nb = batches.shape[0]
    attrs = batches[:, k.B_ATTRIBUTES]
    counts = batches[:, k.B_COUNT]
    is_control, can_discard = transaction_verdicts(meta, arr, batches, path)
    has_horizon = (attrs & ATTR_DELETE_HORIZON) != 0
    horizon = np.where(has_horizon, batches[:, k.B_BASE_TIMESTAMP], LONG_MAX)
    discard_records = np.where(
        is_control, can_discard & has_horizon & (horizon <= ctx.now_ms), can_discard
    )
    retain_empty = ctx.producers.is_last_record(batches, is_control) | (
        batches[:, k.B_LAST_OFFSET] + 1 == ctx.upper_bound
    )
    delete = ~retain_empty & discard_records
    marker_for_empty_txn = can_discard & is_control

    # the records of the batches that are looked at: from pass 1's cache, or read now
    rows = np.flatnonzero(~delete & ~discard_records & (counts > 0))
    hit = np.zeros(rows.size, dtype=np.bool_)
    cached = None
    if cache is not None and not ctx.strategy.versioned:
        hit, cached = cache.lookup(segment_id, batches, rows)
    fresh = rows[~hit]
    if fresh.size:
        payload, recs, fresh_hashes = index_and_hash(arr, batches[fresh], path)
        fresh_rb = fresh[recs[:, k.R_BATCH]]
    else:
        payload, recs, fresh_hashes, fresh_rb = arr, _NO_RECORDS, _NO_HASHES, _NO_ROWS
    if cached is None:
        rb, hashes, offsets = fresh_rb, fresh_hashes, recs[:, k.R_OFFSET]
        keyed = recs[:, k.R_KEY_LEN] >= 0
        tomb = recs[:, k.R_VALUE_LEN] < 0
    else:
        rb = np.concatenate((cached.batch, fresh_rb))
        hashes = np.concatenate((cached.hashes, fresh_hashes))
        offsets = np.concatenate((cached.offsets, recs[:, k.R_OFFSET]))
        keyed = np.concatenate((cached.keyed, recs[:, k.R_KEY_LEN] >= 0))
        tomb = np.concatenate((cached.tombstone, recs[:, k.R_VALUE_LEN] < 0))
    in_range = offsets <= ctx.omap.latest_offset
    data = ~is_control[rb]
    check = np.flatnonzero(data & in_range & keyed)
    wins = np.ones(rb.size, dtype=np.bool_)
    if check.size:
        versions: Any = None
        has_version: Any = None
        if ctx.strategy.versioned:  # never cached: the records are ``recs``
            versions, has_version, _ = compute_versions(ctx.strategy, payload, recs[check])
        wins[check] = ctx.omap.should_retain(hashes[check], offsets[check], versions, has_version)
    deletes_kept = ~has_horizon[rb] | (ctx.now_ms < horizon[rb])
    keep = ~data | ~in_range | (keyed & wins & (~tomb | deletes_kept))

    kept = _per_batch(rb, keep, nb)
    kept_tomb = _per_batch(rb, keep & tomb, nb) > 0
    need_horizon = (kept_tomb | marker_for_empty_txn) & ~has_horizon
    action = np.full(nb, Action.DROP, dtype=np.int8)
    some = kept > 0
    action[some & (kept == counts) & ~need_horizon] = Action.COPY
    action[some & ((kept != counts) | need_horizon)] = Action.REBUILD
    action[~some & retain_empty] = Action.EMPTY
    action[delete] = Action.DROP
    stamp = np.where(need_horizon, ctx.new_horizon_ms, np.where(has_horizon, horizon, NO_HORIZON))

    # Kafka's counters, plus cleanerd's
    sizes = batches[:, k.B_SIZE]
    stats.read_messages(int(counts[~delete].sum()), int(sizes.sum()))
    stats.invalid_message(int((data & in_range & ~keyed).sum()))
    aborted_data = discard_records & ~is_control
    written = (action == Action.COPY) | (action == Action.REBUILD)
    dropped_markers = is_control & (counts > 0) & ~written
    cached_dropped = int((action[rows[hit]] == Action.DROP).sum())
    stats.add(
        tombstones_removed=int((data & tomb & ~keep).sum()),
        markers_removed=int(dropped_markers.sum()),
        aborted_records_removed=int(counts[aborted_data].sum()),
        batches_dropped_without_decompressing=int((delete | discard_records).sum())
        + cached_dropped,
    )
    if cached is not None:
        # read the cached batches to rebuild; their records come batch by batch, as in ``keep``
        rebuild = np.flatnonzero(action == Action.REBUILD)
        order = np.argsort(rb, kind="stable")
        wanted = np.isin(rb[order], rebuild)
        keep = keep[order][wanted]
        if rebuild.size:
            payload, recs = index_batches(arr, batches[rebuild], path=path)
            fresh_rb = rebuild[recs[:, k.R_BATCH]]
        else:
            payload, recs, fresh_rb = arr, _NO_RECORDS, _NO_ROWS
        if keep.size != recs.shape[0]:  # pragma: no cover - pass 1 read these same bytes
            raise AssertionError(f"{path}: pass 1 and pass 2 disagree on the record count")
    return ChunkDecision(
        batches=batches,
        action=action,
        kept=kept,
        stamp_horizon=stamp.astype(np.int64),
        payload=payload,
        records=recs,
        record_batch=fresh_rb,
        keep=keep,
    )
