"""What the cleaner reads from a chunk of batches: payloads, control types, transaction verdicts.

Both passes walk a segment in chunks of whole batches (``storage._chunks``), so memory stays
bounded however large a segment is, and ``abort_check`` and the throttler run between chunks.
Python sees one chunk at a time as a batch matrix (``kernels.B_*`` columns); the per-batch
Python work is limited to transactional and control batches, whose verdicts depend on the order
of the transaction state machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from cleanerd.compaction._offset_map._record_cache import RecordCache
from cleanerd.compaction._transactions import CleanedTransactionMetadata
from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    I64,
    U8,
    U64,
    ControlType,
    CorruptRecordError,
    index_and_hash as index_and_hash_batches,
    index_batches,
    kernels as k,
    lay_out,
    parse_control_key,
)
from cleanerd.storage import LogSegment, ProducerState, iter_chunks

Bools = npt.NDArray[np.bool_]


def index_and_hash(arr: U8, batches: I64, path: str) -> tuple[U8, I64, U64]:
    """``(payload, records, key hashes)`` of the batches (rows of a scan of ``arr``)."""
    return index_and_hash_batches(arr, batches, path=path)


def payloads(
    arr: U8, batches: I64, *, cap: int | None = None, reuse: bool = True
) -> tuple[U8, I64, I64] | None:
    """``(buffer, starts, ends)``: each batch's record bytes, decompressed where needed
    (``lay_out`` within ``cap``, by default into the buffer the calling thread reuses: valid
    until its next call: a pool thread shared by cleanings reuses only in a job that is done
    with the buffer when it returns).

    None when a payload does not decompress: the caller then indexes the batches with the
    reader, which raises the error with its position.
    """
    laid = lay_out(arr, batches, reuse=reuse, cap=cap)
    if laid.error is not None:
        return None
    return laid.buffer, laid.starts, laid.ends


def control_types(
    arr: U8, batches: I64, rows: npt.NDArray[np.intp], path: str
) -> dict[int, ControlType]:
    """Type of the first record of each control batch in ``rows`` that has records."""
    rows = rows[batches[rows, k.B_COUNT] > 0]
    if rows.size == 0:
        return {}
    sub = batches[rows]
    payload, records = index_batches(arr, sub, path=path)
    mv = payload.data
    out: dict[int, ControlType] = {}
    first = np.searchsorted(records[:, k.R_BATCH], np.arange(sub.shape[0]))
    for i, row in enumerate(rows.tolist()):
        rec = records[first[i]]
        klen = int(rec[k.R_KEY_LEN])
        key = None if klen < 0 else bytes(mv[int(rec[k.R_KEY_POS]) : int(rec[k.R_KEY_POS]) + klen])
        try:
            out[row] = parse_control_key(key)
        except CorruptRecordError as e:
            raise CorruptRecordError(e.reason, path=path, position=int(sub[i, k.B_POS])) from None
    return out


def transaction_verdicts(
    meta: CleanedTransactionMetadata, arr: U8, batches: I64, path: str
) -> tuple[Bools, Bools]:
    """``(is_control, can_discard)`` per batch, feeding the transactional and control batches
    (in order) to the pass's transaction state. Other batches are never discarded and do not
    change the state (the pending-abort step they would run is repeated by the next one)."""
    attrs = batches[:, k.B_ATTRIBUTES]
    is_control = (attrs & ATTR_CONTROL) != 0
    can_discard = np.zeros(batches.shape[0], dtype=np.bool_)
    rows = np.flatnonzero((attrs & (ATTR_CONTROL | ATTR_TRANSACTIONAL)) != 0)
    if rows.size == 0:
        return is_control, can_discard
    types = control_types(arr, batches, rows[is_control[rows]], path)
    for r in rows.tolist():
        row = batches[r]
        pid = int(row[k.B_PRODUCER_ID])
        last = int(row[k.B_LAST_OFFSET])
        if is_control[r]:
            can_discard[r] = meta.on_control_batch_read(
                pid, types.get(r), int(row[k.B_COUNT]) > 0, last
            )
        else:
            can_discard[r] = meta.on_batch_read(pid, True, last)
    return is_control, can_discard


def fold_producers(seg: LogSegment, state: ProducerState, cache: RecordCache | None = None) -> bool:
    """Fold one segment into ``state`` a chunk at a time (bounded resident memory); a segment
    pass 1 read whole (and checked) comes from ``cache`` instead (a ``SegmentFold``).

    As ``producer_state.fold_segment``: every batch is checked (CRC, lengths, rising offsets)
    and a damaged one raises, naming it, a batch cut short by the end of the file included
    (``take_snapshot`` forgives that in the active segment). True when this walk checked the
    whole segment itself (not from the cache)."""
    arr, path = seg.view(), str(seg.log_path)
    cached = cache.chunks(id(seg)) if cache is not None else None
    chunks: Iterable[I64] = (
        (batches for batches, _ in cached)
        if cached is not None
        else iter_chunks(arr, path=path, prev_last_offset=seg.base_offset - 1)
    )
    for batches in chunks:
        state.apply(arr, batches, path)
    return cached is None


def segments_between(
    segments: Sequence[LogSegment], from_offset: int, to_offset: int
) -> list[LogSegment]:
    """Kafka's ``logSegments(from, to)``: from the floor segment of ``from`` with base < ``to``."""
    if from_offset >= to_offset:
        return []
    bases = [s.base_offset for s in segments]
    first = max(int(np.searchsorted(bases, from_offset, side="right")) - 1, 0)
    stop = int(np.searchsorted(bases, to_offset, side="left"))
    return list(segments[first:stop])
