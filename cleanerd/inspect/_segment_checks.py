"""Read-only integrity checks of one segment: its ``.log`` and its three index files.

Every check reports a :class:`Problem` and carries on, so one run lists everything wrong; checks
that depend on valid batches use only the batches before the first bad one. Nothing is repaired
and nothing is written: files are mapped read-only or read whole (index files are small).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from cleanerd.format import (
    ATTR_CONTROL,
    INT_MAX,
    U8,
    BatchScan,
    ControlType,
    CorruptRecordError,
    EndTransactionMarker,
    RecordBatch,
    index_batches,
    kernels as k,
    parse_control_key,
    scan_batches,
)
from cleanerd.storage import CorruptIndexError, LogSegment, map_readonly
from cleanerd.topics import LogConfig

I64 = npt.NDArray[np.int64]
MAX_PER_FILE = 5  # problems listed per check and file before summarising the rest
# records are indexed a chunk of batches at a time (at most this many bytes or records), so
# memory stays bounded however big the segment: a record row of the index takes 88 bytes
_CHUNK_BYTES = 32 * 1024 * 1024
_CHUNK_RECORDS = 256 * 1024


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or, as a note, worth knowing) about one file."""

    file: str
    check: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "check": self.check, "message": self.message}


@dataclass
class SegmentResult:
    """What one segment holds (valid batches only) and what is wrong with it."""

    base_offset: int
    path: Path
    batches: int = 0
    records: int = 0
    first_offset: int | None = None  # base offset of the first valid batch
    last_offset: int | None = None  # last offset of the last valid batch
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)

    def add(self, path: Path, check: str, message: str) -> None:
        self.problems.append(Problem(str(path), check, message))

    def add_capped(self, path: Path, check: str, messages: list[str]) -> None:
        """The first few messages of a check, then one line counting the rest."""
        for message in messages[:MAX_PER_FILE]:
            self.add(path, check, message)
        if len(messages) > MAX_PER_FILE:
            self.add(path, check, f"... and {len(messages) - MAX_PER_FILE} more like these")


def _where(position: int | None, reason: str, last_good_offset: int) -> str:
    """A CorruptRecordError's message without the path (the report names the file already)."""
    good = (
        f"last good offset {last_good_offset}"
        if last_good_offset >= 0
        else "no valid batch before it"
    )
    return f"at byte {position}: {reason} ({good})"


def _batch_check(error: CorruptRecordError) -> str:
    if error.reason.startswith("CRC mismatch"):
        return "crc"
    if error.is_truncation:
        return "truncated"
    return "batch"


def check_segment(directory: Path, base_offset: int) -> SegmentResult:
    """Every check of one segment named by ``base_offset`` in ``directory``."""
    seg = LogSegment(directory, base_offset, LogConfig())  # only stats and reads files
    result = SegmentResult(base_offset, seg.log_path)
    arr = map_readonly(seg.log_path)
    scan = scan_batches(arr, path=str(seg.log_path))
    if scan.error is not None:
        error = scan.error
        result.add(
            seg.log_path,
            _batch_check(error),
            _where(error.position, error.reason, error.last_good_offset),
        )
    b = scan.batches
    result.batches = len(scan)
    if len(scan):
        result.first_offset = int(b[0, k.B_BASE_OFFSET])
        result.last_offset = int(b[-1, k.B_LAST_OFFSET])
        if result.first_offset < base_offset:
            result.add(
                seg.log_path,
                "offsets",
                f"first batch base offset {result.first_offset} is below the segment base "
                f"offset {base_offset} in the file name",
            )
        if result.last_offset - base_offset > INT_MAX:
            result.add(
                seg.log_path,
                "offsets",
                f"last offset {result.last_offset} does not fit the indexes' 32-bit offsets "
                f"relative to base offset {base_offset}",
            )
    good = _check_records(arr, b, seg.log_path, result)
    _check_control(arr, scan, good, seg.log_path, result)
    damaged = scan.error is not None
    _check_offset_index(seg, b, scan.end, damaged, result)
    _check_time_index(seg, b, damaged, result)
    _check_txn_index(seg, result)
    return result


