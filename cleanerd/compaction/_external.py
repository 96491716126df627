"""One cleaning pass whose offset map is filled elsewhere: the hook for distributed engines.

``Cleaner.clean`` builds its map in pass 1 and then filters every segment group in one process.
A distributed driver (``cleanerd.spark``) instead finds each key's winner with a shuffle and
filters the groups in parallel, each against a small map holding only the winners of its keys.
For its output to be the local engine's byte for byte it needs the very pieces pass 2 uses, in
the same order; they are here so that nothing of the cleaner's is copied:

* ``pass_groups``: the source segments and Kafka's grouping of them, as ``Cleaner.clean`` has;
* ``transaction_states``: the pass's transaction state at the start of each group (one
  sequential replay of the transactional and control batches, the only state that crosses
  groups), so a group can be filtered on its own;
* ``winner_map``: an ``OffsetMap`` holding given winners exactly as pass 1 would leave them;
* ``_cleaned._group_writer.write_group`` (``Cleaner``'s own group loop) into ``.cleaned`` segments
  anywhere (a staging dir; ``CleanedOutput`` says where), and ``swap_group``: the swap of a
  finished group's segments, empty replacements included.

``trust_txn_indexes`` (the cleaner's check before a pass) and ``_cleaned._group_swap.replace_group``
are public in their modules. Like ``Cleaner.clean``, none of this holds the partition's writer lock
across a pass: writers append to the active segment and roll meanwhile (the writer contract), which
changes none of the inactive segments a pass reads; ``swap_group`` takes the lock for its swap
(``PartitionLog.replace_segments``), which refuses segments that are not inactive any more.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from cleanerd.compaction._batches import fold_producers, segments_between, transaction_verdicts
from cleanerd.compaction._cleaned._group_swap import replace_group
from cleanerd.compaction._cleaned._group_writer import add_segment_aborted
from cleanerd.compaction._cleaner import CleanResult, segment_sizes
from cleanerd.compaction._cleaning_plan import CleaningPlan
from cleanerd.compaction._filter import PassContext, ProducerTable
from cleanerd.compaction._grouping import group_items
from cleanerd.compaction._offset_map._map import DEFAULT_LOAD_FACTOR, OffsetMap, slot_bytes
from cleanerd.compaction._throttle import Throttler
from cleanerd.compaction._transactions import (
    CleanedTransactionMetadata,
    LastRecord,
    last_records_of_active_producers,
)
from cleanerd.format import LONG_MAX
from cleanerd.storage import AbortedTxn, LogSegment, PartitionLog, iter_chunks, oldest_snapshot_end
from cleanerd.topics import StrategyConfig, TopicCleanerConfig

Arr = npt.NDArray[Any]


class PassCleaner(Protocol):
    """What the one-shot driver needs of a cleaner: ``Cleaner.clean``'s signature."""

    def clean(
        self,
        log: PartitionLog,
        plan: CleaningPlan,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        abort_check: Callable[[], bool] = ...,
    ) -> CleanResult: ...


PassFactory = Callable[[Throttler], PassCleaner]
"""Makes the cleaner of a one-shot run from the run's byte-counting throttler."""


def pass_groups(log: PartitionLog, end: int, upper: int) -> list[list[LogSegment]]:
    """Pass 2's groups of a pass covering offsets below ``end`` (``upper``: the round's first
    uncleanable offset), exactly as ``Cleaner.clean`` groups them."""
    sources = segments_between(log.segments[:-1], -1, end)
    sizes = [segment_sizes(s) for s in sources]
    return group_items(
        sources, sizes, log.config.segment_bytes, log.config.segment_index_bytes, upper
    )


def last_records(
    log: PartitionLog, config: TopicCleanerConfig, now_ms: int
) -> dict[int, LastRecord]:
    """The producers whose last batch must survive (as ``Cleaner`` computes them per pass)."""
    state = log.producer_state(lambda seg, into: fold_producers(seg, into, None))
    return last_records_of_active_producers(state, now_ms, config.producer_id_expiration_ms)


