"""Zero-copy reading of v2 batches from a buffer (bytes, memoryview, mmap or numpy array).

``scan_batches`` walks a whole buffer with the numba kernel and checks CRCs and offsets, returning
the batch matrix and, separately, the first problem found: callers that print (``dump``) or salvage
(recovery) keep what was valid before it. ``RecordBatch`` is the per-batch view for code that wants
Python objects (CLI, tests); ``index_batches`` is the hot-path record index over many batches, and
``index_and_hash`` the same with each record's 128-bit key hash computed as the record is parsed.

``index_batches`` and ``index_and_hash`` take ``threads``. With more than one, the batches are cut
into contiguous chunks of similar record counts, indexed by the nogil kernel on the calling thread
and a shared, lazily created thread pool, each chunk into its own rows of one matrix; with
``check_crc=True`` one of the threads runs the CRC32C loop first, next to the kernels. Results are
exactly those of ``threads=1``, including which error is reported for damaged data (the first bad
batch in batch order). Decompression stays on one thread (lz4 and zstd hold the GIL for
batch-sized payloads). Use ``threads`` where one call has the machine to itself: a one-shot CLI
command over a segment, a benchmark (about 1.7x on 2 cores for uncompressed data). Keep the
default, 1, in the daemon: its workers already keep every core busy, each on its own partition.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd.format import kernels as k
from cleanerd.format.codecs import Compression, decompress
from cleanerd.format.control import ControlType, parse_control_key
from cleanerd.format.crc import crc_reason, first_bad_crc_each
from cleanerd.format.errors import CorruptRecordError
from cleanerd.format.header import ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE, BatchHeader
from cleanerd.format.records import Header, Record
from cleanerd.format.varint import read_varint

Buffer = Any  # bytes | bytearray | memoryview | mmap.mmap | np.ndarray
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]

# With several threads, the index (and decompression) is cut into this many chunks per thread,
# so that threads which finish early (or the one that did the CRC check) take the rest; a chunk
# has at least _MIN_RECORDS_PER_CHUNK records, as a smaller one is not worth a thread handoff.
_CHUNKS_PER_THREAD = 8
_MIN_RECORDS_PER_CHUNK = 10_000

_WALK_REASONS = {
    k.WALK_PARTIAL_HEADER: "truncated batch: fewer bytes left than a batch header",
    k.WALK_PAST_END: "batch length field runs past the end of the data",
    k.WALK_TOO_SMALL: "batch length field is smaller than a v2 batch header",
    k.WALK_BAD_MAGIC: "unsupported magic byte (only v2 batches are supported)",
}
_RECORD_REASONS = {
    k.REC_VARINT_TOO_LONG: "record varint overflows (longer than Kafka allows)",
    k.REC_OUT_OF_BOUNDS: "record runs past the end of its batch",
    k.REC_LENGTH_MISMATCH: "record fields do not end where its length says",
    k.REC_COUNT_MISMATCH: "record count in the header does not match the records in the batch",
    k.REC_BAD_LENGTH: "record has an invalid negative length",
    k.REC_BAD_OFFSET: "record offset outside its batch's offset range or not increasing",
}


def as_uint8(buf: Buffer) -> U8:
    """A ``uint8`` numpy view of any buffer, without copying (except a non-contiguous array)."""
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).view(np.uint8)
    if len(buf) == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


@dataclass(frozen=True)
class BatchScan:
    """Batches found in a buffer (matrix with ``kernels.B_*`` columns) and the first problem."""

    batches: I64
    end: int  # position just after the last good batch
    error: CorruptRecordError | None

    def __len__(self) -> int:
        return int(self.batches.shape[0])

    def header(self, i: int) -> BatchHeader:
        """The header of batch ``i`` as an object (slow path)."""
        b = self.batches[i]
        return BatchHeader(
            base_offset=int(b[k.B_BASE_OFFSET]),
            batch_length=int(b[k.B_SIZE]) - k.LOG_OVERHEAD,
            partition_leader_epoch=int(b[k.B_LEADER_EPOCH]),
            magic=int(b[k.B_MAGIC]),
            crc=int(b[k.B_CRC]),
            attributes=int(b[k.B_ATTRIBUTES]),
            last_offset_delta=int(b[k.B_LAST_OFFSET] - b[k.B_BASE_OFFSET]),
            base_timestamp=int(b[k.B_BASE_TIMESTAMP]),
            max_timestamp=int(b[k.B_MAX_TIMESTAMP]),
            producer_id=int(b[k.B_PRODUCER_ID]),
            producer_epoch=int(b[k.B_PRODUCER_EPOCH]),
            base_sequence=int(b[k.B_BASE_SEQUENCE]),
            records_count=int(b[k.B_COUNT]),
        )

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def scan_batches(
    buf: Buffer,
    *,
    start: int = 0,
    end: int | None = None,
    path: str | None = None,
    check_crc: bool = True,
    prev_last_offset: int = -1,
) -> BatchScan:
    """Walk the batches of ``buf[start:end]``; stop at the first invalid one.

    Checks: header complete, length within the data, magic 2, CRC32C, last offset >= base
    offset, and base offsets strictly above the previous batch's last offset (starting from
    ``prev_last_offset``). Positions in the result and in the error are positions in ``buf``.
    Raises ValueError unless ``0 <= start <= end <= len(buf)``.

    To check CRCs on several threads, scan with ``check_crc=False`` and pass ``check_crc=True``
    to ``index_batches``/``index_and_hash``: the CRC loop spends about half its time in Python
    holding the GIL, so two CRC loops on two threads are slower than one, but one CRC loop runs
    well next to the index kernel, which does not hold the GIL.
    """
    arr = as_uint8(buf)
    size = arr.shape[0]
    stop = size if end is None else end
    if not 0 <= start <= stop <= size:
        raise ValueError(
            f"scan bounds start={start}, end={end} are outside the {size}-byte buffer"
            " (need 0 <= start <= end <= len(buf))"
        )
    batches, walk_end, code = k.walk_batches(arr, start, stop)
    n = batches.shape[0]
    bad = n  # index of the first invalid batch among the walked ones
    reason = ""
    deltas_ok = batches[:, k.B_LAST_OFFSET] >= batches[:, k.B_BASE_OFFSET]
    prev = np.empty(n, dtype=np.int64)
    if n:
        prev[0] = prev_last_offset
        prev[1:] = batches[:-1, k.B_LAST_OFFSET]
    order_ok = batches[:, k.B_BASE_OFFSET] > prev
    attrs_ok = (batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK) <= 4
    ok = deltas_ok & order_ok & attrs_ok
    if not ok.all():
        bad = int(np.argmin(ok))
        if not deltas_ok[bad]:
            reason = "batch last offset delta is negative"
        elif not order_ok[bad]:
            reason = (
                f"offsets not increasing: batch base offset {int(batches[bad, k.B_BASE_OFFSET])}"
                f" follows offset {int(prev[bad])}"
            )
        else:
            codec = int(batches[bad, k.B_ATTRIBUTES]) & ATTR_CODEC_MASK
            reason = f"unknown compression codec id {codec}"
    if check_crc:
        crc_bad = first_bad_crc_each(arr, batches, 0, bad, release_gil=False)
        if crc_bad >= 0:
            bad = crc_bad
            reason = crc_reason(arr, batches, bad)
    error = None
    if bad < n:
        good = batches[:bad]
        position = int(batches[bad, k.B_POS])
        error = CorruptRecordError(
            reason,
            path=path,
            position=position,
            last_good_offset=_last_offset(good, prev_last_offset),
        )
        return BatchScan(good, position, error)
    if code != k.WALK_OK:
        error = CorruptRecordError(
            _WALK_REASONS[code],
            path=path,
            position=int(walk_end),
            last_good_offset=_last_offset(batches, prev_last_offset),
        )
    return BatchScan(batches, int(walk_end), error)


def _last_offset(batches: I64, default: int) -> int:
    return int(batches[-1, k.B_LAST_OFFSET]) if batches.shape[0] else default


def batch_payload(arr: U8, row: npt.NDArray[np.int64]) -> bytes | memoryview:
    """The uncompressed record bytes of one batch (a view when the batch is uncompressed)."""
    pos = int(row[k.B_POS])
    data = arr.data[pos + k.HEADER_SIZE : pos + int(row[k.B_SIZE])]
    codec = Compression(int(row[k.B_ATTRIBUTES]) & ATTR_CODEC_MASK)
    if codec == Compression.NONE:
        return data
    if int(row[k.B_COUNT]) == 0:
        return b""  # Kafka never decompresses a batch with no records (DefaultRecordBatch.iterator)
    return decompress(codec, bytes(data))


def index_batches(
    buf: Buffer,
    batches: I64,
    *,
    path: str | None = None,
    prev_last_offset: int = -1,
    check_crc: bool = False,
    threads: int = 1,
) -> tuple[U8, I64]:
    """Index every record of ``batches`` (rows of a scan of ``buf``).

    Returns ``(payload_buffer, records)``: when no batch is compressed the payload buffer is
    ``buf`` itself; otherwise payloads (decompressed where needed) are laid end to end in a new
    buffer. Record positions (``R_*_POS``) are positions in the returned buffer and ``R_BATCH``
    is the batch's row in ``batches``. Raises CorruptRecordError for the first bad batch in
    batch order, naming its position; its last good offset is ``prev_last_offset`` when the
    first batch is the bad one. ``check_crc`` also checks every batch's CRC32C (for a scan made
    with ``check_crc=False``; a mismatch is reported as ``scan_batches`` words it).
    ``threads`` > 1 spreads the work over several threads, with the same results (see the
    module docstring).
    """
    payload, records, _ = _index(
        buf, batches, path, prev_last_offset, False, check_crc=check_crc, threads=threads
    )
    return payload, records


def index_and_hash(
    buf: Buffer,
    batches: I64,
    *,
    path: str | None = None,
    prev_last_offset: int = -1,
    check_crc: bool = False,
    threads: int = 1,
) -> tuple[U8, I64, U64]:
    """``index_batches`` plus each record's 128-bit key hash: ``(payload, records, hashes)``.

    ``hashes`` is ``uint64[len(records), 2]``, equal to ``kernels.hash_keys(payload, records)``
    (zeros for null keys) but computed by the index kernel as it parses each record, which saves
    a second pass over the record matrix and the keys.
    """
    return _index(buf, batches, path, prev_last_offset, True, check_crc=check_crc, threads=threads)


def _index(
    buf: Buffer,
    batches: I64,
    path: str | None,
    prev_last_offset: int,
    with_hashes: bool,
    *,
    check_crc: bool,
    threads: int,
) -> tuple[U8, I64, U64]:
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    arr = as_uint8(buf)
    n = batches.shape[0]
    chunks_per_step = 1 if threads == 1 else threads * _CHUNKS_PER_THREAD

    def column(c: int) -> I64:
        return np.ascontiguousarray(batches[:, c])

    def error(reason: str, bad: int) -> CorruptRecordError:
        return CorruptRecordError(
            reason,
            path=path,
            position=int(batches[bad, k.B_POS]),
            last_good_offset=int(batches[bad - 1, k.B_LAST_OFFSET]) if bad else prev_last_offset,
        )

    counts = column(k.B_COUNT)
    # Batches [0, usable) can be indexed; the one at ``usable`` (if any) failed before indexing
    # (its payload does not decompress, or its record count cannot be right) with ``early``.
    usable = n
    early: CorruptRecordError | None = None
    parts: list[bytes | memoryview] = []
    if not (batches[:, k.B_ATTRIBUTES] & ATTR_CODEC_MASK).any():
        payload = arr
        starts = batches[:, k.B_POS] + k.HEADER_SIZE
        ends = batches[:, k.B_POS] + batches[:, k.B_SIZE]
    else:
        # one thread: lz4 and zstd keep the GIL for batch-sized payloads, so several threads
        # decompress no faster than one (and the CRC loop is better run next to the index)
        for i in range(n):
            try:
                parts.append(batch_payload(arr, batches[i]))
            except CorruptRecordError as e:
                usable, early = i, error(e.reason, i)
                break
        lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=usable)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        # lay the payloads out in a numpy buffer rather than b"".join: numpy allocates big arrays
        # on huge pages, a bytes object of the same size pays twice as much in page faults
        payload = np.empty(int(ends[-1]) if usable else 0, dtype=np.uint8)
    bad_count = k.bad_counts(starts[:usable], ends[:usable], counts[:usable])
    if bad_count >= 0:
        usable = bad_count
        early = error(_RECORD_REASONS[k.REC_COUNT_MISMATCH], bad_count)
    row0 = np.zeros(usable + 1, dtype=np.int64)
    np.cumsum(counts[:usable], out=row0[1:])
    records = np.empty((int(row0[-1]), k.RECORD_COLUMNS), dtype=np.int64)
    hashes = np.empty((records.shape[0], 2), dtype=np.uint64) if with_hashes else k.NO_HASHES
    log_append = np.where(
        batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE, batches[:, k.B_MAX_TIMESTAMP], -1
    )
    # Every chunk starts from the offset the single-threaded walk starts from; whether offsets
    # keep increasing across chunk boundaries is checked below on the finished matrix.
    first_prev = int(batches[0, k.B_BASE_OFFSET]) - 1 if n else 0
    args = (
        payload,
        np.ascontiguousarray(starts),
        np.ascontiguousarray(ends),
        column(k.B_BASE_OFFSET),
        column(k.B_LAST_OFFSET),
        column(k.B_BASE_TIMESTAMP),
        counts,
        np.ascontiguousarray(log_append),
        records,
        hashes,
    )
    chunks = _split(counts[:usable], chunks_per_step, _MIN_RECORDS_PER_CHUNK)
    results = [(0, k.REC_OK, -1, -1)] * len(chunks)
    dst = payload.data
    # The CRC check and the index run as a list of tasks, taken in order by the threads: the
    # CRC check (one task: two CRC loops fight over the GIL), then chunks of the index (the
    # kernel does not hold the GIL). Tasks record what went wrong; the first error in batch
    # order is picked at the end. Too little work for two chunks stays on this thread.
    parallel = len(chunks) > 1
    crc_bad = [-1]

    def crc_task() -> None:
        crc_bad[0] = first_bad_crc_each(arr, batches, 0, n, release_gil=parallel)

    def index_task(c: int) -> None:
        first, stop = chunks[c]
        if parts:  # copy this chunk's payloads into place (the GIL is held; memcpy is quick)
            for i in range(first, stop):
                dst[int(starts[i]) : int(ends[i])] = parts[i]
        rows, err, bad, pos = k.index_records_into(*args, first, stop, int(row0[first]), first_prev)
        results[c] = int(rows), int(err), int(bad), int(pos)

    tasks = [crc_task] if check_crc and n else []
    tasks.extend(partial(index_task, c) for c in range(len(chunks)))
    _run_tasks(tasks, threads if parallel else 1)

    # the first error in batch order; a CRC mismatch goes first in its batch, as in scan_batches
    if 0 <= crc_bad[0] <= usable:
        usable = crc_bad[0]
        early = error(crc_reason(arr, batches, usable), usable)
    for c, (first, stop) in enumerate(chunks):
        if first >= usable:
            break
        _rows, err, bad, _pos = results[c]
        r0 = int(row0[first])
        crossed = 0 < r0 < row0[stop] and records[r0, k.R_OFFSET] <= records[r0 - 1, k.R_OFFSET]
        if err == k.REC_OK and not crossed:
            continue
        if first:
            # Only the first record of a chunk depends on the batches before it: index the chunk
            # again from the exact previous offset to get the error the single thread reports.
            prev = int(records[r0 - 1, k.R_OFFSET]) if r0 else first_prev
            _rows, err, bad, _pos = (
                int(v) for v in k.index_records_into(*args, first, stop, r0, prev)
            )
            if err == k.REC_OK:
                raise AssertionError(f"batches {first}:{stop} index cleanly on their own")
        if bad < usable:
            reason = _RECORD_REASONS.get(err, f"record error {err}")
            base = int(batches[bad, k.B_BASE_OFFSET])
            raise error(f"{reason} (batch base offset {base})", bad)
        break
    if early is not None:
        raise early
    if records.shape[0]:
        # The kernel reads -1 as "not LogAppendTime"; a LogAppendTime batch whose maxTimestamp
        # is -1 must still give every record -1, as Kafka's reader does.
        lat_unset = ((batches[:, k.B_ATTRIBUTES] & ATTR_TIMESTAMP_TYPE) != 0) & (
            batches[:, k.B_MAX_TIMESTAMP] == -1
        )
        if lat_unset.any():
            records[lat_unset[records[:, k.R_BATCH]], k.R_TIMESTAMP] = -1
    return payload, records, hashes


def _split(weights: I64, parts: int, min_weight: int) -> list[tuple[int, int]]:
    """Cut ``range(len(weights))`` into at most ``parts`` contiguous chunks of similar weight.

    Chunks weigh at least ``min_weight`` where possible; there is always at least one chunk.
    """
    n = weights.shape[0]
    cum = np.cumsum(np.maximum(weights, 0))
    total = int(cum[-1]) if n else 0
    parts = min(parts, n, max(1, total // max(min_weight, 1)))
    if parts <= 1:
        return [(0, n)]
    targets = total * np.arange(1, parts, dtype=np.int64) // parts
    cuts = (np.searchsorted(cum, targets, side="left") + 1).tolist()
    bounds = sorted({0, n, *(min(max(c, 1), n - 1) for c in cuts)})
    return list(itertools.pairwise(bounds))


_pool: list[ThreadPoolExecutor] = []  # created on first use, shared by every caller
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            workers = max(os.cpu_count() or 1, 2)
            _pool.append(ThreadPoolExecutor(workers, thread_name_prefix="cleanerd-format"))
        return _pool[0]


def _run_tasks(tasks: list[Callable[[], None]], threads: int) -> None:
    """Run ``tasks`` on ``threads`` threads (this one included), each taking the next in order.

    Returns when every task has finished; the first exception raised by a task is re-raised then.
    """
    queue = iter(tasks)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                task = next(queue, None)
            if task is None:
                return
            task()

    helpers = min(threads, len(tasks)) - 1
    if helpers <= 0:
        worker()
        return
    pool = _executor()
    futures = [pool.submit(worker) for _ in range(helpers)]
    try:
        worker()
    finally:
        for f in futures:
            f.cancel()  # helpers still queued behind other callers' work have nothing left to do
        wait(futures)  # never return (or raise) while a task still writes into shared arrays
    for f in futures:
        if not f.cancelled():
            f.result()


def decode_headers(payload: U8 | memoryview, pos: int, count: int) -> tuple[Header, ...]:
    """Record headers at ``pos`` (already validated by the index kernel)."""
    mv = payload if isinstance(payload, memoryview) else payload.data
    out: list[Header] = []
    for _ in range(count):
        klen, pos = read_varint(mv, pos)
        key = bytes(mv[pos : pos + klen]).decode("utf-8", errors="replace")
        pos += klen
        vlen, pos = read_varint(mv, pos)
        if vlen < 0:
            out.append((key, None))
        else:
            out.append((key, bytes(mv[pos : pos + vlen])))
            pos += vlen
    return tuple(out)


def records_from_index(payload: U8, records: I64) -> Iterator[Record]:
    """Python Record objects for rows of a record index (slow path: CLI, tests)."""
    mv = payload if isinstance(payload, memoryview) else payload.data
    for row in records:
        klen = int(row[k.R_KEY_LEN])
        vlen = int(row[k.R_VALUE_LEN])
        kp = int(row[k.R_KEY_POS])
        vp = int(row[k.R_VALUE_POS])
        yield Record(
            offset=int(row[k.R_OFFSET]),
            timestamp=int(row[k.R_TIMESTAMP]),
            key=None if klen < 0 else bytes(mv[kp : kp + klen]),
            value=None if vlen < 0 else bytes(mv[vp : vp + vlen]),
            headers=decode_headers(payload, int(row[k.R_HEADERS_POS]), int(row[k.R_HEADER_COUNT])),
        )


class RecordBatch:
    """A view of one batch inside a buffer; decodes records only when asked."""

    __slots__ = ("_arr", "_row", "header", "path", "position", "prev_last_offset")

    def __init__(
        self,
        arr: U8,
        row: I64,
        header: BatchHeader,
        path: str | None,
        prev_last_offset: int = -1,
    ) -> None:
        self._arr = arr
        self._row = row
        self.header = header
        self.position = int(row[k.B_POS])
        self.path = path
        self.prev_last_offset = prev_last_offset  # for the error's last good offset

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def raw(self) -> memoryview:
        """The batch's bytes as stored (for whole-batch copies)."""
        return self._arr.data[self.position : self.position + self.size]

    def records(self) -> list[Record]:
        """Decode every record (decompressing if needed)."""
        payload, index = index_batches(
            self._arr,
            self._row.reshape(1, -1),
            path=self.path,
            prev_last_offset=self.prev_last_offset,
        )
        index[:, k.R_BATCH] = 0
        if payload is not self._arr:
            return list(records_from_index(payload, index))
        return list(records_from_index(self._arr, index))

    def control_type(self) -> ControlType | None:
        """The control record type of a control batch (None for data or emptied batches)."""
        if not self.header.is_control or self.header.records_count == 0:
            return None
        return parse_control_key(self.records()[0].key)


def iter_batches(
    buf: Buffer,
    *,
    path: str | None = None,
    start: int = 0,
    end: int | None = None,
    check_crc: bool = True,
) -> Iterator[RecordBatch]:
    """Yield every valid batch, then raise the scan's error if the data went bad."""
    arr = as_uint8(buf)
    scan = scan_batches(arr, start=start, end=end, path=path, check_crc=check_crc)
    for i in range(len(scan)):
        prev = int(scan.batches[i - 1, k.B_LAST_OFFSET]) if i else -1
        yield RecordBatch(arr, scan.batches[i], scan.header(i), path, prev)
    scan.raise_error()