def _check_records(arr: U8, b: I64, path: Path, result: SegmentResult) -> npt.NDArray[np.bool_]:
    """Decode every record (in chunks, to bound memory); returns which batches decoded."""
    n = b.shape[0]
    good = np.ones(n, dtype=bool)
    messages: list[str] = []
    ends = np.cumsum(b[:, k.B_SIZE])
    counts = np.cumsum(np.maximum(b[:, k.B_COUNT], 0))
    i = 0
    while i < n:
        by_bytes = np.searchsorted(ends, (ends[i - 1] if i else 0) + _CHUNK_BYTES, "right")
        by_count = np.searchsorted(counts, (counts[i - 1] if i else 0) + _CHUNK_RECORDS, "right")
        j = max(int(min(by_bytes, by_count)), i + 1)
        try:
            index_batches(arr, b[i:j], path=str(path))
            i = j
        except CorruptRecordError as exc:
            bad = i + int(np.searchsorted(b[i:j, k.B_POS], exc.position or 0))
            bad = min(bad, j - 1)
            good[bad] = False
            last_good = int(b[bad - 1, k.B_LAST_OFFSET]) if bad else -1
            messages.append(_where(int(b[bad, k.B_POS]), exc.reason, last_good))
            i = bad + 1
    result.records = int(b[good, k.B_COUNT].sum())
    result.add_capped(path, "records", messages)
    return good


def _check_control(
    arr: U8, scan: BatchScan, good: npt.NDArray[np.bool_], path: Path, result: SegmentResult
) -> None:
    """Control records must parse as Kafka parses them."""
    messages: list[str] = []
    b = scan.batches
    control = (b[:, k.B_ATTRIBUTES] & ATTR_CONTROL).astype(bool) & (b[:, k.B_COUNT] > 0) & good
    for row in np.flatnonzero(control):
        batch = RecordBatch(arr, b[row], scan.header(int(row)), str(path))
        try:
            for record in batch.records():
                kind = parse_control_key(record.key)
                if kind in (ControlType.ABORT, ControlType.COMMIT):
                    EndTransactionMarker.parse(kind, record.value)
        except CorruptRecordError as exc:
            messages.append(
                f"control batch at byte {int(b[row, k.B_POS])} "
                f"(offset {int(b[row, k.B_BASE_OFFSET])}): {exc.reason}"
            )
    result.add_capped(path, "control", messages)


def _skipped_note(path: Path, check: str, skipped: int, result: SegmentResult) -> None:
    """Entries beyond corrupt data are not the index's fault; say they went unchecked."""
    if skipped:
        result.notes.append(
            Problem(str(path), check, f"{skipped} entries beyond the corrupt data were not checked")
        )


