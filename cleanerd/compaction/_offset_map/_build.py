"""Pass 1: the offset map over the dirty range (docs/kafka-format.md §4.6: ``buildOffsetMap``).

Per chunk of batches: the transaction verdicts (aborted data and control batches never enter the
map), then for the other data batches, under the offset strategy, the fused path: every record
indexed and hashed into rows of the record cache, each lz4 or zstd payload as soon as it is
decoded (``_fill.cache_decoded_records``), or, for what that kernel does not take, the payloads
laid out first (``_fill.cache_records``), and the keyed records put from there
(``_fill.put_cached``, Kafka's full rule, as ``put_batch`` has it). With a pool the chunk is
cut into pieces that a pool thread decodes and indexes as well as this one, and this thread puts
each piece's rows in offset order once the pieces before it are put (``_Pieces``): the puts are
the only part that must stay in order on one thread; the pool thread also walks each next chunk
while this thread finishes the one before (``_Chunks``). Under
timestamp and header, one index-and-hash call, the strategy's versions and one ``put_batch`` call
for the keyed records at or after the first dirty offset. Kafka's latest-offset bookkeeping
(after every batch reaching the dirty range, and over offset gaps at the end of each segment) is
done here with array maxima, so when the map fills mid-chunk the latest offset is exactly what
Kafka's record loop leaves.

The map is cleared first (``clear_map``: only the slots the last build wrote, when the cleaner's
``touched`` bitmap knows them), and at the end the cached records that won their key are flagged
(``_mark_winners``): pass 2 decides them by that flag, with no key hash and no map lookup.

For the timestamp and header strategies the already-clean part of the log takes part too
(``update_from_clean_prefix``): a key of the dirty range may have its best record before the first
dirty offset, and the map must hold that one, or pass 2 would keep both it and the dirty record.
Those records only update keys already in the map, so they never fill it.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.compaction._batches import index_and_hash, payloads, transaction_verdicts
from cleanerd.compaction._offset_map._fill import (
    cache_decoded_records,
    cache_records,
    mark_winners,
    put_cached,
)
from cleanerd.compaction._offset_map._map import OffsetMap
from cleanerd.compaction._offset_map._record_cache import RecordCache
from cleanerd.compaction._offset_map._touched import clear_touched, map_offsets, touched_bitmap
from cleanerd.compaction._stats import CleanerStats
from cleanerd.compaction._strategy import compute_versions
from cleanerd.compaction._transactions import CleanedTransactionMetadata
from cleanerd.format import (
    ATTR_CODEC_MASK,
    ATTR_TIMESTAMP_TYPE,
    I64,
    U8,
    batch_records_bound,
    chunk_payloads_bound,
    decoders,
    decompression_limit,
    is_legacy,
    kernels as k,
    payload_ranges,
    zstd_context,
)
from cleanerd.storage import LogSegment, chunk_bytes, collect_aborted, iter_chunks, release
from cleanerd.topics import StrategyConfig

Arr = npt.NDArray[Any]
OnChunk = Callable[[int], None]
"""Called before each chunk with its size in bytes: abort check and throttling."""

_NO_HASHES = np.zeros((0, 2), dtype=np.uint64)
_NO_RECORDS = np.zeros((0, k.RECORD_COLUMNS), dtype=np.int64)
_NO_TOUCHED = np.zeros(0, dtype=np.uint64)


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
    touched: Arr = _NO_TOUCHED,
    pool: Executor | None = None,
    meanwhile: Callable[[], None] = lambda: None,
) -> bool:
    """Put one chunk's records into the map; True when the map filled up. ``meanwhile`` is
    called as ``_Pieces.run`` calls it when the chunk's data batches go through ``_Pieces``
    (the offset strategy), and not at all otherwise."""
    is_control, aborted = transaction_verdicts(meta, arr, batches, path)
    counts = batches[:, k.B_COUNT]
    data_rows = np.flatnonzero(~is_control & ~aborted & (counts > 0))
    if strategy.versioned:
        g, b, full = _put_versioned(arr, batches, data_rows, path, start, omap, strategy, stats)
    elif is_legacy(batches):
        # legacy messages (docs/kafka-format.md §2.8) are indexed by ``format._legacy``, not by
        # the fused kernel; their keys go into the map like any record, and pass 2 reads them
        g, b, full = _put_versioned(arr, batches, data_rows, path, start, omap, strategy, stats)
        if cache is not None:
            cache.add_chunk(segment_id, batches, np.full(batches.shape[0], -1, np.int64), 0)
    else:
        g, b, full = _put_fused(
            arr, batches, data_rows, path, start, omap, cache, segment_id, touched, pool, meanwhile
        )
    # Kafka counts a control batch as one message and an aborted batch by its record count
    skipped = np.where(is_control, 1, np.where(aborted, counts, 0))
    stats.index_messages_read(g + int(skipped[:b].sum()))
    stats.index_bytes_read(int(batches[:b, k.B_SIZE].sum()))
    lasts = batches[:b, k.B_LAST_OFFSET]
    reached = lasts[lasts >= start]
    if reached.size:
        omap.update_latest_offset(max(omap.latest_offset, int(reached.max())))
    return full


def _put_versioned(
    arr: U8,
    batches: I64,
    data_rows: npt.NDArray[np.intp],
    path: str,
    start: int,
    omap: OffsetMap,
    strategy: StrategyConfig,
    stats: CleanerStats,
) -> tuple[int, int, bool]:
    """Timestamp and header strategies, and chunks with legacy messages: index, versions (none
    under the offset strategy), ``put_batch``.

    Returns ``(records before the stop, chunk row of the stop, full)``.
    """
    payload, recs, hashes = _data_records(arr, batches, data_rows, path)
    offsets = recs[:, k.R_OFFSET]
    cand = np.flatnonzero((recs[:, k.R_KEY_LEN] >= 0) & (offsets >= start))
    versions, has_version, wrong = compute_versions(strategy, payload, recs[cand])
    stats.add(anomalous_version_headers=wrong)
    nxt, full = omap.put_batch(hashes[cand], offsets[cand], versions, has_version)
    if full:
        g = int(cand[nxt])  # the record that did not fit: Kafka stops right before it
        return g, int(data_rows[recs[g, k.R_BATCH]]), True
    return int(recs.shape[0]), int(batches.shape[0]), False


def _put_fused(
    arr: U8,
    batches: I64,
    data_rows: npt.NDArray[np.intp],
    path: str,
    start: int,
    omap: OffsetMap,
    cache: RecordCache | None,
    segment_id: int,
    touched: Arr,
    pool: Executor | None = None,
    meanwhile: Callable[[], None] = lambda: None,
) -> tuple[int, int, bool]:
    """Offset strategy: the chunk's data batches are laid out, indexed and hashed into rows of
    the record cache (``_fill.cache_records``; with a ``pool`` and compressed batches, piece by
    piece on both threads, see ``_Pieces``), and the rows are put into the map in offset order
    on this thread (``_fill.put_cached``) as they are ready. A full map stops the puts; the rest
    of the chunk is still indexed and cached, as one thread does.

    Any problem with the data (a payload that does not decompress, a bad record) is raised by
    indexing the same batches with the reader, so errors are exactly the reader's.
    """
    nb = batches.shape[0]
    first = np.full(nb, -1, dtype=np.int64)
    records = 0
    full_record = -1
    laid_bytes = 0
    sub = batches[data_rows]
    if data_rows.size:
        counts = np.ascontiguousarray(sub[:, k.B_COUNT])
        limit = decompression_limit()
        whole = chunk_payloads_bound(limit)
        sizes = sub[:, k.B_SIZE]
        total = int(counts.sum())
        # a record takes at least MIN_RECORD_SIZE bytes: rows beyond what a batch (or the chunk)
        # can hold decompressed are a corrupt count, which must not size an allocation, and so
        # are more than ``format.batch_records_bound`` in one batch; the chunk holds at most
        # ``storage.chunk_records()`` records unless one batch holds more
        if (
            (counts < 0).any()
            or (counts * k.MIN_RECORD_SIZE > np.maximum(sizes, limit)).any()
            or (counts > batch_records_bound(limit)).any()
            or total * k.MIN_RECORD_SIZE > whole + int(sizes.sum())
        ):
            index_and_hash(arr, sub, path)  # raises the reader's error for these batches
            raise AssertionError(f"{path}: record counts the reader accepts are out of bounds")
        # a chunk's worth of room for the kernels; the record cache then takes offsets and flags
        if cache is not None:
            hashes, offsets, flags = cache.scratch(total)
        else:
            hashes = np.empty((total, 2), dtype=np.uint64)
            offsets = np.empty(total, dtype=np.int64)
            flags = np.empty(total, dtype=np.uint8)
        # uncompressed chunks stay on this thread: indexing one costs little more than sharing it
        # (POOL_PIECES), and the second core gained little on a loaded machine
        shared = pool is not None and bool((sub[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK).any())
        pieces = _Pieces(arr, sub, counts, hashes, offsets, flags, shared)
        put = _Puts(omap, start, hashes, offsets, flags, touched)
        if not pieces.run(pool, put, meanwhile):
            # a piece did not fit its share or did not decompress, or a record is bad: the
            # chunk as one thread lays it out (within the whole bound), or the reader says why
            got = _laid(arr, sub, counts, None, reuse=True)
            err = k.REC_COUNT_MISMATCH
            if got is not None:
                buf, starts, ends = got
                err = pieces.cache(0, pieces.n, buf, starts, ends, _Scratch())
            if err != k.REC_OK:
                index_and_hash(arr, sub, path)  # raises the reader's error for these batches
                raise AssertionError(f"{path}: cache_records failed where the reader did not")
            pieces.laid_bytes = [int((ends - starts).sum())]
            put.upto(total)
        laid_bytes = sum(pieces.laid_bytes)
        records = total
        full_record = put.full_row
        if cache is not None:
            # only batches wholly in the dirty range: pass 2 decides cached records by their
            # winner flag, which records before ``start`` (never put into the map) cannot have
            skip = int(np.searchsorted(sub[:, k.B_BASE_OFFSET], start))
            skipped = int(pieces.rows[skip])
            cursor = cache.append(offsets[skipped:records], flags[skipped:records])
            if cursor >= 0:
                first[data_rows[skip:]] = cursor + pieces.rows[skip:-1] - skipped
    if cache is not None:
        cache.add_chunk(segment_id, batches, first, laid_bytes)
    if full_record >= 0:
        ends_at = np.cumsum(sub[:, k.B_COUNT])
        row = int(np.searchsorted(ends_at, full_record, side="right"))
        return full_record, int(data_rows[row]), True
    return records, nb, False


PASS_1_CHUNKS = 4
"""With a pool, pass 1 reads this many chunks (``storage.chunk_bytes()``) at a time: between two
chunks the pool thread waits while this one puts the last piece and sets up the next, so fewer,
larger chunks keep it busier. Each piece still takes at most half the chunk's decompression
bound, the chunk at most ``storage.chunk_records()`` records, and pass 2 takes what pass 1
cached in parts of one chunk's bytes (``group_chunks``)."""

