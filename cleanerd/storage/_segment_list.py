"""Opening a partition's segments, and noticing that another process changed which they are.

A writer process keeps LogSegment objects between appends; meanwhile the daemon may roll the
active segment, swap cleaned segments in or delete old ones. On each outermost acquire of the
writer lock PartitionLog asks ``stale``: cheap (two ``stat`` calls) when nothing changed, since
creating, renaming or removing a file changes the dir's mtime. Only then is the dir listed and
the list reconciled: objects whose ``.log`` is the same inode are kept, new or replaced ones are
opened afresh, vanished ones closed and dropped.

Directory mtimes tick with a coarse clock, so a change made within the same tick as the one we
saw could leave the mtime unchanged; as in git's "racy" index entries, a snapshot taken less
than ``RACY_NS`` after the dir's mtime is not trusted and the dir is listed again.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cleanerd.format import CorruptRecordError, kernels as k
from cleanerd.storage._chunks import iter_chunks
from cleanerd.storage._errors import CorruptIndexError
from cleanerd.storage._regular import segment_logs
from cleanerd.storage._segment import LogSegment
from cleanerd.topics import LogConfig

RACY_NS = 2_000_000_000  # covers filesystems with 1-2 s timestamps too


def list_logs(directory: Path) -> dict[int, int]:
    """Base offset -> inode of every ``<digits>...log`` in the dir (Kafka's loader's rule);
    NotRegularFileError when a file named like a segment file is a symlink or a FIFO."""
    return {base: ino for base, (_, ino) in segment_logs(directory).items()}


def check_offsets_across(
    segments: Sequence[LogSegment], walked: Mapping[int, tuple[int, int] | None] | None = None
) -> None:
    """Every segment but the last (the active one) is whole and its offsets lie below the next
    segment's base offset. A base offset is not covered by the CRC, so a damaged one passes
    every batch check; cleaning across it would rewrite offsets out of order (or hide the
    damage). The walk is over the batch headers from the start of each file (an index entry
    may point anywhere), a chunk at a time with each chunk's pages given back
    (``chunks.iter_chunks``): walked whole, a segment's mapped pages stayed resident until the
    walk ended, 108 MiB more peak memory for a 120 MB segment.

    ``walked`` (by ``id()``) has the last batch, (last offset, position), of segments a walk
    from byte 0 already checked whole, unchanged since: those are not walked again."""
    walked = walked or {}
    for seg, following in itertools.pairwise(segments):
        path = str(seg.log_path)
        if id(seg) in walked:
            last = walked[id(seg)]
        else:
            last = None
            arr = seg.view(keep=False)
            for batches in iter_chunks(
                arr, path=path, prev_last_offset=seg.base_offset - 1, check_crc=False
            ):  # raises at the first bad batch: nothing is cut short in an inactive segment
                last = int(batches[-1, k.B_LAST_OFFSET]), int(batches[-1, k.B_POS])
        if last is None:
            continue
        problem = offsets_overlap(last[0], following.base_offset, following.log_path.name)
        if problem is not None:
            raise CorruptRecordError(problem, path=path, position=last[1])


def offsets_overlap(last_offset: int, next_base: int, next_name: str) -> str | None:
    """Offsets rise across segments: a segment's last offset must be below the next segment's
    base offset. What is wrong when it is not (None when it is), for every reader that checks
    it: the cleaner (``check_offsets_across``), ``cleanerd verify`` and ``cleanerd dump``."""
    if last_offset < next_base:
        return None
    return (
        f"the segment's last batch ends at offset {last_offset}, not below the base offset "
        f"{next_base} of the next segment {next_name}"
    )


def open_segment(
    directory: Path, base: int, config: LogConfig, created_ms: int
) -> tuple[LogSegment, str | None]:
    """Open a segment, rebuilding a missing or corrupt offset/time index from its ``.log``;
    the second value says what was rebuilt and why (None when nothing was)."""
    seg = LogSegment(directory, base, config, created_ms=created_ms)
    reason = None
    if seg.size and not seg.offset_index.path.exists():
        reason = "missing"
    else:
        try:
            seg.sanity_check()
        except CorruptIndexError as e:
            reason = str(e)
    if reason is None:
        return seg, None
    seg.rebuild_indexes()
    return seg, f"{seg.log_path.name}: {reason}"


@dataclass(frozen=True, slots=True)
class _Snapshot:
    ino: int
    mtime_ns: int
    taken_ns: int  # wall clock just before the stat
    logs: dict[int, int]

    @property
    def racy(self) -> bool:
        return self.taken_ns - self.mtime_ns < RACY_NS


class SegmentWatch:
    """What the partition dir looked like when this process's segment list last matched it."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._snap: _Snapshot | None = None

    def remember(self) -> dict[int, int]:
        """Record the dir as matching the current segment list (call with the lock held)."""
        now = time.time_ns()
        st = os.stat(self.directory)
        self._snap = _Snapshot(st.st_ino, st.st_mtime_ns, now, list_logs(self.directory))
        return self._snap.logs

    def stale(self, segments: Sequence[LogSegment]) -> bool:
        """Whether the dir may have changed since ``remember`` (False before the first one)."""
        snap = self._snap
        if snap is None or not segments:
            return False
        st = os.stat(self.directory)
        return (
            (st.st_ino, st.st_mtime_ns) != (snap.ino, snap.mtime_ns)
            or snap.racy
            or not segments[-1].log_path.exists()
        )

    def reconcile(
        self, segments: Sequence[LogSegment], open_segment: Callable[[int], LogSegment]
    ) -> list[LogSegment] | None:
        """The segment list the dir holds now, or None when ours still matches it.

        ``open_segment(base)`` opens a segment from disk. The active segment is reopened when
        another process rolled it, so its final time-index entry is read back.
        """
        before = self._snap.logs if self._snap is not None else {}
        logs = self.remember()
        ours = {s.base_offset: s for s in segments}
        active = segments[-1].base_offset if segments else None
        newest = max(logs, default=None)
        if logs.keys() == ours.keys() and all(before.get(b) == i for b, i in logs.items()):
            return None
        fresh: list[LogSegment] = []
        for base in sorted(logs):
            seg = ours.pop(base, None)
            same_file = seg is not None and before.get(base) == logs[base]
            if seg is not None and same_file and not (base == active and base != newest):
                fresh.append(seg)
                continue
            if seg is not None:
                seg.close()
            fresh.append(open_segment(base))
        for seg in ours.values():
            seg.close()
        return fresh

    def settle(self) -> None:
        """At the outermost release: list again only if our own work changed the dir."""
        snap = self._snap
        if snap is None:
            return
        now = time.time_ns()
        st = os.stat(self.directory)
        if (st.st_ino, st.st_mtime_ns) == (snap.ino, snap.mtime_ns):
            self._snap = _Snapshot(snap.ino, snap.mtime_ns, now, snap.logs)
        else:
            self._snap = _Snapshot(st.st_ino, st.st_mtime_ns, now, list_logs(self.directory))
