"""A partition's log opened for reading only: nothing in its dir is created, renamed or written.

``PartitionLog`` is the writers' and the cleaner's: opening it finishes an interrupted swap,
rebuilds bad indexes, creates a first segment in an empty dir, and closing it flushes the
active segment's indexes (which creates them when missing). A command that only reads, such
as ``cleanerd snapshot load``, must also work on a read-only partition (a mounted backup, a
dir it may not write to), so this view does none of that:

- an interrupted swap (a ``.swap`` file) is refused, not finished: which segments hold the data
  is only known once a writer has recovered it;
- an offset index that is missing or fails its sanity check is not rebuilt but left out, and
  reads of that segment start at its first byte (slower, same result); a ``.txnindex`` that
  fails its check is refused, since aborted records would pass for committed ones;
- the segment list is read under the partition's writer lock (``flock`` on a read-only
  descriptor of the dir), so no swap of another process is half seen; the lock is let go once
  the segments are open (their files are mapped on read, and a swap only renames them).
"""

from __future__ import annotations

import os
from pathlib import Path

from cleanerd.format import LONG_MAX
from cleanerd.storage._checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    checkpointed_offset,
)
from cleanerd.storage._errors import CorruptIndexError, StorageError
from cleanerd.storage._files import SWAP_SUFFIX
from cleanerd.storage._index import OffsetIndex
from cleanerd.storage._logdir import partition_of
from cleanerd.storage._producer_state import (
    ProducerSnapshot,
    SegmentFold,
    fold_segment,
    take_snapshot,
)
from cleanerd.storage._segment import LogSegment
from cleanerd.storage._segment_list import list_logs
from cleanerd.storage._topic_partition import TopicPartition
from cleanerd.storage._writer_lock import PartitionWriterLock
from cleanerd.topics import LogConfig

__all__ = ["ReadOnlyLog"]


class ReadOnlyLog:
    """The segments and offsets of a partition dir, for readers (see the module doc).

    Offers what a reader of the state needs: ``segments``, ``log_start_offset``,
    ``log_end_offset``, ``high_watermark`` and ``last_stable_offset()``. A context manager;
    closing lets go of the segments' maps.
    """

    def __init__(self, directory: Path, config: LogConfig | None = None) -> None:
        self.directory = Path(directory)
        self.topic_partition: TopicPartition = partition_of(self.directory)
        self.config = config or LogConfig()
        self.skipped_indexes: list[str] = []
        self._producers: ProducerSnapshot | None = None
        lock = PartitionWriterLock(self.directory)
        try:
            with lock:
                self.segments: list[LogSegment] = self._open_segments()
        finally:
            lock.close()

    def _open_segments(self) -> list[LogSegment]:
        swaps = sorted(n for n in os.listdir(self.directory) if n.endswith(SWAP_SUFFIX))
        if swaps:
            raise StorageError(
                f"{self.directory}: an interrupted swap ({', '.join(swaps)}); reading it "
                "needs a writer to finish it first (cleanerd compact or the daemon)"
            )
        return [self._open_segment(base) for base in sorted(list_logs(self.directory))]

    def _open_segment(self, base: int) -> LogSegment:
        seg = LogSegment(self.directory, base, self.config)
        try:
            seg.txn_index.sanity_check()
        except CorruptIndexError as e:
            raise StorageError(
                f"{e}; aborted records cannot be told from committed ones until a writer "
                "rebuilds it (cleanerd compact or the daemon)"
            ) from None
        try:
            seg.offset_index.sanity_check()
            _, position = seg.offset_index.lookup(LONG_MAX)
            if position > seg.size:
                raise CorruptIndexError(f"{seg.offset_index.path}: points past the log's end")
        except CorruptIndexError as e:
            self.skipped_indexes.append(str(e))
            # an index with no entries (a name no file has): every lookup in this segment
            # starts at byte 0
            unread = seg.offset_index.path.with_name(seg.offset_index.path.name + ".unread")
            seg.offset_index = OffsetIndex(unread, base, self.config.segment_index_bytes)
        return seg

    def _checkpointed(self, name: str) -> int | None:
        return checkpointed_offset(self.directory.parent, name, self.topic_partition)

    @property
    def log_start_offset(self) -> int:
        """The checkpointed log start offset when it lies inside the log, else the first base
        (``PartitionLog``'s rule; an empty dir starts at the checkpoint, or 0)."""
        cp = self._checkpointed(LOG_START_OFFSET_CHECKPOINT)
        if not self.segments:
            return cp or 0
        first = self.segments[0].base_offset
        if cp is not None and first <= cp <= self.log_end_offset:
            return cp
        return first

    @property
    def log_end_offset(self) -> int:
        if not self.segments:
            return self._checkpointed(LOG_START_OFFSET_CHECKPOINT) or 0
        return self.segments[-1].next_offset()

    @property
    def high_watermark(self) -> int:
        """From ``replication-offset-checkpoint`` when the log dir has one, else the LEO."""
        leo = self.log_end_offset
        hw = self._checkpointed(REPLICATION_OFFSET_CHECKPOINT)
        return leo if hw is None else min(hw, leo)

    def last_stable_offset(self, fold: SegmentFold = fold_segment) -> int:
        """The high watermark, or the first offset of the oldest open transaction below it."""
        self._producers = take_snapshot(list(self.segments), fold, self._producers)
        return self._producers.state.last_stable_offset(self.high_watermark)

    def close(self) -> None:
        self._producers = None
        for seg in self.segments:
            seg.drop_map()

    def __enter__(self) -> ReadOnlyLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ReadOnlyLog({self.directory}, segments={len(self.segments)})"