def _check_offset_index(
    seg: LogSegment, b: I64, data_end: int, damaged: bool, result: SegmentResult
) -> None:
    """Kafka's sanity check, then the layout rule of docs/kafka-format.md §3.3 for every entry.

    An entry (o, p) says: a chunk of batches appended together starts at byte p and o is an
    offset in it (Kafka writes the chunk's largest offset; recovery writes one batch's last
    offset). So p must be a batch start, o must be >= that batch's base offset (else a lookup of
    o would start after the record it wants) and <= the last offset of the batches before the next
    entry's position (else the entry describes a chunk that is not there).
    """
    index = seg.offset_index
    path = index.path
    if not path.exists():
        if seg.size:
            result.notes.append(Problem(str(path), "offset-index", "missing; Kafka rebuilds it"))
        return
    try:
        index.sanity_check()
    except CorruptIndexError as exc:
        result.add(path, "offset-index", str(exc))
    entries = [index.entry(i) for i in range(index.entries)]
    positions = np.array([p for _, p in entries], dtype=np.int64)
    starts = b[:, k.B_POS]
    # one vectorised search for all entries, then plain int compares (an index may be large)
    at = np.searchsorted(starts, positions).tolist()
    chunk_ends = np.searchsorted(starts, np.append(positions[1:], data_end)).tolist()
    batch_starts, bases, lasts = (
        b[:, c].tolist() for c in (k.B_POS, k.B_BASE_OFFSET, k.B_LAST_OFFSET)
    )
    messages: list[str] = []
    skipped = 0
    for i, (offset, position) in enumerate(entries):
        where = f"entry {i} (offset {offset}, position {position})"
        j = at[i]
        if damaged and position >= data_end:
            skipped += 1
        elif j >= len(batch_starts) or batch_starts[j] != position:
            past = f", past the end of the log (byte {data_end})" if position >= data_end else ""
            messages.append(f"{where}: position is not the start of a batch{past}")
        elif offset < bases[j]:
            messages.append(
                f"{where}: offset is below base offset {bases[j]} of the batch there; "
                "a lookup of it would start past its record"
            )
        elif offset > lasts[max(chunk_ends[i], j + 1) - 1]:
            messages.append(
                f"{where}: offset is above last offset {lasts[max(chunk_ends[i], j + 1) - 1]} "
                "of the batches between this entry and the next"
            )
    result.add_capped(path, "offset-index", messages)
    _skipped_note(path, "offset-index", skipped, result)


def _check_time_index(seg: LogSegment, b: I64, damaged: bool, result: SegmentResult) -> None:
    """Sanity check (length, monotonic), offsets inside the segment's batches, and timestamps
    no larger than the largest batch timestamp up to the entry's offset (Kafka's definition)."""
    index = seg.time_index
    path = index.path
    if not path.exists():
        if seg.size:
            result.notes.append(Problem(str(path), "time-index", "missing; Kafka recreates it"))
        return
    try:
        index.sanity_check()
    except CorruptIndexError as exc:
        result.add(path, "time-index", str(exc))
    entries = [index.entry(i) for i in range(index.entries)]
    offsets = np.array([o for _, o in entries], dtype=np.int64)
    at = (np.searchsorted(b[:, k.B_BASE_OFFSET], offsets, side="right") - 1).tolist()
    max_so_far = np.maximum.accumulate(b[:, k.B_MAX_TIMESTAMP]).tolist() if len(b) else []
    last = result.last_offset
    messages: list[str] = []
    skipped = 0
    for i, (timestamp, offset) in enumerate(entries):
        where = f"entry {i} (timestamp {timestamp}, offset {offset})"
        j = at[i]
        if damaged and (last is None or offset > last):
            skipped += 1
        elif last is None or j < 0 or offset > last:
            messages.append(
                f"{where}: offset is outside the segment's batches ({result.first_offset}..{last})"
            )
        elif timestamp > max_so_far[j]:
            messages.append(
                f"{where}: timestamp is above the largest batch timestamp "
                f"{max_so_far[j]} up to that offset"
            )
    result.add_capped(path, "time-index", messages)
    _skipped_note(path, "time-index", skipped, result)


def _check_txn_index(seg: LogSegment, result: SegmentResult) -> None:
    """Sanity check and entry order (docs/kafka-format.md §3.5); the entries are checked against
    the ABORT markers of the whole log by ``verify`` (``storage._txn_check``): a transaction's data
    can lie in earlier segments."""
    index = seg.txn_index
    path = index.path
    if not index.exists:
        return
    try:
        index.sanity_check()
        txns = index.all_aborted()
    except CorruptIndexError as exc:
        result.add(path, "txn-index", str(exc))
        return
    messages: list[str] = []
    prev = None
    for i, txn in enumerate(txns):
        where = (
            f"entry {i} (producer {txn.producer_id}, offsets {txn.first_offset}..{txn.last_offset})"
        )
        if txn.first_offset > txn.last_offset:
            messages.append(f"{where}: first offset is above the last offset")
        if prev is not None and txn.last_offset <= prev:
            messages.append(f"{where}: last offset does not exceed the previous entry's {prev}")
        prev = txn.last_offset
    result.add_capped(path, "txn-index", messages)
