"""One log segment: the ``.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex``.

Appends follow Kafka's ``LogSegment.append``: an offset and a time index entry are added before
a chunk when more than ``index.interval.bytes`` were written since the last entry. Every read
stats the file first (a writer may have appended since), so it sees every complete batch; a map
and the last batch's end are reused while the file is unchanged (writers only append).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cleanerd.format import (
    INT_MAX,
    LONG_MAX,
    U8,
    BatchHeader,
    BatchScan,
    kernels as k,
    layout as at,
    scan_batches,
)
from cleanerd.storage._chunks import iter_chunks, pages_are_kept
from cleanerd.storage._errors import CorruptIndexError, OffsetOutOfRangeError, StorageError
from cleanerd.storage._files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from cleanerd.storage._header_summary import summarise_headers
from cleanerd.storage._index import OffsetIndex, TimeIndex
from cleanerd.storage._kept_maps import MAPS
from cleanerd.storage._regular import kind_of, open_regular, refusal, view_regular
from cleanerd.storage._txnindex import TXN_INDEX_MIN_BOUND, TransactionIndex
from cleanerd.topics import LogConfig

_EMPTY = np.zeros(0, dtype=np.uint8)


def _temp(path: Path) -> Path:
    """Where an index is rebuilt before it replaces ``path`` (Kafka's loader ignores it)."""
    return path.with_name(path.name + ".tmp")


FileKey = tuple[int, int, int]
"""(inode, size, mtime_ns) of a ``.log`` file: what a cached read of it is valid for."""


class LogSegment:
    """A segment on disk, named by its base offset and an optional temporary suffix."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        temp_suffix: str = "",
        created_ms: int = 0,
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.temp_suffix = temp_suffix
        self.created_ms = created_ms
        self.log_path = segment_file(self.directory, base_offset, LOG_SUFFIX, temp_suffix)
        self.offset_index = OffsetIndex(
            segment_file(self.directory, base_offset, INDEX_SUFFIX, temp_suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self.time_index = TimeIndex(
            segment_file(self.directory, base_offset, TIME_INDEX_SUFFIX, temp_suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self.txn_index = TransactionIndex(
            segment_file(self.directory, base_offset, TXN_INDEX_SUFFIX, temp_suffix),
            base_offset,
            max_bytes=lambda: max(self._size, TXN_INDEX_MIN_BOUND),
        )
        self._fd: int | None = None
        self._size = self._regular_size()
        self._map: tuple[tuple[int, int], U8] | None = None  # ((inode, size), view)
        self._tail: tuple[tuple[FileKey, int], tuple[int, int]] | None = None  # last_batch_end
        self._bytes_since_index = 0
        self._max_ts_so_far: int | None = None
        self._offset_of_max_ts = base_offset
        self._rolling_ts: int | None = None

    # --- creation ---------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        temp_suffix: str = "",
        created_ms: int = 0,
    ) -> LogSegment:
        """A new, empty segment (fails if its ``.log`` already exists)."""
        path = segment_file(Path(directory), base_offset, LOG_SUFFIX, temp_suffix)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            raise StorageError(f"segment file {path} already exists") from None
        os.close(fd)
        return cls(directory, base_offset, config, temp_suffix=temp_suffix, created_ms=created_ms)

    def _regular_size(self) -> int:
        """Size of the ``.log`` (0 when absent); NotRegularFileError for a symlink or FIFO."""
        try:
            st = os.lstat(self.log_path)
        except FileNotFoundError:
            return 0
        kind = kind_of(st.st_mode)
        if kind is not None:
            raise refusal(self.log_path, kind)
        return st.st_size

    # --- reading ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    def refresh_size(self) -> int:
        """Re-read the file size (another writer may have appended)."""
        return self.file_key()[1]

    def file_key(self) -> FileKey:
        """The ``.log`` file's (inode, size, mtime_ns) now; refreshes ``size``."""
        st = os.stat(self.log_path)
        self._size = st.st_size
        return st.st_ino, st.st_size, st.st_mtime_ns

    def view(self, *, keep: bool = True) -> U8:
        """A read-only ``uint8`` view of the whole ``.log`` file (mmapped), kept while the
        file's inode and size are unchanged (the cleaner's walks release its pages as they go).
        ``keep=False``: a map of its own, for a walk that would leave the whole file resident,
        except within ``pages_kept``, where every walk of a cleaning shares the kept map: the
        producer-state walk, the offsets check and both passes fault each page in once."""
        return self._view(self.file_key(), keep or pages_are_kept())

    def _view(self, key: FileKey, keep: bool = True) -> U8:
        ino, size, _ = key
        if size == 0:
            return _EMPTY
        cached = self._map
        if keep and cached is not None and cached[0] == (ino, size):
            MAPS.touch(self)
            return cached[1]
        arr, st = view_regular(self.log_path)  # a rename since the stat shows in st
        self._size = st.st_size
        if st.st_size == 0:
            return _EMPTY
        if keep:
            self._map = ((st.st_ino, st.st_size), arr)
            MAPS.touch(self)  # may evict the least recently used segment's map
        return arr

    def scan(
        self, start_position: int = 0, *, check_crc: bool = True, view: U8 | None = None
    ) -> BatchScan:
        """Every batch from ``start_position``, with the first problem (if any) located.

        ``view`` is a map the caller already holds (so positions refer to that same map).
        """
        return scan_batches(
            self.view(keep=False) if view is None else view,
            start=start_position,
            path=str(self.log_path),
            check_crc=check_crc,
            prev_last_offset=self.base_offset - 1 if start_position == 0 else -1,
        )

    def read_from(self, offset: int, *, check_crc: bool = True) -> tuple[U8, BatchScan]:
        """Batches from the one holding ``offset`` (index lookup, then a scan)."""
        _, position = self.offset_index.lookup(offset)
        arr = self.view(keep=False)
        scan = scan_batches(arr, start=position, path=str(self.log_path), check_crc=check_crc)
        keep = scan.batches[:, k.B_LAST_OFFSET] >= offset
        first = int(np.argmax(keep)) if keep.any() else scan.batches.shape[0]
        return arr, BatchScan(scan.batches[first:], scan.end, scan.error)

    def last_batch_end(self) -> tuple[int, int]:
        """(next offset, end position) of the last complete batch, starting at the last index entry.

        The next offset is the base offset when the segment has no complete batch. Kept while
        the file and the index are unchanged: a cleaning asks for it several times.
        """
        file = self.file_key()
        key = (file, self.offset_index.entries)
        tail = self._tail
        if tail is not None and tail[0] == key:
            return tail[1]
        _, position = self.offset_index.lookup(LONG_MAX)
        arr = self._view(file)
        walked = summarise_headers(arr, path=str(self.log_path), start=position)
        if walked.last_offset is None:
            result = (self.base_offset, position)
        else:
            result = (walked.last_offset + 1, walked.end)
        self._tail = (key, result)
        return result

    def next_offset(self) -> int:
        """Offset after the last record of this segment."""
        return self.last_batch_end()[0]

    def first_batch_timestamp(self) -> int | None:
        """Max timestamp of the first batch (Kafka's rollingBasedTimestamp); None if empty."""
        if self._rolling_ts is None and self._size >= k.HEADER_SIZE:
            with os.fdopen(open_regular(self.log_path, os.O_RDONLY), "rb") as f:  # one header
                head = f.read(k.HEADER_SIZE)
            if len(head) == k.HEADER_SIZE and head[at.MAGIC_AT] == k.MAGIC_V2:
                self._rolling_ts = BatchHeader.parse(head).max_timestamp
        return self._rolling_ts

    @property
    def largest_timestamp(self) -> int:
        """Kafka's largestTimestamp: the last time-index entry, else the file's mtime."""
        ts, _ = self.time_index.last_entry
        if self._max_ts_so_far is not None:
            ts = max(ts, self._max_ts_so_far)
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return self.log_path.stat().st_mtime_ns // 1_000_000

    # --- writing ----------------------------------------------------------------------------
    def _load_max_timestamp(self) -> None:
        if self._max_ts_so_far is None:
            ts, off = self.time_index.last_entry
            self._max_ts_so_far, self._offset_of_max_ts = ts, off

    def can_hold(self, largest_offset: int) -> bool:
        """Whether ``largest_offset`` fits the 32-bit relative offsets of the indexes."""
        return 0 <= largest_offset - self.base_offset <= INT_MAX

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
    ) -> None:
        """Append whole batches, adding index entries as Kafka does."""
        if not self.can_hold(largest_offset):
            raise OffsetOutOfRangeError(
                f"offset {largest_offset} does not fit segment {self.log_path} "
                f"(base {self.base_offset}, 32-bit relative offsets)"
            )
        if not data:
            return
        self._tail = None  # mtime may tick too coarsely to tell this write from the last
        self._load_max_timestamp()
        if self._size == 0:
            self._rolling_ts = largest_timestamp
        position = self._size
        if self._fd is None:
            self._fd = open_regular(self.log_path, os.O_WRONLY | os.O_APPEND)
        written = os.write(self._fd, data)
        if written != len(data):
            raise StorageError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        assert self._max_ts_so_far is not None
        if largest_timestamp > self._max_ts_so_far:
            self._max_ts_so_far = largest_timestamp
            self._offset_of_max_ts = offset_of_max_timestamp
        if self._bytes_since_index > self.config.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_ts_so_far, self._offset_of_max_ts)
            self._bytes_since_index = 0
        self._bytes_since_index += len(data)
        self._size += len(data)

    def indexes_full(self) -> bool:
        return self.offset_index.is_full() or self.time_index.is_full()

    def index_entry_blocked(self) -> bool:
        """Whether the next append would add an index entry to a full ``.index`` or
        ``.timeindex`` (where Kafka's ``LogSegment.append`` fails)."""
        return self._bytes_since_index > self.config.index_interval_bytes and self.indexes_full()

    def on_become_inactive(self) -> None:
        """Final time-index entry (into the reserved slot) and flush, as Kafka does on roll."""
        self._load_max_timestamp()
        assert self._max_ts_so_far is not None
        if self._max_ts_so_far >= 0:
            self.time_index.maybe_append(
                self._max_ts_so_far, self._offset_of_max_ts, skip_full_check=True
            )
        self.flush()

    def flush(self) -> None:
        """fsync the log and the indexes (index files are created even when empty)."""
        if self._fd is not None:
            os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        if self.txn_index.exists:
            self.txn_index.flush()

    def drop_map(self) -> None:
        """Let go of the kept map (unmapped, its descriptor closed, once no caller holds a
        view); the next ``view`` maps the file again."""
        self._map = None
        MAPS.forget(self)

    def close(self) -> None:
        self.drop_map()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    # --- index maintenance ------------------------------------------------------------------
    def sanity_check(self) -> None:
        """Kafka's load-time checks of the index files; CorruptIndexError names the file."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
        last_off, last_pos = self.offset_index.lookup(LONG_MAX)
        if last_pos > self._size:
            raise CorruptIndexError(
                f"corrupt index {self.offset_index.path}: entry for offset {last_off} points at "
                f"byte {last_pos}, beyond the {self._size}-byte log"
            )

    def rebuild_indexes(self) -> None:
        """Recreate ``.index`` and ``.timeindex`` from the ``.log`` (one entry per interval).

        Built under temporary names and renamed over the old files only once the whole
        ``.log`` has been read without a problem; otherwise the old files stay as they were
        and CorruptRecordError names the bad batch, so a caller never silently drops data.
        """
        self._tail = None
        size = self.config.segment_index_bytes
        offsets = OffsetIndex(_temp(self.offset_index.path), self.base_offset, size)
        times = TimeIndex(_temp(self.time_index.path), self.base_offset, size)
        for idx in (offsets, times):
            idx.delete()  # a leftover of an earlier attempt
        since = 0
        max_ts, max_ts_offset = -1, self.base_offset
        arr = self.view(keep=False)
        path = str(self.log_path)
        try:  # a chunk at a time: all of a segment's batch rows may take more than the file
            for b in iter_chunks(arr, path=path, prev_last_offset=self.base_offset - 1):
                for i in range(b.shape[0]):
                    if b[i, k.B_MAX_TIMESTAMP] > max_ts:
                        max_ts = int(b[i, k.B_MAX_TIMESTAMP])
                        max_ts_offset = int(b[i, k.B_LAST_OFFSET])
                    if since > self.config.index_interval_bytes:
                        offsets.append(int(b[i, k.B_LAST_OFFSET]), int(b[i, k.B_POS]))
                        times.maybe_append(max_ts, max_ts_offset)
                        since = 0
                    since += int(b[i, k.B_SIZE])
        except BaseException:
            for idx in (offsets, times):
                idx.delete()  # the old files stay as they were
            raise
        if max_ts >= 0:
            times.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self._max_ts_so_far, self._offset_of_max_ts = max_ts, max_ts_offset
        for new, old in ((offsets, self.offset_index), (times, self.time_index)):
            new.flush()
            old.close()
            new.rename_to(old.path)
        self.offset_index, self.time_index = offsets, times

    # --- files ------------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """The files of this segment that exist on disk."""
        paths = [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]
        return [p for p in paths if p.exists()]

    def change_suffix(self, new_temp_suffix: str) -> None:
        """Rename every file of the segment to another temporary suffix ("" = final names)."""
        self.close()
        for suffix, holder in (
            (INDEX_SUFFIX, self.offset_index),
            (TIME_INDEX_SUFFIX, self.time_index),
            (TXN_INDEX_SUFFIX, self.txn_index),
        ):
            holder.rename_to(
                segment_file(self.directory, self.base_offset, suffix, new_temp_suffix)
            )
        target = segment_file(self.directory, self.base_offset, LOG_SUFFIX, new_temp_suffix)
        os.replace(self.log_path, target)
        self.log_path = target
        self.temp_suffix = new_temp_suffix

    def set_last_modified(self, mtime_ns: int) -> None:
        """Give ``.log``, ``.index`` and ``.timeindex`` an mtime (Kafka leaves ``.txnindex``)."""
        for p in (self.log_path, self.offset_index.path, self.time_index.path):
            if p.exists():
                os.utime(p, ns=(mtime_ns, mtime_ns))

    def delete(self) -> None:
        self.close()
        for p in self.files():
            p.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self._size})"
