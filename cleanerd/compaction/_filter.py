"""Pass 2 decisions for one chunk of batches (docs/kafka-format.md §4.8, §4.9, §4.11: ``filterTo``).

Kafka decides batch by batch and record by record; here the batch rules are numpy masks over the
chunk's batch matrix and the record rule is one kernel call (``fused.decide_records``):

* batch: the transaction verdict (``transaction_verdicts``, the only per-batch Python, and only
  for transactional and control batches), then ``checkBatchRetention``'s modes as masks:
  RETAIN_EMPTY for a producer's last batch or the batch ending at the cleaning round's upper
  bound, DELETE for discarded records, else DELETE_EMPTY;
* record: beyond the map's latest offset -> keep; control record -> keep; unkeyed -> drop and
  count; else the map's verdict (``OffsetMap.should_retain``'s rule, or the winner flag pass 1
  left in the record cache) and, for tombstones, the batch's delete horizon;
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

from cleanerd.compaction import _record_kernels as fused
from cleanerd.compaction._batches import Bools, index_and_hash, transaction_verdicts
from cleanerd.compaction._offset_map import OffsetMap
from cleanerd.compaction._rebuild import NO_HORIZON
from cleanerd.compaction._record_cache import RecordCache
from cleanerd.compaction._record_kernels import FLAG_KEYED, FLAG_TOMBSTONE
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._strategy import compute_versions
from cleanerd.compaction._transactions import CleanedTransactionMetadata, LastRecord
from cleanerd.format import ATTR_DELETE_HORIZON, I64, LONG_MAX, U8, index_batches
from cleanerd.format import kernels as k
from cleanerd.topics import StrategyConfig


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
        """Whether each batch holds its (active) producer's latest state (kafka-format.md §4.8)."""
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
    # tombstones in batches reaching this offset stay whatever their horizon: a KIP-630 snapshot
    # ending below them would come back to life in a replay without them (LONG_MAX: no snapshot)
    tombstones_kept_from: int = LONG_MAX


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
_NO_ROWS = np.zeros(0, dtype=np.intp)
_NO_I64 = np.zeros(0, dtype=np.int64)
_NO_BOOL = np.zeros(0, dtype=np.bool_)