POOL_PIECES = 8
"""With a pool, a chunk's data batches are split into this many pieces (by compressed bytes),
which both threads take in turn: small enough that neither waits long for the other at the
end of a chunk, large enough that taking one costs little next to laying it out."""


class _Scratch:
    """A thread's scratch matrices for ``cache_records``, grown to the largest batch seen (after
    ``kernels.bad_counts`` checked its count against its payload)."""

    def __init__(self) -> None:
        self.records = np.empty((0, k.RECORD_COLUMNS), dtype=np.int64)
        self.hashes = np.empty((0, 2), dtype=np.uint64)

    def fit(self, rows: int) -> None:
        if rows > self.records.shape[0]:
            self.records = np.empty((rows, k.RECORD_COLUMNS), dtype=np.int64)
            self.hashes = np.empty((rows, 2), dtype=np.uint64)


class _Puts:
    """The map puts of one chunk's cache rows, in row order, up to the first record that does
    not fit (``full_row``, chunk-relative; -1 while the map takes every record)."""

    def __init__(
        self,
        omap: OffsetMap,
        start: int,
        hashes: Arr,
        offsets: Arr,
        flags: Arr,
        touched: Arr,
    ) -> None:
        self.omap, self.start, self.touched = omap, start, touched
        self.hashes, self.offsets, self.flags = hashes, offsets, flags
        self.done = 0  # chunk-relative rows put (or passed over once the map is full)
        self.full_row = -1

    def upto(self, rows: int) -> None:
        """Put the rows from ``done`` to ``rows`` (chunk-relative)."""
        if rows <= self.done:
            return
        if self.full_row < 0:
            omap = self.omap
            full, size, latest = put_cached(
                omap.table,
                self.start,
                omap.size,
                omap.max_entries,
                self.hashes,
                self.offsets,
                self.flags,
                self.done,
                rows,
                self.touched,
            )
            omap.set_size(size)
            if latest >= 0:
                omap.update_latest_offset(latest)
            if full >= 0:
                self.full_row = full
        self.done = rows


