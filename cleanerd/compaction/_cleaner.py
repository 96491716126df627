"""One cleaning of one partition log: Kafka's ``Cleaner.doClean`` (kafka-format.md §4.5-§4.13).

1. Pass 1 (``_offset_map._build``): the offset map over [first dirty, first uncleanable); when it
   fills, the pass ends early and ``end_offset`` falls inside the range (a later cleaning goes on).
   Under the timestamp and header strategies the clean part then competes for the mapped keys.
2. Every segment pass 2 reads and pass 1 did not read whole is checked (batch walk and CRC32C),
   so corrupt input stops the clean before any segment is replaced. (A record that does not
   parse inside a batch whose CRC is right is only found when pass 2 reads it; in an already
   clean segment that can be after earlier groups were swapped.)

Each batch's CRC is checked once per cleaning: the plan's producer-state walk checks every batch
of every segment, and the clean claims what it checked (``PartitionLog.claim_checked_segments``,
with the plan's token: segments unchanged since, same objects and file keys). Pass 1, the clean
prefix's walk and step 2 walk the claimed segments without their CRCs (lengths, magic and offsets
are still checked); the others (a plan made by hand, a walk reused from an earlier cleaning, a
file changed since the plan) they check in full, as before.
3. Pass 2: all segments from the log start with base offset < ``end_offset``, grouped as Kafka
   groups them (``_grouping``); each group is filtered chunk by chunk (``_filter``) into one
   ``.cleaned`` segment (``_cleaned._writer``), or several when the output would overflow one
   (KAFKA-20036: it rolls at the batch that does not fit), which get the mtime of the group's
   last source segment and are swapped in together through ``PartitionLog.replace_segments``.
4. The partition's ``cleaner-offset-checkpoint`` entry becomes ``end_offset``.

Under the offset strategy pass 1 leaves a record cache (``_offset_map._record_cache``): for each
record of the dirty range its offset and flags (keyed, tombstone, won its key), and for each
segment it read whole its checked batch matrices. Pass 2 then decides those batches without
reading them (nor walking their segment again), the producer-state walk takes their headers from
there too, and only the batches that lose some but not all of their records are read again. The
cleaner keeps the cache's memory and a bitmap of the map slots its last build wrote from one clean
to the next, so the next clean's map clear costs those slots, not the whole map.

``abort_check`` runs before every chunk (a few MiB of batches) of both passes: when it says so,
the clean stops with ``CleaningAbortedError`` and leaves no ``.cleaned`` file. Any other error
also removes the group's ``.cleaned`` files before it propagates. Groups swapped before an abort
stay swapped (as in Kafka); the checkpoint is written only after a complete pass.

The swap of each group (``_cleaned._group_swap.replace_group``, which Spark's plan B uses too)
deviates from Kafka in one way, for crash safety: source segments of a group that lose every batch
up to the next cleaned segment are replaced each by an empty segment at its own base (see there).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace

from cleanerd.compaction._batches import fold_producers, segments_between
from cleanerd.compaction._cleaned._group_swap import new_cleaned_segment, replace_group
from cleanerd.compaction._cleaned._group_writer import write_group
from cleanerd.compaction._cleaned._writer import CleanedOutput
from cleanerd.compaction._cleaning_plan import CleaningPlan
from cleanerd.compaction._filter import PassContext, ProducerTable, legacy_delete_horizon
from cleanerd.compaction._grouping import SegmentSizes, group_items
from cleanerd.compaction._offset_map._build import build_offset_map, update_from_clean_prefix
from cleanerd.compaction._offset_map._map import OffsetMap
from cleanerd.compaction._offset_map._record_cache import RecordCache
from cleanerd.compaction._offset_map._touched import Arr, touched_bitmap
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._throttle import Throttler
from cleanerd.compaction._transactions import (
    CleanedTransactionMetadata,
    last_records_of_active_producers,
)
from cleanerd.format import LONG_MAX, limit_decompression
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LogSegment,
    PartitionLog,
    iter_chunks,
    oldest_snapshot_end,
    pages_kept,
    update_offset_checkpoint,
)
from cleanerd.topics import StrategyConfig, TopicCleanerConfig

RECORD_CACHE_BYTES = 64 << 20
"""Default bound of pass 1's record cache (``_offset_map._record_cache``), per cleaner.

