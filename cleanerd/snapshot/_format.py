"""The snapshot file itself: v2 batches framed by SNAPSHOT_HEADER and SNAPSHOT_FOOTER records.

Kafka's layout (docs/kafka-format.md §6): a control batch whose first record is SNAPSHOT_HEADER
(value: int16 version 0, int64 lastContainedLogTimestamp, one empty tagged-field byte: 11 bytes),
the data batches, then a control batch holding SNAPSHOT_FOOTER (int16 version 0 + tagged byte: 3
bytes). Offsets inside the file start at 0 and count every record, control records included; the
partition leader epoch of every batch is the snapshot's epoch. A file without its footer was never
finished and is not a snapshot.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from cleanerd._errors import PickledWhole
from cleanerd.format import (
    Compression,
    ControlType,
    CorruptRecordError,
    Record,
    RecordBatch,
    build_batch,
    build_control_batch,
    iter_batches,
    parse_control_key,
)
from cleanerd.storage import (
    SNAPSHOT_PART_SUFFIX,
    SnapshotId,
    fsync_dir,
    map_regular,
    parse_name,
    snapshot_dir,
    snapshot_path,
)

_HEADER = struct.Struct(">hqB")  # version, lastContainedLogTimestamp, empty tagged fields
_FOOTER = struct.Struct(">hB")  # version, empty tagged fields
HEADER_VALUE_SIZE = _HEADER.size
FOOTER_VALUE_SIZE = _FOOTER.size
BATCH_RECORDS = 1000
"""Records per data batch: big enough for the codec to work, small enough to stream."""


class SnapshotError(PickledWhole, ValueError):
    """A snapshot file that is not a whole, valid snapshot; the message names file and why."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def codec_for(compression_type: str) -> Compression:
    """The codec of a topic's snapshots from its ``compression.type`` (``producer`` and
    ``uncompressed``: none, as a snapshot has no producer batches to follow)."""
    name = compression_type.strip().lower()
    if name in ("producer", "uncompressed", "none"):
        return Compression.NONE
    try:
        return Compression[name.upper()]
    except KeyError:
        raise ValueError(f"compression.type = {compression_type!r}: not a Kafka codec") from None


def header_value(last_contained_timestamp: int) -> bytes:
    return _HEADER.pack(0, last_contained_timestamp, 0)


def footer_value() -> bytes:
    return _FOOTER.pack(0, 0)


class SnapshotWriter:
    """Writes one snapshot to a ``.checkpoint.part`` file; :meth:`finish` makes it a snapshot.

    Records are renumbered from offset 1 (the header record is offset 0) and keep their
    timestamps, keys, values and headers. Leaving the ``with`` block on an error removes the part
    file, so only a finished, fsynced and renamed file ever carries the ``.checkpoint`` name.
    """

    def __init__(
        self,
        partition_dir: Path,
        sid: SnapshotId,
        *,
        last_contained_timestamp: int,
        compression: Compression = Compression.NONE,
        batch_records: int = BATCH_RECORDS,
    ) -> None:
        self.sid = sid
        self.partition_dir = Path(partition_dir)
        self.compression = compression
        self.batch_records = batch_records
        self.records = 0
        self.bytes = 0
        directory = snapshot_dir(self.partition_dir)
        directory.mkdir(exist_ok=True)
        prefix = sid.file_name(suffix="-")
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=SNAPSHOT_PART_SUFFIX, dir=directory)
        self.part = Path(name)
        self._file = os.fdopen(fd, "wb")
        self._next_offset = 0
        self._pending: list[Record] = []
        self._write(
            build_control_batch(
                ControlType.SNAPSHOT_HEADER,
                header_value(last_contained_timestamp),
                offset=self._take_offset(),
                timestamp=last_contained_timestamp,
                partition_leader_epoch=sid.epoch,
            )
        )
        self._last_timestamp = last_contained_timestamp

    def _take_offset(self) -> int:
        offset = self._next_offset
        self._next_offset += 1
        return offset

    def _write(self, batch: bytes) -> None:
        self._file.write(batch)
        self.bytes += len(batch)

    def append(self, records: Iterable[Record]) -> None:
        """Add live records (each key's winner); written in batches of ``batch_records``."""
        for r in records:
            self._pending.append(
                Record(self._take_offset(), r.timestamp, r.key, r.value, r.headers)
            )
            if len(self._pending) >= self.batch_records:
                self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._write(
                build_batch(
                    self._pending,
                    compression=self.compression,
                    partition_leader_epoch=self.sid.epoch,
                )
            )
            self.records += len(self._pending)
            self._pending = []

    def finish(self) -> Path:
        """Footer, fsync, rename to the snapshot's name, fsync the directory."""
        self._flush()
        self._write(
            build_control_batch(
                ControlType.SNAPSHOT_FOOTER,
                footer_value(),
                offset=self._take_offset(),
                timestamp=self._last_timestamp,
                partition_leader_epoch=self.sid.epoch,
            )
        )
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        final = snapshot_path(self.partition_dir, self.sid)
        os.replace(self.part, final)
        fsync_dir(final.parent)
        return final

    def abort(self) -> None:
        """Drop the part file (a failed or abandoned write)."""
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.part)

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or not self._file.closed:
            self.abort()


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What a valid snapshot's framing says."""

    path: Path
    last_contained_timestamp: int
    records: int
    batches: int
    size: int