def pass_context(
    omap: OffsetMap,
    config: TopicCleanerConfig,
    strategy: StrategyConfig,
    now_ms: int,
    high_watermark: int,
    producers: Mapping[int, LastRecord],
    tombstones_kept_from: int = LONG_MAX,
    legacy_delete_horizon_ms: int = 0,
) -> PassContext:
    """Pass 2's fixed context, as ``Cleaner`` builds it (``high_watermark``: the log's, read
    once for the pass, ``PartitionLog.high_watermark``; ``tombstones_kept_from``: the oldest
    snapshot's end, see ``tombstone_floor``; ``legacy_delete_horizon_ms``: see
    ``legacy_delete_horizon``)."""
    return PassContext(
        omap=omap,
        strategy=strategy,
        now_ms=now_ms,
        new_horizon_ms=min(now_ms + config.delete_retention_ms, LONG_MAX),
        high_watermark=high_watermark,
        producers=ProducerTable(producers),
        tombstones_kept_from=tombstones_kept_from,
        legacy_delete_horizon_ms=legacy_delete_horizon_ms,
    )


def tombstone_floor(log: PartitionLog) -> int:
    """Where tombstones start to be kept whatever their horizon: the oldest KIP-630 snapshot's
    end (``Cleaner.clean`` does the same), LONG_MAX without snapshots."""
    floor = oldest_snapshot_end(log.directory)
    return LONG_MAX if floor is None else floor


TxnState = tuple[set[int], dict[int, Any], list[AbortedTxn]]
"""A ``CleanedTransactionMetadata`` without its output index (the ongoing transactions and the
queued aborted ones, in order): picklable, for a remote task."""


def _state(meta: CleanedTransactionMetadata) -> TxnState:
    return copy.deepcopy((meta.ongoing_committed, meta.ongoing_aborted, meta.pending))


def restore_state(state: TxnState) -> CleanedTransactionMetadata:
    """The transaction state ``transaction_states`` captured, ready to go on from there: the
    queued transactions are queued again in their order, so they are consumed as they would
    have been (equal first offsets in the order they were added, later ones after them)."""
    committed, aborted, pending = copy.deepcopy(state)
    meta = CleanedTransactionMetadata(pending)
    meta.ongoing_committed, meta.ongoing_aborted = committed, aborted
    return meta


def transaction_states(
    segments: Sequence[LogSegment], groups: Sequence[Sequence[LogSegment]]
) -> list[TxnState]:
    """Pass 2's transaction state at the start of each group: the verdict calls ``write_group``
    makes, replayed in order over batch headers (control keys only are parsed)."""
    meta = CleanedTransactionMetadata()
    states: list[TxnState] = []
    for group in groups:
        states.append(_state(meta))
        for i, seg in enumerate(group):
            add_segment_aborted(meta, segments, group, i)
            arr = seg.view()
            for batches in iter_chunks(
                arr, path=str(seg.log_path), prev_last_offset=seg.base_offset - 1, check_crc=False
            ):
                transaction_verdicts(meta, arr, batches, str(seg.log_path))
    return states


def winner_map(
    strategy: StrategyConfig,
    hashes: Arr,
    offsets: Arr,
    versions: Arr,
    has_version: Arr,
    latest_offset: int,
) -> OffsetMap:
    """A map holding one winner per key (hash -> offset, version) and ``latest_offset``, as
    pass 1 leaves it when every winner fits: pass 2 asks it nothing else."""
    n = int(offsets.shape[0])
    slots = max(int(n / DEFAULT_LOAD_FACTOR) + 2, 4)
    omap = OffsetMap(slots * slot_bytes(strategy), strategy, DEFAULT_LOAD_FACTOR)
    if n:
        _, full = omap.put_batch(
            np.ascontiguousarray(hashes, dtype=np.uint64).reshape(n, 2),
            offsets,
            versions if strategy.versioned else None,
            has_version if strategy.versioned else None,
        )
        if full or omap.size != n:
            raise ValueError(f"{n} winners given, {omap.size} distinct keys stored")
    omap.update_latest_offset(latest_offset)
    return omap


def swap_group(
    log: PartitionLog, cleaned: Sequence[LogSegment], group: Sequence[LogSegment]
) -> None:
    """Swap a group's ``.cleaned`` segments (one, or several when its output rolled) of the
    log's dir in for ``group`` as ``Cleaner`` does (``_cleaned._group_swap.replace_group``,
    with the mtime of the group's last segment)."""
    replace_group(log, cleaned, group, group[-1].log_path.stat().st_mtime_ns)