class _Pieces:
    """One chunk's data batches cut into pieces, each laid out and indexed into its own cache
    rows (``cache_records``) by whichever thread takes it: this one in order from the first,
    and with a pool, a pool thread as well. This thread puts each piece's rows as soon as the
    pieces before it are put (``run``).

    Memory: each thread holds one piece laid out at a time, within half of the chunk's bound
    (``format.chunk_payloads_bound`` of the limit: the pool thread sees this thread's limit, a
    context variable), so both together hold no more than one thread laying out the whole chunk
    would. A piece laid out goes as soon as it is indexed: nothing of it outlives the piece.
    A piece the decoding kernel takes whole (``_cache_decoded``) holds one payload at a time,
    in the thread's room of at most ``DECODED_BATCH_ROOM``.
    """

    def __init__(
        self,
        arr: U8,
        sub: I64,
        counts: I64,
        hashes: Arr,
        offsets: Arr,
        flags: Arr,
        shared: bool,
    ) -> None:
        self.arr, self.sub, self.counts = arr, sub, counts
        self.hashes, self.offsets, self.flags = hashes, offsets, flags
        self.n = n = sub.shape[0]
        self.rows = np.zeros(n + 1, dtype=np.int64)  # each batch's first row, chunk-relative
        np.cumsum(counts, out=self.rows[1:])
        self.base_offsets = np.ascontiguousarray(sub[:, k.B_BASE_OFFSET])
        self.last_offsets = np.ascontiguousarray(sub[:, k.B_LAST_OFFSET])
        self.base_timestamps = np.ascontiguousarray(sub[:, k.B_BASE_TIMESTAMP])
        self.log_append_times = np.where(
            sub[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE, sub[:, k.B_MAX_TIMESTAMP], -1
        )
        self.codecs = np.ascontiguousarray(sub[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK)
        # compressed payloads are decoded and indexed batch by batch where the kernel can
        # (``_cache_decoded``); laid out whole first otherwise
        self.decoded = bool(self.codecs.any()) and bool(decoders().codecs)
        parts = min(POOL_PIECES, n) if shared else 1
        if parts > 1:
            sizes = np.cumsum(sub[:, k.B_SIZE])
            cuts = np.searchsorted(sizes, sizes[-1] * np.arange(1, parts) // parts, side="right")
            self.bounds = [0, *sorted({int(c) for c in cuts if 0 < c < n}), n]
            self.cap: int | None = chunk_payloads_bound(decompression_limit()) // 2
        else:
            self.bounds = [0, n]
            self.cap = None
        count = len(self.bounds) - 1
        self.laid_bytes = [0] * count
        self._lock = threading.Lock()
        self._next = 0  # the next piece no thread took yet
        self._ready = [threading.Event() for _ in range(count)]
        self.failed = False

    def cache(self, lo: int, hi: int, buf: U8, starts: I64, ends: I64, scratch: _Scratch) -> int:
        """``cache_records`` of batches ``[lo, hi)`` laid out in ``buf``: ``REC_OK`` or why not."""
        scratch.fit(int(self.counts[lo:hi].max()) if hi > lo else 0)
        err, _ = cache_records(
            buf,
            starts,
            ends,
            self.base_offsets[lo:hi],
            self.last_offsets[lo:hi],
            self.base_timestamps[lo:hi],
            self.counts[lo:hi],
            self.log_append_times[lo:hi],
            scratch.records,
            scratch.hashes,
            self.hashes,
            self.offsets,
            self.flags,
            int(self.rows[lo]),
        )
        return int(err)

    def _cache_decoded(self, i: int, scratch: _Scratch) -> bool:
        """``cache_decoded_records`` of piece ``i``: True when it did every batch; otherwise
        the piece is laid out and indexed as a whole (``_do``), which decides what it left."""
        lo, hi = self.bounds[i], self.bounds[i + 1]
        limit = decompression_limit()
        cap = chunk_payloads_bound(limit) if self.cap is None else self.cap
        starts, ends = payload_ranges(self.sub[lo:hi])
        found = decoders()
        zstd = zstd_context()
        done, laid = cache_decoded_records(
            self.arr,
            starts,
            ends,
            self.codecs[lo:hi],
            self.base_offsets[lo:hi],
            self.last_offsets[lo:hi],
            self.base_timestamps[lo:hi],
            self.counts[lo:hi],
            self.log_append_times[lo:hi],
            found.addresses,
            zstd.address,
            zstd.buffers,
            _decoded_room(limit),
            limit,
            cap,
            scratch.records,
            scratch.hashes,
            self.hashes,
            self.offsets,
            self.flags,
            int(self.rows[lo]),
        )
        if done != hi - lo:
            return False
        self.laid_bytes[i] = int(laid)
        return True

    def _take(self) -> int:
        with self._lock:
            if self.failed or self._next >= len(self._ready):
                return -1
            self._next += 1
            return self._next - 1

    def _do(self, i: int, scratch: _Scratch) -> None:
        """Lay out and index piece ``i`` (either thread); ``failed`` if it does not go."""
        ok = False
        try:
            lo, hi = self.bounds[i], self.bounds[i + 1]
            scratch.fit(int(self.counts[lo:hi].max()) if hi > lo else 0)
            if self.decoded and self._cache_decoded(i, scratch):
                ok = True
                return
            got = _laid(self.arr, self.sub[lo:hi], self.counts[lo:hi], self.cap, reuse=True)
            if got is not None:
                buf, starts, ends = got
                self.laid_bytes[i] = int((ends - starts).sum())
                ok = self.cache(lo, hi, buf, starts, ends, scratch) == k.REC_OK
        finally:
            if not ok:
                self.failed = True
            self._ready[i].set()

    def _help(self) -> None:
        """The pool thread's part: pieces until none is left. Its payload buffer is the pool
        thread's own (``reuse``), free again when this returns, as nothing laid out here is
        kept."""
        scratch = _Scratch()
        while (i := self._take()) >= 0:
            self._do(i, scratch)

    def run(self, pool: Executor | None, put: _Puts, meanwhile: Callable[[], None]) -> bool:
        """Index every piece and put their rows in order; False if a piece failed (some rows
        may be put then: ``put.done`` says how many). ``meanwhile`` is called once the pool
        has this chunk's pieces to take: what it queues there comes after them."""
        helper: Future[None] | None = None
        if pool is not None and len(self._ready) > 1:
            try:  # the pool thread sees this thread's decompression limit (a context variable)
                helper = pool.submit(contextvars.copy_context().run, self._help)
            except RuntimeError:  # the pool is shut down (the daemon is stopping): all here
                helper = None
        meanwhile()
        scratch = _Scratch()
        nxt = 0  # the next piece to put
        try:
            while nxt < len(self._ready) and not self.failed:
                if self._ready[nxt].is_set():
                    put.upto(int(self.rows[self.bounds[nxt + 1]]))
                    nxt += 1
                elif (i := self._take()) >= 0:
                    self._do(i, scratch)
                elif not self.failed:
                    self._ready[nxt].wait()  # the pool thread is on it
        finally:  # no pool thread reads this chunk once it is left
            with self._lock:
                self._next = len(self._ready)
            if helper is not None and not helper.cancel():
                helper.exception()
        if helper is not None and not helper.cancelled():
            helper.result()  # a bug in the pool thread's part is raised here
        return not self.failed


class _Chunks:
    """One segment's chunks in pass 1. With a pool, while this thread finishes a chunk (its
    last pieces, the puts, the record cache), the pool thread walks the next one (``ask``,
    queued behind the chunk's pieces): otherwise the pool thread would wait for this one's walk
    at every chunk.

    ``take`` gives the chunks in order, each once: the one asked for (its walk's error raised
    then, where a walk here would raise it), or, when none was asked or the pool has not
    started it, one walked here. Only one thread advances the walk at a time: ``take`` and
    ``close`` wait for the pool's walk first, so none outlives the pass. With a pool the walk
    releases no pages (``iter_chunks(release_pages=False)``), as the walk ahead would release
    them too early: ``done`` releases each chunk's once this thread is finished with it.
    """

    def __init__(self, arr: U8, chunks: Generator[I64, None, None], pool: Executor | None) -> None:
        self._arr, self._chunks, self._pool = arr, chunks, pool
        self._ahead: Future[I64 | None] | None = None

    def _walk(self) -> I64 | None:
        return next(self._chunks, None)

    def ask(self) -> None:
        """Queue the next chunk's walk on the pool, if there is one and it is not queued."""
        if self._pool is not None and self._ahead is None:
            try:
                self._ahead = self._pool.submit(contextvars.copy_context().run, self._walk)
            except RuntimeError:  # the pool is shut down (the daemon is stopping): walk here
                self._ahead = None

    def take(self) -> I64 | None:
        """The next chunk, or None at the end of the segment."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead.cancel():
            return self._walk()
        return ahead.result()

    def done(self, batches: I64) -> None:
        """This thread is finished with ``batches``: with a pool, their pages go now."""
        if self._pool is not None:
            end = batches[-1, k.B_POS] + batches[-1, k.B_SIZE]
            release(self._arr, int(batches[0, k.B_POS]), int(end))

    def close(self) -> None:
        """Wait for a walk still on the pool (its chunk and error unused); end the walk."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead.cancel():
            ahead.exception()
        self._chunks.close()


DECODED_BATCH_ROOM = 1 << 20
"""Room for one decoded payload in ``_cache_decoded`` (or the decompression limit, if lower): a
larger payload is left to ``lay_out``."""

_room = threading.local()


def _decoded_room(limit: int) -> U8:
    """This thread's room for one decoded payload (kept, grown to the largest asked for)."""
    size = min(limit, DECODED_BATCH_ROOM)
    buf: U8 | None = getattr(_room, "buffer", None)
    if buf is None or buf.shape[0] < size:
        buf = _room.buffer = np.empty(size, np.uint8)
    return buf[:size]


def _laid(
    arr: U8, sub: I64, counts: I64, cap: int | None, *, reuse: bool = False
) -> tuple[U8, I64, I64] | None:
    """``payloads`` of ``sub`` within ``cap`` whose record counts fit, or None."""
    got = payloads(arr, sub, cap=cap, reuse=reuse)
    if got is None or k.bad_counts(got[1], got[2], counts) >= 0:
        return None
    return got


def clear_map(omap: OffsetMap, touched: Arr | None) -> None:
    """``omap.clear()``, at the cost of the slots in use where the ``touched`` bitmap knows them.

    A map nothing was put into since its last clear is left as it is.
    """
    if touched is not None and touched.shape[0] * 64 >= omap.slots and omap.size:
        if clear_touched(omap.table, touched) != omap.size:  # it unmarks every slot it walks
            omap.clear()
    else:
        if omap.size:
            omap.clear()
        if touched is not None:
            touched.fill(0)
    omap.set_size(0)
    omap.update_latest_offset(-1)


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
    touched: Arr | None = None,
    pool: Executor | None = None,
    prechecked: frozenset[int] = frozenset(),
) -> MapBuild:
    """Fill ``omap`` from the dirty segments over [start, end); Kafka's ``buildOffsetMap``.

    ``log_segments`` is the whole log (aborted txns are looked up in every later ``.txnindex``).
    The returned end offset is ``latest_offset + 1``: ``end`` unless the map filled up.
    ``cache`` (if given) keeps what pass 1 saw of each record, for pass 2. ``touched`` (a
    ``_touched.touched_bitmap`` of the map, kept from one clean to the next) lets the clear at the
    start cost the slots the last build used instead of the whole table. ``pool`` (if given)
    lays out and indexes pieces of each chunk beside this thread, which puts them into the map
    in order (``_Pieces``); the map, the cache and the errors are the same either way. The
    segments in ``prechecked`` (``id()``; every batch's CRC already checked in this cleaning)
    are walked without their CRCs.
    """
    clear_map(omap, touched)
    if cache is not None:
        cache.reset(start)
    if touched is None or touched.shape[0] * 64 < omap.slots:
        touched = touched_bitmap(omap)
    meta = CleanedTransactionMetadata(collect_aborted(log_segments, start, end))
    result = MapBuild(end_offset=start, full=False)
    step = chunk_bytes() * (PASS_1_CHUNKS if pool is not None else 1)
    for i, seg in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        _, position = seg.offset_index.lookup(start)
        arr = seg.view()
        path = str(seg.log_path)
        prev = seg.base_offset - 1 if position == 0 else -1
        crc = id(seg) not in prechecked
        walk = iter_chunks(
            arr,
            path=path,
            start=position,
            prev_last_offset=prev,
            check_crc=crc,
            chunk_bytes=step,
            release_pages=pool is None,
        )
        chunks = _Chunks(arr, walk, pool)
        try:
            while (batches := chunks.take()) is not None:
                on_chunk(int(batches[:, k.B_SIZE].sum()))
                full = _map_chunk(
                    arr,
                    batches,
                    path,
                    start,
                    omap,
                    strategy,
                    meta,
                    stats,
                    cache,
                    id(seg),
                    touched,
                    pool,
                    chunks.ask,
                )
                chunks.done(batches)
                if full:
                    result.full = True
                    break
        finally:
            chunks.close()
        if result.full:
            break
        if position == 0:
            result.checked.add(id(seg))
            if cache is not None:
                cache.mark_complete(id(seg))
        omap.update_latest_offset(next_start - 1)  # steps over offset gaps (Kafka test 44)
    if omap.latest_offset >= 0:
        result.end_offset = omap.latest_offset + 1
    if cache is not None and not strategy.versioned:
        _mark_winners(omap, touched, cache)
    return result


def _mark_winners(omap: OffsetMap, touched: Arr, cache: RecordCache) -> None:
    """Flag each cached record that is its key's entry in the map (``_fill.mark_winners``);
    pass 2 decides the cached records by these flags alone, so when they cannot be set the
    cache forgets its records."""
    n = cache.records
    if n == 0:
        return
    winners = np.empty(omap.size, dtype=np.int64)
    if map_offsets(omap.table, touched, winners) != omap.size or not cache.ascending:
        cache.forget_records()  # the first: never (every put marks its slot)
        return
    winners.sort()
    winners -= cache.base  # the cache's offsets are relative to it; the map's are all past it
    mark_winners(winners, cache.offsets, cache.flags, n)


def update_from_clean_prefix(
    clean: Sequence[LogSegment],
    log_segments: Sequence[LogSegment],
    first_dirty: int,
    omap: OffsetMap,
    strategy: StrategyConfig,
    on_chunk: OnChunk,
    prechecked: frozenset[int] = frozenset(),
) -> None:
    """Let records before ``first_dirty`` compete for the keys already in the map.

    Only for versioned strategies (under ``offset`` a dirty record always beats a clean one).
    Keys not in the map are left out, so the map never grows; the latest offset is unchanged.
    CRCs are checked except in ``prechecked`` segments (as ``build_offset_map``).
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
            chunks = iter_chunks(
                arr,
                path=path,
                prev_last_offset=seg.base_offset - 1,
                check_crc=id(seg) not in prechecked,
            )
            for batches in chunks:
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