def _control(batch: RecordBatch, kind: ControlType, size: int, where: str) -> Record:
    if not batch.header.is_control or batch.header.records_count < 1:
        raise ValueError(f"the {where} batch (byte {batch.position}) is not a control batch")
    first = batch.records()[0]
    if parse_control_key(first.key) != kind:
        raise ValueError(
            f"the {where} batch (byte {batch.position}) does not start with {kind.name}"
        )
    if first.value is None or len(first.value) != size:
        got = "null" if first.value is None else f"{len(first.value)} bytes"
        raise ValueError(f"{kind.name} value must be {size} bytes, got {got}")
    return first


class SnapshotReader:
    """A validated snapshot, open for streaming its records (a context manager).

    Opening checks the whole file before anything is trusted: every batch's CRC, the header
    first, the footer last with nothing after it, no control batch between, and the numbering
    the writer gives (``_check_numbering``). Only a regular file is opened (no symlink followed,
    no FIFO waited on). ``sid`` is the id the file must match, by default the one its name
    gives (none for another name). Raises :class:`SnapshotError` naming the file and the problem.
    """

    def __init__(self, path: Path, sid: SnapshotId | None = None) -> None:
        self.path = Path(path)
        self.sid: SnapshotId | None = sid or parse_name(self.path.name)
        self._map: mmap.mmap | None = None
        try:
            self._map, st = map_regular(self.path)
        except OSError as e:
            raise SnapshotError(self.path, f"cannot read: {e.strerror or e}") from e
        size = st.st_size
        if self._map is None:
            raise SnapshotError(self.path, "empty file")
        try:
            self._batches = list(iter_batches(self._map, path=str(self.path)))
            self.info = self._validate(size)
        except CorruptRecordError as e:
            self.close()
            at = "" if e.position is None else f"at byte {e.position}: "
            raise SnapshotError(self.path, at + e.reason) from e
        except ValueError as e:
            self.close()
            raise SnapshotError(self.path, str(e)) from e

    def _validate(self, size: int) -> SnapshotInfo:
        batches = self._batches
        if len(batches) < 2:
            raise ValueError("no footer: the snapshot was never finished")
        head = _control(batches[0], ControlType.SNAPSHOT_HEADER, HEADER_VALUE_SIZE, "first")
        assert head.value is not None
        version, last_ts, _ = _HEADER.unpack(head.value)
        if version != 0:
            raise ValueError(f"SNAPSHOT_HEADER version {version}, only 0 is known")
        last = batches[-1]
        if not last.header.is_control:
            raise ValueError("no footer: the snapshot was never finished")
        _control(last, ControlType.SNAPSHOT_FOOTER, FOOTER_VALUE_SIZE, "last")
        end = last.position + last.size
        if end != size:
            raise ValueError(f"{size - end} bytes after the footer (byte {end})")
        records = 0
        for b in batches[1:-1]:
            if b.header.is_control:
                raise ValueError(f"a control batch inside the data (byte {b.position})")
            records += b.header.records_count
        self._check_numbering(records)
        return SnapshotInfo(self.path, last_ts, records, len(batches), size)

    def _check_numbering(self, records: int) -> None:
        """The writer numbers every record from 0 (header 0, data 1..n, footer n + 1), in
        batches whose offsets follow each other, all with the snapshot's epoch. A batch cut out
        (or put twice) leaves a hole (or an overlap) even when every CRC is valid, and the
        footer's offset is the record count the file was written with. A snapshot of the
        offsets below its end offset cannot hold more records than that end offset."""
        expected = 0
        for b in self._batches:
            h = b.header
            if h.base_offset != expected:
                what = "a batch is missing" if h.base_offset > expected else "offsets overlap"
                raise ValueError(
                    f"the batch at byte {b.position} starts at offset {h.base_offset}, "
                    f"not {expected}: {what}"
                )
            if h.last_offset - h.base_offset + 1 != h.records_count:
                raise ValueError(
                    f"the batch at byte {b.position} holds {h.records_count} records over "
                    f"offsets {h.base_offset}..{h.last_offset}"
                )
            if self.sid is not None and h.partition_leader_epoch != self.sid.epoch:
                raise ValueError(
                    f"the batch at byte {b.position} has leader epoch "
                    f"{h.partition_leader_epoch}, the name says {self.sid.epoch}"
                )
            expected = h.last_offset + 1
        if self.sid is not None and records > self.sid.end_offset:
            raise ValueError(
                f"{records} records, more than the {self.sid.end_offset} offsets below the end "
                "offset the name gives"
            )

    @property
    def buffer(self) -> mmap.mmap:
        """The file's bytes (valid until :meth:`close`)."""
        if self._map is None:
            raise SnapshotError(self.path, "read after close")
        return self._map

    def records(self) -> Iterator[Record]:
        """The snapshot's data records, in file order (a batch at a time)."""
        for batch in self._batches[1:-1]:
            yield from batch.records()

    def close(self) -> None:
        self._batches = []
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
