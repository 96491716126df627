"""Pass 2 over one group of segments: Kafka's ``cleanInto``, written once.

``Cleaner`` and Spark's plan B (through ``compaction._external``) both filter a group into its
``.cleaned`` segments with ``write_group``, so their bytes cannot differ. The output is one
segment, or several when it rolls (KAFKA-20036, ``_writer``). ``group_chunks`` gives pass 2 its
chunks, from pass 1's record cache when it holds a segment whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from cleanerd.compaction._cleaned._writer import CleanedOutput, CleanedSegmentWriter
from cleanerd.compaction._filter import PassContext, decide_chunk
from cleanerd.compaction._offset_map._record_cache import RecordCache
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._throttle import Throttler
from cleanerd.compaction._transactions import CleanedTransactionMetadata
from cleanerd.format import I64, U8, kernels as k
from cleanerd.storage import (
    AbortedTxn,
    LogSegment,
    batch_runs,
    chunk_bytes,
    chunk_records,
    collect_aborted,
    compressed_sizes,
    iter_chunks,
    pages_are_kept,
    release,
    uncompressed_chunk_bytes,
)

CACHED_CHUNKS = 1
"""Pass 2 decides the batches pass 1 cached up to this many chunks (``CHUNK_BYTES``) at a time
(pass 1's chunks smaller than that are taken together). One: where most batches are rebuilt (the
tail of a log, where the winners are), rebuilding takes about twice a chunk's bytes (record
index, verdicts) besides its pages; four at a time raised a 10M-record clean's peak RSS by 36 MiB
and saved no measurable time (bench/clean.py, 1M and 10M records)."""
_PAYLOAD_RATIO = 8  # ... as hold at most 8 times their bytes decompressed, and chunk_records()


def group_chunks(
    arr: U8, seg: LogSegment, cache: RecordCache | None
) -> Iterator[tuple[I64, I64 | None]]:
    """Pass 2's chunks of a segment with each batch's first cached record (None: no cache).

    A segment pass 1 read whole comes from the cache, chunk by chunk as pass 1 saw it, without
    walking it again; its pages are released after each chunk, as ``iter_chunks`` does.
    """
    cached = cache.chunks(id(seg)) if cache is not None else None
    if cached is not None and cache is not None:
        # nothing is read to decide these: take several of pass 1's chunks at a time, as long
        # as their records took at most 8 times their bytes decompressed in pass 1 (pass 2
        # decompresses the batches it rebuilds together: that stays far below the bound)
        step = chunk_bytes() * CACHED_CHUNKS
        wide = _plain_part_bytes(step)
        most = chunk_records()
        cached, laid = _cut(cached, cache.payload_bytes(id(seg)), step, wide)
        sizes = [_chunk_bytes(b) for b, _ in cached]
        counts = [int(b[:, k.B_COUNT].sum()) for b, _ in cached]
        plain = [_plain(b) for b, _ in cached]
        i = 0
        while i < len(cached):
            j, size, payload, records, all_plain = i, 0, 0, 0, True
            while j < len(cached) and (
                j == i
                or (
                    size + sizes[j] <= (wide if all_plain and plain[j] else step)
                    and payload + laid[j] <= step * _PAYLOAD_RATIO
                    and records + counts[j] <= most
                )
            ):
                size += sizes[j]
                payload += laid[j]
                records += counts[j]
                all_plain = all_plain and plain[j]
                j += 1
            if j == i + 1:
                batches, first = cached[i]
            else:
                batches = np.concatenate([b for b, _ in cached[i:j]])
                first = np.concatenate([f for _, f in cached[i:j]])
            yield batches, first
            if batches.shape[0]:
                end = int(batches[-1, k.B_POS] + batches[-1, k.B_SIZE])
                release(arr, int(batches[0, k.B_POS]), end)
            i = j
        return
    path = str(seg.log_path)
    for batches in iter_chunks(
        arr, path=path, prev_last_offset=seg.base_offset - 1, check_crc=False
    ):
        yield batches, cache.first_records(id(seg), batches) if cache is not None else None


def _plain_part_bytes(step: int) -> int:
    """How many bytes of uncompressed batches only pass 2 decides at once: as many as
    ``iter_chunks`` reads of them when the cleaning keeps its log's pages mapped anyway
    (``pages_kept``), where a wider part adds only its records' rows (``chunk_records()``
    bounds those) and saves each part's fixed Python work (none 0.975x end to end at 1M,
    bench/compare.py); ``step`` otherwise, where a part's pages are what it holds."""
    return max(step, uncompressed_chunk_bytes()) if pages_are_kept() else step


