"""Pass 2 decisions for one chunk of batches (docs/kafka-format.md §4.8, §4.9, §4.11: ``filterTo``).

Kafka decides batch by batch and record by record; here the batch rules are numpy masks over the
chunk's batch matrix and the record rule is one kernel call (``decide_records``):

* batch: the transaction verdict (``transaction_verdicts``, the only per-batch Python, and only
  for transactional and control batches), then ``checkBatchRetention``'s modes as masks:
  RETAIN_EMPTY for a producer's last batch or the batch ending at the high watermark
  (KAFKA-17076 as KAFKA-20452 narrowed it), DELETE for discarded records, else DELETE_EMPTY;
* record: beyond the map's latest offset -> keep; control record -> keep; unkeyed -> drop and
  count; else the map's verdict (``OffsetMap.should_retain``'s rule, or the winner flag pass 1
  left in the record cache) and, for tombstones, the batch's delete horizon;
* output per batch: DROP, COPY (every record kept and no horizon to stamp: the bytes as they
  are), REBUILD (some records dropped, or a horizon to stamp) or EMPTY (a header-only batch);
* legacy messages (magic 0 and 1, §2.8): no horizon; their tombstones follow the source
  segment's mtime against Kafka's ``legacyDeleteHorizonMs`` (``legacy_rule``), and one that
  must stay empty stops the clean, as in Kafka (``refuse_empty_legacy``).

Batches deleted whole (aborted data, expired markers) are never decompressed, nor are the
batches pass 1 already read (``_offset_map._record_cache``) unless they must be rebuilt.

``decide_records`` reaches ``OffsetMap.table`` through a raw pointer (``kernels.data_ptr``) and
probes it with ``_offset_map._table``'s functions, as pass 1's kernels do (``_offset_map._fill``
says why), so its verdict is ``OffsetMap.should_retain``'s.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.compaction._batches import Bools, index_and_hash, transaction_verdicts
from cleanerd.compaction._cleaned._rebuild import NO_HORIZON
from cleanerd.compaction._offset_map._map import OffsetMap
from cleanerd.compaction._offset_map._record_cache import (
    FLAG_KEYED,
    FLAG_TOMBSTONE,
    FLAG_WINNER,
    RecordCache,
)
from cleanerd.compaction._offset_map._table import normalize, retains
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._strategy import compute_versions
from cleanerd.compaction._transactions import CleanedTransactionMetadata, LastRecord
from cleanerd.format import (
    ATTR_DELETE_HORIZON,
    I64,
    LONG_MAX,
    LONG_MIN,
    MIXED_MAGIC,
    U8,
    data_ptr as _data_ptr,
    index_batches,
    is_legacy,
    kernels as k,
    legacy_rows,
)
from cleanerd.storage import LogSegment
from cleanerd.topics import StrategyConfig

Arr = npt.NDArray[Any]


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
    # the batch ending here stays, as an empty header if nothing else, so the log never ends below
    # its high watermark (KAFKA-17076 as KAFKA-20452 narrowed it; docs/kafka-format.md §4.11)
    high_watermark: int
    producers: ProducerTable
    # tombstones in batches reaching this offset stay whatever their horizon: a KIP-630 snapshot
    # ending below them would come back to life in a replay without them (LONG_MAX: no snapshot)
    tombstones_kept_from: int = LONG_MAX
    # Kafka's legacyDeleteHorizonMs (docs/kafka-format.md §4.9): tombstones of magic 0/1
    # messages stay in a segment modified after it; 0 (Kafka's value when nothing is clean yet)
    # keeps them all
    legacy_delete_horizon_ms: int = 0


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
_NO_HASHES = np.zeros((0, 2), dtype=np.uint64)


@kernel(nogil=True)
def decide_records(
    tab: Arr,
    versioned: bool,
    latest_offset: int,
    now_ms: int,
    hashes: Arr,
    offsets: Arr,
    flags: Arr,
    versions: Arr,
    has_version: Arr,
    first: Arr,
    counts: Arr,
    rows: Arr,
    is_control: Arr,
    has_horizon: Arr,
    horizon: Arr,
    keep: Arr,
    kept: Arr,
    kept_tombstone: Arr,
    winners_from: int,
) -> tuple[int, int, int]:
    """Pass 2's record rule for the records of batch ``rows`` (docs/kafka-format.md §4.8, §4.9).

    Batch ``b``'s records are ``first[b] .. first[b] + counts[b] - 1`` of the record arrays
    (``versions``/``has_version`` are read only when ``versioned``). A record is kept when its
    batch is a control batch, when it lies beyond ``latest_offset``, or when it is keyed, wins
    its key in the map (``OffsetMap.should_retain``) and, if a tombstone, its batch's delete
    horizon has not passed ``now_ms``. Writes ``keep`` per record and, per batch, ``kept`` (the
    count) and ``kept_tombstone``; returns ``(unkeyed records in range, tombstones expired,
    tombstones superseded)``: a tombstone that wins its key but whose batch's delete horizon has
    passed (delete.retention.ms) is expired; one beaten by a newer record of its key superseded.

    Records at or after ``winners_from`` (-1: none) carry ``FLAG_WINNER`` from ``mark_winners``
    and are decided by it without a map lookup (``hashes`` may leave them out): every keyed
    record of the map's range at or after the first dirty offset was put into the map in offset
    order, so its key is present and ``offset >= found`` holds exactly for the last one, the one
    the map holds. ``offsets``, ``latest_offset`` and ``winners_from`` may all be relative to
    one base (the record cache's, whose offsets are uint32 past its ``base``).
    """
    t = _data_ptr(tab)
    slots = tab.shape[0]
    width = tab.shape[1]
    n = offsets.shape[0]
    nb = min(
        first.shape[0],
        counts.shape[0],
        is_control.shape[0],
        has_horizon.shape[0],
        horizon.shape[0],
        kept.shape[0],
        kept_tombstone.shape[0],
    )
    if hashes.shape[1] != 2 or width < (4 if versioned else 3):
        raise ValueError("decide_records: wrong hash or table shape")
    for j in range(rows.shape[0]):
        if not 0 <= rows[j] < nb:
            raise ValueError("decide_records: a batch row lies outside the batch columns")
    invalid = 0
    expired = 0
    superseded = 0
    for j in range(rows.shape[0]):
        b = rows[j]
        lo = first[b]
        hi = lo + counts[b]
        if lo < 0 or hi > n or hi > keep.shape[0] or hi > flags.shape[0]:
            raise ValueError("decide_records: a batch's records lie outside the arrays")
        if versioned and (hi > versions.shape[0] or hi > has_version.shape[0]):
            raise ValueError("decide_records: versions missing")
        control = is_control[b]
        deletes_kept = not has_horizon[b] or now_ms < horizon[b]
        n_kept = 0
        tomb_kept = False
        for i in range(lo, hi):
            f = flags[i]
            keyed = (f & FLAG_KEYED) != 0
            tomb = (f & FLAG_TOMBSTONE) != 0
            win = True
            if control or offsets[i] > latest_offset:
                keep_it = True
            elif not keyed:
                invalid += 1
                keep_it = False
            elif 0 <= winners_from <= offsets[i]:
                win = (f & FLAG_WINNER) != 0
                keep_it = win and (not tomb or deletes_kept)
            else:
                if i >= hashes.shape[0]:
                    raise ValueError("decide_records: a record to look up has no hash")
                h1, h2 = normalize(hashes[i, 0], hashes[i, 1])
                if versioned:
                    v, has = versions[i], has_version[i]
                else:
                    v, has = 0, False
                win = retains(t, width, slots, h1, h2, offsets[i], v, has, versioned)
                keep_it = win and (not tomb or deletes_kept)
            keep[i] = keep_it
            if keep_it:
                n_kept += 1
                if tomb:
                    tomb_kept = True
            elif tomb and keyed and not control:
                if win:
                    expired += 1
                else:
                    superseded += 1
        kept[b] = n_kept
        kept_tombstone[b] = tomb_kept
    return invalid, expired, superseded


def decide_chunk(
    ctx: PassContext,
    meta: CleanedTransactionMetadata,
    arr: U8,
    batches: I64,
    path: str,
    stats: CleanerStats,
    cache: RecordCache | None = None,
    first: I64 | None = None,
    segment_modified_ms: int | None = None,
) -> ChunkDecision:
    """Kafka's batch and record decisions for one chunk; updates the read counters.

    ``first`` gives each batch's first record in ``cache`` (-1: not cached): those batches are
    decided from pass 1's view of their records without reading them; of those, only the ones
    to rebuild are read, at the end. The record rule runs in one kernel (``decide_records``).
    ``segment_modified_ms``: the source segment's mtime, for the tombstones of legacy messages
    (``legacy_rule``; None: kept).
    """
    nb = batches.shape[0]
    attrs = batches[:, k.B_ATTRIBUTES]
    counts = batches[:, k.B_COUNT]
    is_control, can_discard = transaction_verdicts(meta, arr, batches, path)
    has_horizon = (attrs & ATTR_DELETE_HORIZON) != 0
    horizon = np.where(has_horizon, batches[:, k.B_BASE_TIMESTAMP], LONG_MAX)
    # the horizon the record rule may act on: none for batches a snapshot still needs
    expirable = has_horizon & (batches[:, k.B_LAST_OFFSET] < ctx.tombstones_kept_from)
    old = legacy_rows(batches) if is_legacy(batches) else None
    if old is not None:
        expirable, horizon = legacy_rule(ctx, batches, old, expirable, horizon, segment_modified_ms)
    discard_records = np.where(
        is_control, can_discard & has_horizon & (horizon <= ctx.now_ms), can_discard
    )
    retain_empty = ctx.producers.is_last_record(batches, is_control) | (
        batches[:, k.B_LAST_OFFSET] + 1 == ctx.high_watermark
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
        # every cached record is in the dirty range and flagged (``RecordCache``): no lookups
        invalid, expired, superseded = decide_records(
            tab, False, latest - cache.base, ctx.now_ms, _NO_HASHES, cache.offsets, cache.flags,
            _NO_I64, _NO_BOOL, first, counts, np.flatnonzero(hit), is_control, expirable,
            horizon, cache.keep, kept, kept_tomb, 0,
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
        more_invalid, more_expired, more_superseded = decide_records(
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
    if old is not None:
        # no delete horizon before magic 2; a wrapper holding messages of another magic is
        # written again, whole or not (KAFKA-4298; MemoryRecords.filterTo)
        need_horizon = (need_horizon & ~old) | (old & ((attrs & MIXED_MAGIC) != 0))
    action = np.full(nb, Action.DROP, dtype=np.int8)
    some = kept > 0
    action[some & (kept == counts) & ~need_horizon] = Action.COPY
    action[some & ((kept != counts) | need_horizon)] = Action.REBUILD
    action[~some & retain_empty] = Action.EMPTY
    action[delete] = Action.DROP
    stamp = np.where(need_horizon, ctx.new_horizon_ms, np.where(has_horizon, horizon, NO_HORIZON))
    if old is not None:
        refuse_empty_legacy(batches, old & (action == Action.EMPTY), path)

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
        batch_records_deleted=int(counts[delete].sum()),
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


# --- legacy messages (magic 0 and 1) --------------------------------------------------------------


class LegacyEmptyBatchError(RuntimeError):
    """Kafka's cleaner stops here too: an emptied legacy message it must keep (the one ending
    at the high watermark) has no empty form before magic 2 (``MemoryRecords.filterTo`` throws
    IllegalStateException)."""


def legacy_delete_horizon(
    segments: Sequence[LogSegment], first_dirty: int, delete_retention_ms: int
) -> int:
    """Kafka's ``legacyDeleteHorizonMs`` (docs/kafka-format.md §4.9): the mtime of the last
    segment of ``logSegments(0, firstDirtyOffset)`` (``segments`` in offset order) less
    delete.retention.ms; 0 when there is none."""
    below = [s for s in segments if s.base_offset < first_dirty]
    return below[-1].last_modified_ms - delete_retention_ms if below else 0


def legacy_rule(
    ctx: PassContext,
    batches: I64,
    old: Bools,
    expirable: Bools,
    horizon: I64,
    segment_modified_ms: int | None,
) -> tuple[Bools, I64]:
    """The tombstone rule for legacy rows, as ``expirable`` and ``horizon`` say it to
    ``decide_records``: no delete horizon; a tombstone goes only when its segment was modified
    at or before the legacy horizon (Kafka's ``retainLegacyDeletesAndTxnMarkers``), and, as
    for v2, not while a snapshot needs it."""
    retain = segment_modified_ms is None or segment_modified_ms > ctx.legacy_delete_horizon_ms
    goes = old & (not retain) & (batches[:, k.B_LAST_OFFSET] < ctx.tombstones_kept_from)
    return np.where(old, goes, expirable), np.where(old, LONG_MIN, horizon)


def refuse_empty_legacy(batches: I64, empty: Bools, path: str) -> None:
    if empty.any():
        row = batches[int(np.argmax(empty))]
        raise LegacyEmptyBatchError(
            f"{path} at byte {int(row[k.B_POS])}: the legacy (magic {int(row[k.B_MAGIC])})"
            f" message ending at offset {int(row[k.B_LAST_OFFSET])} loses every record but must"
            " be kept, as it ends at the high watermark; magic 0 and 1 have no empty batch, so"
            " Kafka's cleaner stops here too (IllegalStateException)"
        )