def decide_chunk(
    ctx: PassContext,
    meta: CleanedTransactionMetadata,
    arr: U8,
    batches: I64,
    path: str,
    stats: CleanerStats,
    cache: RecordCache | None = None,
    first: I64 | None = None,
) -> ChunkDecision:
    """Kafka's batch and record decisions for one chunk; updates the read counters.

    ``first`` gives each batch's first record in ``cache`` (-1: not cached): those batches are
    decided from pass 1's view of their records without reading them; of those, only the ones
    to rebuild are read, at the end. The record rule runs in one kernel (``fused``).
    """
    nb = batches.shape[0]
    attrs = batches[:, k.B_ATTRIBUTES]
    counts = batches[:, k.B_COUNT]
    is_control, can_discard = transaction_verdicts(meta, arr, batches, path)
    has_horizon = (attrs & ATTR_DELETE_HORIZON) != 0
    horizon = np.where(has_horizon, batches[:, k.B_BASE_TIMESTAMP], LONG_MAX)
    # the horizon the record rule may act on: none for batches a snapshot still needs
    expirable = has_horizon & (batches[:, k.B_LAST_OFFSET] < ctx.tombstones_kept_from)
    discard_records = np.where(
        is_control, can_discard & has_horizon & (horizon <= ctx.now_ms), can_discard
    )
    retain_empty = ctx.producers.is_last_record(batches, is_control) | (
        batches[:, k.B_LAST_OFFSET] + 1 == ctx.upper_bound
    )
    delete = ~retain_empty & discard_records
    marker_for_empty_txn = can_discard & is_control

    # the records of the batches that are looked at: from pass 1's cache, or read now
    look = ~delete & ~discard_records & (counts > 0)
    use_cache = cache is not None and first is not None and not ctx.strategy.versioned
    hit = look & (first >= 0) if use_cache and first is not None else np.zeros(nb, np.bool_)
    kept = np.zeros(nb, dtype=np.int64)
    kept_tomb = np.zeros(nb, dtype=np.bool_)
    tab = ctx.omap.table
    latest = ctx.omap.latest_offset
    invalid = expired = superseded = 0
    if cache is not None and first is not None and hit.any():
        invalid, expired, superseded = fused.decide_records(
            tab, False, latest, ctx.now_ms, cache.hashes, cache.offsets, cache.flags,
            _NO_I64, _NO_BOOL, first, counts, np.flatnonzero(hit), is_control, expirable,
            horizon, cache.keep, kept, kept_tomb, cache.winners_from,
        )  # fmt: skip
    fresh = np.flatnonzero(look & ~hit)
    fresh_first = np.full(nb, -1, dtype=np.int64)
    if fresh.size:
        payload, recs, hashes = index_and_hash(arr, batches[fresh], path)
        fresh_rb = fresh[recs[:, k.R_BATCH]]
        fresh_first[fresh] = np.cumsum(counts[fresh]) - counts[fresh]
        flags = np.where(recs[:, k.R_KEY_LEN] >= 0, FLAG_KEYED, 0) | np.where(
            recs[:, k.R_VALUE_LEN] < 0, FLAG_TOMBSTONE, 0
        )
        versions: Any = _NO_I64
        has_version: Any = _NO_BOOL
        if ctx.strategy.versioned:
            versions, has_version, _ = compute_versions(ctx.strategy, payload, recs)
        keep = np.empty(recs.shape[0], dtype=np.bool_)
        more_invalid, more_expired, more_superseded = fused.decide_records(
            tab, ctx.strategy.versioned, latest, ctx.now_ms, hashes,
            np.ascontiguousarray(recs[:, k.R_OFFSET]), flags.astype(np.uint8),
            np.ascontiguousarray(versions, dtype=np.int64),
            np.ascontiguousarray(has_version, dtype=np.bool_), fresh_first, counts, fresh,
            is_control, expirable, horizon, keep, kept, kept_tomb, -1,
        )  # fmt: skip
        invalid += more_invalid
        expired += more_expired
        superseded += more_superseded
    else:
        payload, recs, fresh_rb, keep = arr, _NO_RECORDS, _NO_ROWS, _NO_BOOL

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
    stats.invalid_message(invalid)
    aborted_data = discard_records & ~is_control
    written = (action == Action.COPY) | (action == Action.REBUILD)
    dropped_markers = is_control & (counts > 0) & ~written
    cached_dropped = int((action[hit] == Action.DROP).sum())
    stats.add(
        tombstones_expired=expired,
        tombstones_superseded=superseded,
        markers_removed=int(dropped_markers.sum()),
        aborted_records_removed=int(counts[aborted_data].sum()),
        batches_dropped_without_decompressing=int((delete | discard_records).sum())
        + cached_dropped,
    )
    rebuild = np.flatnonzero(action == Action.REBUILD)
    if cache is not None and first is not None and hit[rebuild].any():
        # read the batches to rebuild; their verdicts come batch by batch, in row order
        n = counts[rebuild]
        total = int(n.sum())
        cached = np.repeat(hit[rebuild], n)
        src = np.where(hit[rebuild], first[rebuild], fresh_first[rebuild])
        idx = np.repeat(src - (np.cumsum(n) - n), n) + np.arange(total)
        merged = np.empty(total, dtype=np.bool_)
        merged[cached] = cache.keep[idx[cached]]
        merged[~cached] = keep[idx[~cached]]
        payload, recs = index_batches(arr, batches[rebuild], path=path)
        fresh_rb = rebuild[recs[:, k.R_BATCH]]
        keep = merged
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