def _plain(batches: I64) -> bool:
    """No batch of ``batches`` is compressed: their records are read where they lie."""
    return not compressed_sizes(batches).any()


def _cut(
    chunks: list[tuple[I64, I64]], laid: list[int], step: int, wide: int
) -> tuple[list[tuple[I64, I64]], list[int]]:
    """Pass 1's chunks cut at whole batches into parts of at most ``step`` bytes (``wide`` for
    a chunk of uncompressed batches only; a larger batch alone), each with its share of what
    the chunk took decompressed: pass 1 reads larger chunks with a pool (``PASS_1_CHUNKS``),
    and pass 2 rebuilds no more at once for that."""
    parts: list[tuple[I64, I64]] = []
    shares: list[int] = []
    for (batches, first), payload in zip(chunks, laid, strict=True):
        total = _chunk_bytes(batches)
        most = wide if _plain(batches) else step
        if total <= most:
            parts.append((batches, first))
            shares.append(payload)
            continue
        for lo, hi in batch_runs(batches[:, k.B_SIZE], most):
            part = batches[lo:hi]
            parts.append((part, first[lo:hi]))
            shares.append(-(-payload * _chunk_bytes(part) // total))
    return parts, shares


def _chunk_bytes(batches: I64) -> int:
    return int(batches[:, k.B_SIZE].sum())


def add_segment_aborted(
    meta: CleanedTransactionMetadata,
    segments: Sequence[LogSegment],
    group: Sequence[LogSegment],
    i: int,
) -> None:
    """Before group member ``i`` is read: the aborted transactions over its range (the log's
    ``.txnindex`` files, Kafka's ``collectAbortedTransactions``) join the pass's state."""
    seg = group[i]
    seg_upper = group[i + 1].base_offset if i + 1 < len(group) else seg.next_offset()
    meta.add_aborted(collect_aborted(list(segments), seg.base_offset, seg_upper))


def write_group(
    segments: Sequence[LogSegment],
    group: Sequence[LogSegment],
    output: CleanedOutput,
    ctx: PassContext,
    meta: CleanedTransactionMetadata,
    stats: CleanerStats,
    on_chunk: Callable[[int], None] = lambda size: None,
    cache: RecordCache | None = None,
    throttler: Throttler | None = None,
    max_bytes: int | None = None,
) -> int:
    """Kafka's ``cleanInto`` for a group: filter it into ``output``'s ``.cleaned`` segments (the
    first at the group's base offset, more when the output rolls), flush them and give them the
    group's last mtime, which is returned for the swap. ``meta`` is the pass's transaction state
    at the group's start; ``max_bytes``: the roll size (``_writer.MAX_SEGMENT_BYTES`` by default).
    The cleaner and Spark's plan B both call this, so their bytes cannot differ.

    The ABORT markers' ``.txnindex`` entries are held until their chunk is written, then go to
    the segment that received the marker (the follow-up to KAFKA-20036, apache/kafka#23301, does
    the same: a chunk is decided once, never filtered again for a new segment)."""
    staged: list[AbortedTxn] = []
    meta.output_txn_index = staged
    try:
        writer = CleanedSegmentWriter(output, group[0].base_offset, stats, throttler, max_bytes)
        for i, seg in enumerate(group):
            add_segment_aborted(meta, segments, group, i)
            arr = seg.view()
            path = str(seg.log_path)
            modified_ms = seg.last_modified_ms  # for legacy tombstones (kafka-format.md §4.9)
            for batches, first in group_chunks(arr, seg, cache):
                on_chunk(int(batches[:, k.B_SIZE].sum()))
                decision = decide_chunk(
                    ctx, meta, arr, batches, path, stats, cache, first, modified_ms
                )
                writer.write(arr, decision)
                writer.index_aborted(staged)
        writer.finish()
        mtime_ns = group[-1].log_path.stat().st_mtime_ns
        for cleaned in output.segments:
            cleaned.set_last_modified(mtime_ns)
        return mtime_ns
    finally:
        meta.output_txn_index = None
