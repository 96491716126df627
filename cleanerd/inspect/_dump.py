"""What ``cleanerd dump`` prints, as plain dicts: one per output line, in file order.

Each file is a generator, so a 1 GiB segment streams: ``scan_batches`` walks the mapped file once
(one small row per batch) and records are decoded one batch at a time. A generator yields every
line that was valid and then raises the error that stopped it (:class:`CorruptRecordError`,
:class:`DumpError` or a ``StorageError``), so the caller can print both.

A live segment (``<base offset>.log`` in its partition dir) is also checked against its
neighbours with storage's own rules (``LogSegment.scan``: offsets rise from the base offset in
its name; ``offsets_overlap``: they stay below the next segment's base offset). Base
offsets are not covered by the CRC, so a damaged one passes every batch check but these; the
dump stops before the batch that breaks them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from cleanerd.format import (
    BatchHeader,
    BatchScan,
    ControlType,
    CorruptRecordError,
    EndTransactionMarker,
    Record,
    RecordBatch,
    kernels as k,
    parse_control_key,
    scan_batches,
)
from cleanerd.inspect._files import FileKind, segment_logs
from cleanerd.inspect._segment_checks import check_segment
from cleanerd.storage import (
    LOG_SUFFIX,
    TXN_ENTRY_SIZE,
    AbortedTxn,
    LogSegment,
    OffsetIndex,
    TimeIndex,
    map_readonly,
    offsets_overlap,
    open_regular,
    parse_base_offset,
    read_any_checkpoint,
    read_snapshot,
    segment_file,
)
from cleanerd.topics import LogConfig

Item = dict[str, object]
_DUMP_CHUNK_ENTRIES = 8192
_MARKERS = (ControlType.ABORT, ControlType.COMMIT)


class JsonLines:
    """Encodes items as compact JSON lines, exactly like ``json.dumps(item, separators=...)``.

    All records of a batch share one ``batch`` dict (always their last key), so it is encoded
    once per batch instead of once per record: that halves the cost of dumping a segment.
    """

    def __init__(self) -> None:
        self._encoder = json.JSONEncoder(separators=(",", ":"))
        self._batch: object = None
        self._batch_json = ""

    def __call__(self, item: Item) -> str:
        batch = item.get("batch")
        if batch is None:
            return self._encoder.encode(item)
        if batch is not self._batch:
            self._batch, self._batch_json = batch, self._encoder.encode(batch)
        head = self._encoder.encode({key: v for key, v in item.items() if key != "batch"})
        return f'{head[:-1]},"batch":{self._batch_json}}}'


class DumpError(Exception):
    """An index file that does not decode; the message names the file and byte position."""


def files_to_dump(path: Path, kind: FileKind) -> list[tuple[Path, FileKind]]:
    """A partition dir expands to its segments in offset order; anything else is itself."""
    if kind is FileKind.PARTITION_DIR:
        return [(log, FileKind.LOG) for _, log in segment_logs(path)]
    return [(path, kind)]


def dump_file(
    path: Path,
    kind: FileKind,
    *,
    batches: bool,
    values: bool,
    records: bool = True,
    max_bytes: int | None = None,
) -> Iterator[Item]:
    """The lines of one file (not a directory: expand those with :func:`files_to_dump`).
    ``records=False`` is Kafka's shallow iteration (batch lines only); ``max_bytes`` stops a
    ``.log`` before the first batch that does not end within that many bytes."""
    if kind is FileKind.LOG:
        return log_items(path, batches=batches, values=values, records=records, limit=max_bytes)
    if kind is FileKind.PRODUCER_SNAPSHOT:
        return producer_snapshot_items(path)
    if kind is FileKind.OFFSET_INDEX:
        return offset_index_items(path)
    if kind is FileKind.TIME_INDEX:
        return time_index_items(path)
    if kind is FileKind.TXN_INDEX:
        return txn_index_items(path)
    if kind is FileKind.CHECKPOINT:
        return checkpoint_items(path)
    raise ValueError(f"{path}: {kind.value} is not a single file")


# --- segments -----------------------------------------------------------------------------------
def batch_fields(header: BatchHeader, position: int) -> Item:
    """The batch fields in the order of Kafka's own JSON dump (``*.dump.jsonl`` fixtures)."""
    described = header.describe()
    return {
        "position": position,
        "size": header.size,
        "count": header.records_count,
        **{key: value for key, value in described.items() if key != "count"},
    }


