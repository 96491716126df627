"""What ``cleanerd dump`` prints, as plain dicts: one per output line, in file order.

Each file is a generator, so a 1 GiB segment streams: ``scan_batches`` walks the mapped file once
(one small row per batch) and records are decoded one batch at a time. A generator yields every
line that was valid and then raises the error that stopped it (:class:`CorruptRecordError`,
:class:`DumpError` or a ``StorageError``), so the caller can print both.

A live segment (``<base offset>.log`` in its partition dir) is also checked against its
neighbours as ``verify`` checks it: its first batch may not start below the base offset in its
name, and its offsets must stay below the next segment's base offset. Base offsets are not
covered by the CRC, so a damaged one passes every batch check but these; the dump stops before
the first batch that breaks them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from cleanerd.format import kernels as k
from cleanerd.format.control import ControlType, EndTransactionMarker, parse_control_key
from cleanerd.format.errors import CorruptRecordError
from cleanerd.format.header import BatchHeader
from cleanerd.format.reader import RecordBatch, scan_batches
from cleanerd.format.records import Record
from cleanerd.inspect.files import FileKind, base_offset_of, map_readonly, segment_logs
from cleanerd.storage.checkpoints import read_any_checkpoint
from cleanerd.storage.files import LOG_SUFFIX
from cleanerd.storage.index import OffsetIndex, TimeIndex
from cleanerd.storage.txnindex import ENTRY_SIZE as TXN_ENTRY_SIZE
from cleanerd.storage.txnindex import AbortedTxn

Item = dict[str, object]
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


def dump_file(path: Path, kind: FileKind, *, batches: bool, values: bool) -> Iterator[Item]:
    """The lines of one file (not a directory: expand those with :func:`files_to_dump`)."""
    if kind is FileKind.LOG:
        return log_items(path, batches=batches, values=values)
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
def _live_segments(directory: Path, mtime_ns: int) -> tuple[tuple[int, str], ...]:
    """(base offset, name) of a partition dir's segments, listed once per change of the dir
    (``mtime_ns`` is part of the key), not once per segment of a 2,000-segment dump."""
    return tuple((base, log.name) for base, log in segment_logs(directory))


def segment_neighbours(path: Path) -> tuple[int, tuple[int, str] | None] | None:
    """For a live segment: its base offset, and the next segment's (base offset, name) if any;
    None for any other ``.log`` (a ``.swap`` or ``.cleaned`` leftover, a copy elsewhere...)."""
    base = base_offset_of(path)
    if base is None or not path.name.endswith(LOG_SUFFIX):
        return None
    live = _live_segments(path.parent, path.parent.stat().st_mtime_ns)
    if (base, path.name) not in live:
        return None
    return base, next(((b, name) for b, name in live if b > base), None)


def _offset_error(header: BatchHeader, bounds: tuple[int, tuple[int, str] | None]) -> str | None:
    """Why the batch breaks the rising offsets across segments, or None."""
    base, following = bounds
    if header.base_offset < base:
        return (
            f"batch base offset {header.base_offset} is below the segment's base offset {base} "
            "(its file name)"
        )
    if following is not None and header.last_offset >= following[0]:
        return (
            f"batch offsets {header.base_offset}..{header.last_offset} are not below the base "
            f"offset {following[0]} of the next segment {following[1]}"
        )
    return None


def log_items(path: Path, *, batches: bool, values: bool) -> Iterator[Item]:
    """Batch lines (optional) and record lines of a ``.log``; raises at the first bad batch.

    A batch's records are decoded before anything of it is yielded, so a batch whose records do
    not decode is reported as the error instead of being half printed. A live segment's
    batches must also lie between its base offset and the next segment's (see the module doc).
    """
    where = str(path)
    arr = map_readonly(path)
    scan = scan_batches(arr, path=where)
    bounds = segment_neighbours(path)
    last_good = -1
    for i in range(len(scan)):
        header = scan.header(i)
        position = int(scan.batches[i, k.B_POS])
        reason = None if bounds is None else _offset_error(header, bounds)
        if reason is not None:
            raise CorruptRecordError(
                reason, path=where, position=position, last_good_offset=last_good
            )
        fields = batch_fields(header, position)
        batch = RecordBatch(arr, scan.batches[i], header, where)
        try:
            lines = [record_item(r, fields, header, values=values) for r in batch.records()]
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                exc.reason, path=where, position=batch.position, last_good_offset=last_good
            ) from exc
        if batches:
            yield {"type": "batch", **fields}
        yield from lines
        last_good = header.last_offset
    scan.raise_error()


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
    base = base_offset_of(path)
    if base is None:
        raise DumpError(f"{path}: the file name does not start with the segment base offset")
    return base


def offset_index_items(path: Path) -> Iterator[Item]:
    """``.index`` entries with absolute offsets, as Kafka's dump prints them."""
    index = OffsetIndex(path, _base(path))
    for i in range(index.entries):
        offset, position = index.entry(i)
        yield {"type": "offset_index", "offset": offset, "position": position}
    _check_tail(path, OffsetIndex.ENTRY_SIZE)


def time_index_items(path: Path) -> Iterator[Item]:
    """``.timeindex`` entries with absolute offsets."""
    index = TimeIndex(path, _base(path))
    for i in range(index.entries):
        timestamp, offset = index.entry(i)
        yield {"type": "time_index", "timestamp": timestamp, "offset": offset}
    _check_tail(path, TimeIndex.ENTRY_SIZE)


def txn_index_items(path: Path) -> Iterator[Item]:
    """``.txnindex`` entries, decoded one by one so the good ones print before a bad one."""
    data = path.read_bytes()
    for i in range(len(data) // TXN_ENTRY_SIZE):
        start = i * TXN_ENTRY_SIZE
        try:
            txn = AbortedTxn.from_bytes(data[start : start + TXN_ENTRY_SIZE])
        except ValueError as exc:
            raise DumpError(f"{path} at byte {start}: entry {i}: {exc}") from exc
        yield {
            "type": "txn_index",
            "producer_id": txn.producer_id,
            "first_offset": txn.first_offset,
            "last_offset": txn.last_offset,
            "last_stable_offset": txn.last_stable_offset,
        }
    _check_tail(path, TXN_ENTRY_SIZE)


def checkpoint_items(path: Path) -> Iterator[Item]:
    """Rows of a checkpoint file; the kind comes from the name (CheckpointError if it is bad)."""
    for row in read_any_checkpoint(path):
        yield {"type": "checkpoint", **row}