The rule (docs/daemon.md, "How much memory"): the cache is a fixed amount per cleaner on top of
the dedupe budget, not a share of it, so a cleaning's memory stays the map's budget plus a
constant, whatever the budget. At 6 bytes a record, 64 MiB hold 11.1M records (about 1.3 GB of
100-byte records), and up to a quarter more (16 MiB) the batch matrices (120 bytes a batch): a
dirty range up to that is decided in pass 2 without being read again; past it, the rest is read
as without a cache."""


class CleaningAbortedError(Exception):
    """The clean was asked to stop (Kafka's ``LogCleaningAbortedException``)."""


@dataclass(frozen=True)
class CleanResult:
    """Where the next cleaning starts (the new checkpoint) and what this one did;
    ``ledger_error``: why its erasure ledger entry was not written (``_ledger``), if so."""

    end_offset: int
    stats: CleanerStats
    ledger_error: str | None = None


def segment_sizes(segment: LogSegment) -> SegmentSizes:
    return SegmentSizes(
        base_offset=segment.base_offset,
        log_bytes=segment.size,
        offset_index_bytes=segment.offset_index.size_bytes,
        time_index_bytes=segment.time_index.size_bytes,
    )


class Cleaner:
    """Cleans logs one at a time with one offset map (one per worker thread).

    ``decompression_pool`` (if given) takes part of pass 1's decompression and record indexing,
    so one cleaning uses a second core; cleaners may share one (its size bounds the extra
    threads). The result is the same with or without it.
    """

    def __init__(
        self,
        map: OffsetMap,
        throttler: Throttler | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        record_cache_bytes: int = RECORD_CACHE_BYTES,
        decompression_pool: Executor | None = None,
    ) -> None:
        self.map = map
        self.decompression_pool = decompression_pool
        self.throttler = throttler
        self.clock = clock
        self.record_cache_bytes = record_cache_bytes
        self._touched: Arr | None = None  # slots this cleaner's map builds wrote (clear_map)
        self._cache: RecordCache | None = None

    def _record_cache(self) -> RecordCache:
        """The record cache, emptied; kept from one clean to the next, as Kafka keeps its
        buffers, so its pages are faulted in once rather than on every clean."""
        if self._cache is None or self._cache.max_bytes != self.record_cache_bytes:
            self._cache = RecordCache(self.record_cache_bytes)
        self._cache.reset()
        return self._cache

    def clean(
        self,
        log: PartitionLog,
        plan: CleaningPlan,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        abort_check: Callable[[], bool] = lambda: False,
        *,
        keep_tombstones_from: int | None = None,
    ) -> CleanResult:
        """One ``doClean`` of ``log`` over the plan's range at ``now_ms``; see the module doc.

        Tombstones in batches reaching ``keep_tombstones_from`` are kept past their delete
        horizon; by default that is the oldest KIP-630 snapshot's end, when the partition has
        snapshots: a reader starting from it needs every later tombstone to replay. Every batch
        is decompressed within the topic's ``max.decompressed.message.bytes``. A log whose
        segments up to the plan's end are small enough keeps their pages mapped through both
        passes (storage's ``pages_kept``): faulted in once, not once a pass."""
        reads = segments_between(list(log.segments)[:-1], -1, plan.first_uncleanable_offset)
        with (
            limit_decompression(log.config.max_decompressed_message_bytes),
            pages_kept(sum(s.size for s in reads)),
        ):
            return self._clean(
                log, plan, config, strategy, now_ms, abort_check, keep_tombstones_from
            )

    def _clean(
        self,
        log: PartitionLog,
        plan: CleaningPlan,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        abort_check: Callable[[], bool],
        keep_tombstones_from: int | None,
    ) -> CleanResult:
        if keep_tombstones_from is None:
            keep_tombstones_from = oldest_snapshot_end(log.directory)
            if keep_tombstones_from is None:
                keep_tombstones_from = LONG_MAX
        if strategy != self.map.config:
            raise ValueError(
                f"the offset map was made for {self.map.config}, not for {strategy}: "
                "make the map with the log's strategy"
            )
        stats = CleanerStats(clock=self.clock)
        start = plan.first_dirty_offset
        upper = plan.first_uncleanable_offset
        if start >= upper:
            stats.index_done()
            stats.all_done()
            return CleanResult(start, stats)

        on_chunk = self._on_chunk(log, abort_check)
        trust_txn_indexes(log, stats)
        prechecked = frozenset() if plan.checks is None else log.claim_checked_segments(plan.checks)
        segments = list(log.segments)
        cleanable = segments[:-1]  # never the active segment
        dirty = segments_between(cleanable, start, upper)
        cache = None if strategy.versioned else self._record_cache()
        if self._touched is None or self._touched.shape[0] * 64 < self.map.slots:
            self._touched = touched_bitmap(self.map)
        build = build_offset_map(
            dirty,
            segments,
            start,
            upper,
            self.map,
            strategy,
            stats,
            on_chunk,
            cache,
            self._touched,
            self.decompression_pool,
            prechecked,
        )
        update_from_clean_prefix(
            segments_between(cleanable, -1, start),
            segments,
            start,
            self.map,
            strategy,
            on_chunk,
            prechecked,
        )
        stats.buffer_utilization = self.map.utilization
        stats.index_done()
        end = build.end_offset

        sources = segments_between(cleanable, -1, end)
        self._check(sources, build.checked | prechecked, on_chunk)
        ctx = self._context(
            log, config, strategy, now_ms, log.high_watermark, cache, keep_tombstones_from
        )
        horizon = legacy_delete_horizon(segments, start, config.delete_retention_ms)
        ctx = replace(ctx, legacy_delete_horizon_ms=horizon)
        meta = CleanedTransactionMetadata()
        groups = group_items(
            sources,
            [segment_sizes(s) for s in sources],
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            upper,
        )
        for group in groups:
            self._clean_group(log, group, ctx, meta, stats, on_chunk, cache)
        update_offset_checkpoint(
            log.directory.parent / CLEANER_OFFSET_CHECKPOINT, {log.topic_partition: end}
        )
        stats.all_done()
        return CleanResult(end, stats)

    def clean_segments(
        self,
        log: PartitionLog,
        segments: Sequence[LogSegment],
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        high_watermark: int,
        abort_check: Callable[[], bool] = lambda: False,
    ) -> CleanerStats:
        """Kafka's ``cleanSegments``: clean one group with the map as it is, and swap it in.

        For tests and tools that fill the map themselves (Kafka's tests do); ``clean`` is the
        whole pass. The batch ending at ``high_watermark`` stays, at least as an empty header
        (KAFKA-20452; ``clean`` takes the log's own, ``PartitionLog.high_watermark``).
        """
        stats = CleanerStats(clock=self.clock)
        on_chunk = self._on_chunk(log, abort_check)
        with limit_decompression(log.config.max_decompressed_message_bytes):
            trust_txn_indexes(log, stats)
            self._check(segments, set(), on_chunk)
            ctx = self._context(log, config, strategy, now_ms, high_watermark)
            self._clean_group(log, segments, ctx, CleanedTransactionMetadata(), stats, on_chunk)
        stats.all_done()
        return stats

    def _on_chunk(
        self, log: PartitionLog, abort_check: Callable[[], bool]
    ) -> Callable[[int], None]:
        def on_chunk(size: int) -> None:
            if abort_check():
                raise CleaningAbortedError(f"cleaning of {log.topic_partition} was aborted")
            if self.throttler is not None and size:
                self.throttler.maybe_throttle(size)

        return on_chunk

    @staticmethod
    def _check(
        segments: Sequence[LogSegment],
        checked: set[int] | frozenset[int],
        on_chunk: Callable[[int], None],
    ) -> None:
        """Walk and CRC-check every batch of the segments neither the producer-state walk
        this cleaning claimed nor pass 1 checked whole."""
        for seg in segments:
            if id(seg) not in checked:
                for _ in iter_chunks(
                    seg.view(), path=str(seg.log_path), prev_last_offset=seg.base_offset - 1
                ):
                    on_chunk(0)

    def _context(
        self,
        log: PartitionLog,
        config: TopicCleanerConfig,
        strategy: StrategyConfig,
        now_ms: int,
        high_watermark: int,
        cache: RecordCache | None = None,
        keep_tombstones_from: int = LONG_MAX,
    ) -> PassContext:
        state = log.producer_state(lambda seg, into: fold_producers(seg, into, cache))
        return PassContext(
            omap=self.map,
            strategy=strategy,
            now_ms=now_ms,
            new_horizon_ms=min(now_ms + config.delete_retention_ms, LONG_MAX),
            high_watermark=high_watermark,
            producers=ProducerTable(
                last_records_of_active_producers(state, now_ms, config.producer_id_expiration_ms)
            ),
            tombstones_kept_from=keep_tombstones_from,
        )

    def _clean_group(
        self,
        log: PartitionLog,
        group: Sequence[LogSegment],
        ctx: PassContext,
        meta: CleanedTransactionMetadata,
        stats: CleanerStats,
        on_chunk: Callable[[int], None],
        cache: RecordCache | None = None,
    ) -> None:
        """Kafka's ``cleanSegments``: the group's ``.cleaned`` segments (one, or more when the
        output rolls: KAFKA-20036), then one swap of them all."""
        output = CleanedOutput(lambda base: new_cleaned_segment(log, base))
        try:
            mtime_ns = write_group(
                log.segments, group, output, ctx, meta, stats, on_chunk, cache, self.throttler
            )
            replace_group(log, output.segments, group, mtime_ns)
        except BaseException:
            output.delete()
            raise


def trust_txn_indexes(log: PartitionLog, stats: CleanerStats) -> None:
    """Before either pass: offsets rise across segments, and every ``.txnindex`` agrees with
    the ABORT markers; those that do not are rebuilt (``PartitionLog.check_txn_indexes``), so
    no cleaning takes an aborted transaction for committed. The plan does not depend on them
    (its LSO comes from the markers), so it stands. The producer-state walk (every batch
    checked) is the plan's when the segments are unchanged since; a walk made here (they
    changed) counts as this cleaning's too (``PartitionLog.claim_checked_segments``)."""
    log.check_offsets_across()
    problems = log.check_txn_indexes(fold_producers)
    if problems:
        stats.txn_indexes_rebuilt += len({p.base_offset for p in problems})
        stats.txn_index_problems += tuple(str(p) for p in problems)