def _text_or_none(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def record_item(record: Record, batch: Item, header: BatchHeader, *, values: bool) -> Item:
    """One record line; raises CorruptRecordError for a control record Kafka cannot parse."""
    key, value = record.key, record.value
    item: Item = {
        "type": "record",
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": None if key is None else _text_or_none(key),
        "key_hex": None if key is None else key.hex(),
        "value_len": -1 if value is None else len(value),
        "value_sha256": None if value is None else hashlib.sha256(value).hexdigest(),
        "tombstone": value is None,
        "headers": [
            {"key": hkey, "value_hex": None if hvalue is None else hvalue.hex()}
            for hkey, hvalue in record.headers
        ],
        "control": None,
    }
    if header.is_control:
        kind = parse_control_key(key)
        item["control"] = kind.name
        if kind in _MARKERS:
            item["coordinator_epoch"] = EndTransactionMarker.parse(kind, value).coordinator_epoch
    if values:
        text = None if value is None else _text_or_none(value)
        item["value"] = text
        if value is not None and text is None:
            item["value_hex"] = value.hex()
    item["batch"] = batch
    return item


@functools.lru_cache(maxsize=4)
def _live_segments(directory: Path, mtime_ns: int) -> tuple[int, ...]:
    """Base offsets of a partition dir's segments, listed once per change of the dir
    (``mtime_ns`` is part of the key), not once per segment of a 2,000-segment dump. A sibling
    that is not a regular file does not stop the dump of this one (dumping it is refused)."""
    return tuple(base for base, _ in segment_logs(directory, skip=True))


def live_segment(path: Path) -> tuple[LogSegment, tuple[int, str] | None] | None:
    """For a live segment: it, and the next segment's (base offset, file name) if any; None
    for any other ``.log`` (a ``.swap`` or ``.cleaned`` leftover, a copy elsewhere...).
    Read-only: opening a ``LogSegment`` only stats and reads files."""
    base = parse_base_offset(path.name)
    if base is None or not path.name.endswith(LOG_SUFFIX):
        return None
    live = _live_segments(path.parent, path.parent.stat().st_mtime_ns)
    seg = LogSegment(path.parent, base, LogConfig())
    if base not in live or seg.log_path.name != path.name:
        return None
    following = next((b for b in live if b > base), None)
    if following is None:
        return seg, None
    return seg, (following, segment_file(path.parent, following, LOG_SUFFIX).name)


def _overlap_at(scan: BatchScan, following: tuple[int, str] | None) -> tuple[int, str] | None:
    """(batch number, why) when the segment's offsets reach the next segment's base offset
    (storage's ``offsets_overlap``, as the cleaner checks it: on the last batch; offsets rise
    within a segment, so no earlier batch can overlap unless the last one does)."""
    if following is None or not len(scan):
        return None
    last = len(scan) - 1
    reason = offsets_overlap(int(scan.batches[last, k.B_LAST_OFFSET]), *following)
    return None if reason is None else (last, reason)


def log_items(
    path: Path, *, batches: bool, values: bool, records: bool = True, limit: int | None = None
) -> Iterator[Item]:
    """Batch lines (optional) and record lines of a ``.log``; raises at the first bad batch.

    A batch's records are decoded before anything of it is yielded, so a batch whose records do
    not decode is reported as the error instead of being half printed. A live segment's
    batches must also lie between its base offset and the next segment's (see the module doc).
    With ``limit``, a batch that does not end within ``limit`` bytes ends the dump quietly.
    """
    where = str(path)
    arr = map_readonly(path)
    view = arr if limit is None else arr[:limit]
    pair = live_segment(path)
    scan = scan_batches(view, path=where) if pair is None else pair[0].scan(view=view)
    whole = limit is None or limit >= len(arr)  # the rule is about the segment's end
    overlap = _overlap_at(scan, pair[1]) if pair is not None and whole else None
    last_good = -1
    for i in range(len(scan)):
        header = scan.header(i)
        position = int(scan.batches[i, k.B_POS])
        if overlap is not None and i == overlap[0]:
            raise CorruptRecordError(
                overlap[1], path=where, position=position, last_good_offset=last_good
            )
        fields = batch_fields(header, position)
        if batches or not records:
            yield {"type": "batch", **fields}
        if records:
            batch = RecordBatch(arr, scan.batches[i], header, where)
            try:
                lines = [record_item(r, fields, header, values=values) for r in batch.records()]
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    exc.reason, path=where, position=batch.position, last_good_offset=last_good
                ) from exc
            yield from lines
        last_good = header.last_offset
    error = scan.error
    if error is None or (limit is not None and limit < len(arr) and error.is_truncation):
        return
    if pair is not None and not len(scan):  # the scan counted the base offset as the last good
        hint = f" (the segment's base offset is {pair[0].base_offset})"
        order = error.reason.startswith("offsets not increasing")
        reason = error.reason + (hint if order else "")
        raise CorruptRecordError(reason, path=where, position=error.position)
    raise error


