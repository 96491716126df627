"""What one Spark task does: read a planned byte range of a segment into Arrow batches.

The range is scanned and checked exactly as ``cleanerd dump`` checks a segment (CRCs, offsets
rising, offsets inside the segment's name range), so a corrupt segment fails the task with
the same error, naming the file and byte position. Batches the bounds or read_committed drop
are dropped from their headers, before anything is decompressed; only the kept ones go to
the record index kernel, and then to the Arrow columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    I64,
    MAX_DECOMPRESSED_BYTES,
    U8,
    ControlType,
    CorruptRecordError,
    EndTransactionMarker,
    index_batches,
    kernels as k,
    limit_decompression,
    parse_control_key,
    scan_batches,
)
from cleanerd.spark._bounds import NO_TIMESTAMP, Bounds
from cleanerd.spark._columns import CONTROL_CODE, record_batch
from cleanerd.spark._read_ranges import SegmentRange, Txns
from cleanerd.storage import CHUNK_BYTES, StorageError, map_readonly

if TYPE_CHECKING:
    from cleanerd.spark._metrics import ReadMetrics

DEFAULT_BATCH_RECORDS = 65_536
"""Records per Arrow batch handed to Spark (bounded memory per task)."""


@dataclass(frozen=True)
class ReadSpec:
    """What every task of one read applies: the exact bounds and the options."""

    bounds: Bounds
    committed: bool = False
    values: bool = True
    skip_corrupt: bool = False
    batch_records: int = DEFAULT_BATCH_RECORDS
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES  # max.decompressed.message.bytes


@dataclass
class RangeStats:
    """What a task read: bytes of segment it scanned, bytes of bad tail it skipped, records."""

    bytes_read: int = 0
    corrupt_bytes: int = 0
    records: int = 0
    corrupt_errors: int = 0


def _neighbour_error(r: SegmentRange, batches: I64) -> tuple[int, str] | None:
    """The first batch outside the segment's offset range (as dump reports it), or None."""
    low = batches[:, k.B_BASE_OFFSET] < r.base_offset
    high = (
        batches[:, k.B_LAST_OFFSET] >= r.next_base
        if r.next_base is not None
        else np.zeros(len(batches), dtype=bool)
    )
    bad = low | high
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    base, last = int(batches[i, k.B_BASE_OFFSET]), int(batches[i, k.B_LAST_OFFSET])
    if low[i]:
        return i, (
            f"batch base offset {base} is below the segment's base offset {r.base_offset} "
            "(its file name)"
        )
    return i, (
        f"batch offsets {base}..{last} are not below the base offset {r.next_base} of the "
        "next segment"
    )


def _kept_batches(batches: I64, bounds: Bounds, txns: Txns | None) -> I64:
    """Rows of ``batches`` that can hold a record the read returns (header checks only)."""
    base = batches[:, k.B_BASE_OFFSET]
    attrs = batches[:, k.B_ATTRIBUTES]
    keep = batches[:, k.B_COUNT] > 0
    keep &= (batches[:, k.B_LAST_OFFSET] >= bounds.offset_min) & (base <= bounds.offset_max)
    if bounds.ts_seek_from is not None:
        keep &= batches[:, k.B_MAX_TIMESTAMP] >= bounds.ts_min_ms
    if txns is not None:
        keep &= (attrs & ATTR_CONTROL) == 0
        keep &= base < txns.last_stable_offset
        keep &= ~_aborted(batches, txns)
    return np.flatnonzero(keep)


def _aborted(batches: I64, txns: Txns) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Transactional batches inside one of their producer's aborted transactions (a
    producer's transactions never overlap, so one search per producer finds them)."""
    out = np.zeros(len(batches), dtype=bool)
    if not txns.aborted:
        return out
    aborted = np.array(sorted(txns.aborted), dtype=np.int64).reshape(-1, 3)
    candidates = (batches[:, k.B_ATTRIBUTES] & ATTR_TRANSACTIONAL) != 0
    pids = batches[:, k.B_PRODUCER_ID]
    for pid in np.unique(aborted[:, 0]).tolist():
        mine = aborted[aborted[:, 0] == pid]
        rows = np.flatnonzero(candidates & (pids == pid))
        base = batches[rows, k.B_BASE_OFFSET]
        at = np.searchsorted(mine[:, 1], base, side="right") - 1
        inside = (at >= 0) & (base <= mine[np.maximum(at, 0), 2])
        out[rows[inside]] = True
    return out


def _groups(counts: I64, sizes: I64, limit: int) -> list[tuple[int, int]]:
    """Consecutive runs of batches holding about ``limit`` records each and at most
    ``CHUNK_BYTES`` of batches (at least one batch): what one record index decompresses at
    once stays far inside its bound however large the records are."""
    groups: list[tuple[int, int]] = []
    first, total, size = 0, 0, 0
    for i, (n, b) in enumerate(zip(counts.tolist(), sizes.tolist(), strict=True)):
        if total and (total + n > limit or size + b > CHUNK_BYTES):
            groups.append((first, i))
            first, total, size = i, 0, 0
        total += n
        size += b
    if first < len(counts):
        groups.append((first, len(counts)))
    return groups