# --- indexes and checkpoints --------------------------------------------------------------------
def _check_tail(path: Path, entry_size: int) -> None:
    """DumpError (raised after the whole entries were printed) if a partial entry trails."""
    size = path.stat().st_size
    whole, tail = divmod(size, entry_size)
    if tail:
        raise DumpError(
            f"{path} at byte {whole * entry_size}: {tail} trailing bytes are not a whole "
            f"{entry_size}-byte entry (file length {size} is not a multiple of {entry_size})"
        )


def _base(path: Path) -> int:
    base = parse_base_offset(path.name)
    if base is None:
        raise DumpError(f"{path}: the file name does not start with the segment base offset")
    return base


def _entries(path: Path, size: int) -> Iterator[tuple[int, bytes]]:
    """The file's whole ``size``-byte entries with their numbers, read a chunk at a time: a dump
    prints an index of any length in bounded memory (the loaders bound what they load)."""
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:
        i = 0
        while chunk := f.read(size * _DUMP_CHUNK_ENTRIES):
            for start in range(0, len(chunk) - size + 1, size):
                yield i, chunk[start : start + size]
                i += 1


def offset_index_items(path: Path) -> Iterator[Item]:
    """``.index`` entries with absolute offsets, as Kafka's dump prints them."""
    base = _base(path)
    for _, raw in _entries(path, OffsetIndex.ENTRY_SIZE):
        offset, position = OffsetIndex.decode_entry(raw, base)
        yield {"type": "offset_index", "offset": offset, "position": position}
    _check_tail(path, OffsetIndex.ENTRY_SIZE)


def time_index_items(path: Path) -> Iterator[Item]:
    """``.timeindex`` entries with absolute offsets."""
    base = _base(path)
    for _, raw in _entries(path, TimeIndex.ENTRY_SIZE):
        timestamp, offset = TimeIndex.decode_entry(raw, base)
        yield {"type": "time_index", "timestamp": timestamp, "offset": offset}
    _check_tail(path, TimeIndex.ENTRY_SIZE)


def txn_index_items(path: Path) -> Iterator[Item]:
    """``.txnindex`` entries, decoded one by one so the good ones print before a bad one."""
    for i, raw in _entries(path, TXN_ENTRY_SIZE):
        try:
            txn = AbortedTxn.from_bytes(raw)
        except ValueError as exc:
            raise DumpError(f"{path} at byte {i * TXN_ENTRY_SIZE}: entry {i}: {exc}") from exc
        yield {
            "type": "txn_index",
            "producer_id": txn.producer_id,
            "first_offset": txn.first_offset,
            "last_offset": txn.last_offset,
            "last_stable_offset": txn.last_stable_offset,
        }
    _check_tail(path, TXN_ENTRY_SIZE)


def index_sanity(path: Path, kind: FileKind) -> str:
    """Kafka's ``--index-sanity-check``: the check a broker runs on start-up to decide whether
    to rebuild the index. The line to print; CorruptIndexError when it fails."""
    index = OffsetIndex(path, _base(path)) if kind is FileKind.OFFSET_INDEX else None
    if index is not None and index.entries == 0 and not index.too_long:
        return f"{path} is empty."
    (index or TimeIndex(path, _base(path))).sanity_check()
    return f"{path} passed sanity check."


def index_problems(path: Path) -> list[str]:
    """What ``verify`` finds wrong with this ``.index``/``.timeindex`` checked against its
    segment's ``.log`` (Kafka's ``--verify-index-only``); DumpError when there is no such log."""
    base = _base(path)
    log = segment_file(path.parent, base, LOG_SUFFIX)
    if not log.is_file():
        raise DumpError(f"{path}: no {log.name} beside it to verify the index against")
    target = path.resolve()
    return [
        problem.message
        for problem in check_segment(path.parent, base).problems
        if Path(problem.file).resolve() == target
    ]


def checkpoint_items(path: Path) -> Iterator[Item]:
    """Rows of a checkpoint file; the kind comes from the name (CheckpointError if it is bad)."""
    for row in read_any_checkpoint(path):
        yield {"type": "checkpoint", **row}


def producer_snapshot_items(path: Path) -> Iterator[Item]:
    """A producer-state ``.snapshot``'s entries; ``batch`` is None when it keeps none (Kafka
    prints the last batch's fields only then)."""
    for e in read_snapshot(path):
        yield {
            "type": "producer_snapshot",
            "producer_id": e.producer_id,
            "producer_epoch": e.epoch,
            "coordinator_epoch": e.coordinator_epoch,
            "current_txn_first_offset": None
            if e.current_txn_first_offset < 0
            else e.current_txn_first_offset,
            "last_timestamp": e.timestamp,
            "batch": None
            if e.last_offset < 0
            else {
                "first_sequence": e.first_sequence,
                "last_sequence": e.last_sequence,
                "last_offset": e.last_offset,
                "offset_delta": e.offset_delta,
                "timestamp": e.timestamp,
            },
        }