def _control_codes(
    payload: U8, records: I64, batches: I64, path: str
) -> np.ndarray[Any, np.dtype[np.int8]]:
    """Each record's control type code; a control record Kafka cannot parse is corrupt."""
    codes = np.zeros(len(records), dtype=np.int8)
    control_rows = np.flatnonzero(batches[records[:, k.R_BATCH], k.B_ATTRIBUTES] & ATTR_CONTROL)
    view = payload.data
    for i in control_rows.tolist():
        row = records[i]
        klen, vlen = int(row[k.R_KEY_LEN]), int(row[k.R_VALUE_LEN])
        kp, vp = int(row[k.R_KEY_POS]), int(row[k.R_VALUE_POS])
        try:
            kind = parse_control_key(None if klen < 0 else bytes(view[kp : kp + klen]))
            if kind in (ControlType.ABORT, ControlType.COMMIT):
                EndTransactionMarker.parse(kind, None if vlen < 0 else bytes(view[vp : vp + vlen]))
        except CorruptRecordError as exc:
            position = int(batches[int(row[k.R_BATCH]), k.B_POS])
            raise CorruptRecordError(exc.reason, path=path, position=position) from exc
        codes[i] = CONTROL_CODE[kind]
    return codes


def _record_mask(records: I64, bounds: Bounds) -> np.ndarray[Any, np.dtype[np.bool_]]:
    offsets = records[:, k.R_OFFSET]
    keep = (offsets >= bounds.offset_min) & (offsets <= bounds.offset_max)
    if bounds.ts_filtered:
        ts = records[:, k.R_TIMESTAMP]
        keep &= (ts != NO_TIMESTAMP) & (ts >= bounds.ts_min_ms) & (ts <= bounds.ts_max_ms)
    return keep


def read_range(r: SegmentRange, spec: ReadSpec, stats: RangeStats) -> Iterator[Any]:
    """Arrow record batches of the records of ``r`` that ``spec`` keeps, in offset order.

    Raises CorruptRecordError (file, byte position, last good offset) at the first bad batch,
    unless ``spec.skip_corrupt``: then the good records before it are returned and the bytes
    from it to the range's end are counted in ``stats.corrupt_bytes``. A batch that decompresses
    past ``spec.max_decompressed_bytes`` is such a bad batch.
    """
    # A generator runs in its consumer's context: the bound is set around each step.
    parts = _read_range(r, spec, stats)
    while True:
        with limit_decompression(spec.max_decompressed_bytes):
            part = next(parts, None)
        if part is None:
            return
        yield part


def read_ranges(
    ranges: Sequence[SegmentRange], spec: ReadSpec, metrics: ReadMetrics | None
) -> Iterator[Any]:
    """A task's Arrow batches; its counts go to ``metrics`` even when the read fails."""
    for r in ranges:
        stats = RangeStats()
        try:
            yield from read_range(r, spec, stats)
        finally:
            if metrics is not None:
                metrics.add(stats)


def _read_range(r: SegmentRange, spec: ReadSpec, stats: RangeStats) -> Iterator[Any]:
    arr = map_readonly(Path(r.path))
    if arr.shape[0] < r.end:
        raise StorageError(
            f"{r.path} is {arr.shape[0]} bytes, shorter than the {r.end} it had when the read "
            "was planned (the segment was replaced or truncated meanwhile); run the query again"
        )
    prev = r.base_offset - 1 if r.start == 0 else -1
    scan = scan_batches(arr, start=r.start, end=r.end, path=r.path, prev_last_offset=prev)
    stats.bytes_read += r.end - r.start
    batches, error = scan.batches, scan.error
    found = _neighbour_error(r, batches)
    if found is not None:
        i, reason = found
        last_good = int(batches[i - 1, k.B_LAST_OFFSET]) if i else prev
        position = int(batches[i, k.B_POS])
        batches = batches[:i]
        error = CorruptRecordError(
            reason, path=r.path, position=position, last_good_offset=last_good
        )
    if error is not None and found is None and error.is_truncation and r.last_segment:
        covered = len(batches) and batches[-1, k.B_LAST_OFFSET] >= spec.bounds.offset_max
        if covered or arr.shape[0] > r.end:
            error = None  # a batch being appended when the read was planned: past its end
    if error is not None and not spec.skip_corrupt:
        raise error
    bad_at = None if error is None else error.position
    kept = batches[_kept_batches(batches, spec.bounds, r.txns)]
    for first, stop in _groups(kept[:, k.B_COUNT], kept[:, k.B_SIZE], spec.batch_records):
        group = kept[first:stop]
        stopped = False
        try:
            payload, records = index_batches(arr, group, path=r.path)
        except CorruptRecordError as exc:
            if not spec.skip_corrupt:
                raise
            group = group[group[:, k.B_POS] < (exc.position or 0)]
            payload, records = index_batches(arr, group, path=r.path)
            bad_at, stopped = exc.position, True
        if len(records):
            out = _records_batch(r, spec, payload, records, group)
            if out is not None:
                stats.records += out.num_rows
                yield out
        if stopped:
            break
    if bad_at is not None:
        stats.corrupt_bytes += r.end - bad_at
        stats.corrupt_errors += 1


def _records_batch(r: SegmentRange, spec: ReadSpec, payload: U8, records: I64, group: I64) -> Any:
    mask = _record_mask(records, spec.bounds)
    if not mask.all():
        records = records[mask]
    if not len(records):
        return None
    codes = _control_codes(payload, records, group, r.path)
    return record_batch(
        topic=r.topic,
        partition=r.partition,
        segment=r.base_offset,
        payload=payload,
        records=records,
        batches=group,
        control_codes=codes,
        values=spec.values,
    )
