"""The daemon's per-partition metadata cache: a ``LogMeta`` per scan from stats, not rescans.

Each scan stats a partition dir; when its stamp (mtime, ctime, inode, size) is what the last
listing saw, and that listing was not racy (the dir's last change was ``RACY_NS`` older than the
scan, so a later change cannot share its timestamp), the names are the same and only the last
``.log`` (the active segment, the only one Kafka appends to) is stat'ed again; otherwise the dir
is listed and every ``.log`` stat'ed, and a listing with the same names and segment stats as the
last keeps the last meta (a dir a cleaning just swapped is racy for ``RACY_NS``: it costs a
listing per scan, not a new meta and plan). Inactive segments change only by a swap, a deletion or a
roll, each of which changes the dir (a partition whose last read failed is always listed, so an
in-place repair is seen). A segment whose (size, mtime, inode) did not change keeps its cached
walk, one that only grew (the active segment) is walked from where the last walk stopped,
anything else is walked again; a partition whose listing, active segment and checkpoint entries
are all unchanged keeps its ``PartitionMeta`` (nothing re-parsed, no objects made: an unchanged
partition costs two stats). The LSO needs the producer state only when some segment holds
transactional batches, and then only those segments (no other batch opens or ends a
transaction); its result is cached on their stats too. The log dir checkpoints are re-read only
when their stat changes.

Nothing here opens a ``PartitionLog``: opening may recover an interrupted swap, which only the
cleaning worker may do. One scan at a time: the manager serialises callers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from cleanerd.compaction import (
    LogMeta,
    SegmentMeta,
    SegmentWalk,
    producer_scans,
    segments_between,
    settled,
    summarise_cleaned,
    walk_segment,
)
from cleanerd.scheduling._failures import locate
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    StorageError,
    TopicPartition,
    offset_from_name,
    read_offset_checkpoint,
    scan_producer_state,
    segment_log_stats,
)

_NONE: Mapping[TopicPartition, int] = MappingProxyType({})
_CHECKPOINTS = (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What says a file changed: size, modification time, inode (a swap makes a new inode)."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(int(st.st_size), int(st.st_mtime_ns), int(st.st_ino))


@dataclass(frozen=True, slots=True)
class LogDirCheckpoints:
    """A log dir's offset checkpoints as read at the start of a scan."""

    cleaner: Mapping[TopicPartition, int] = field(default_factory=lambda: _NONE)
    log_start: Mapping[TopicPartition, int] = field(default_factory=lambda: _NONE)
    replication: Mapping[TopicPartition, int] = field(default_factory=lambda: _NONE)
    error: str | None = None  # a checkpoint file that does not parse


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """One partition as the last scan saw it; ``log`` is None when it was not (or could not be)
    walked: ``error`` says why when it could not."""

    tp: TopicPartition
    directory: Path
    size_bytes: int
    fingerprint: int  # changes when a file appears, goes, or an inactive segment changes
    log: LogMeta | None = None
    segment_records: tuple[int, ...] = ()  # per segment of ``log``
    transactional: bool = False
    error: str | None = None
    notes: tuple[str, ...] = ()
    error_file: str | None = None  # where ``error`` happened, when it says
    error_position: int | None = None  # byte position in ``error_file``

    def records_between(self, from_offset: int, to_offset: int) -> int:
        """Records in the segments Kafka's ``values(from, to)`` covers (sizing the offset map)."""
        if self.log is None:
            return 0
        chosen = {s.base_offset for s in segments_between(self.log, from_offset, to_offset)}
        return sum(
            r
            for s, r in zip(self.log.segments, self.segment_records, strict=True)
            if s.base_offset in chosen
        )


def partition_log_meta(
    tp: TopicPartition,
    segments: list[SegmentMeta],
    *,
    log_start: int | None,
    high_watermark: int | None,
    cleaner_checkpoint: int | None,
    first_unstable: int | None,
) -> LogMeta:
    """``LogMeta.from_log`` from what a partition's files say, without opening the log (which
    may write): its segments, its log dir's checkpoints and its oldest open transaction. Shared
    by the daemon's scans and ``cleanerd plan``, so both plan what opening would find."""
    if not segments:  # opening it would create an empty active segment at the log start
        segments = [SegmentMeta(log_start or 0, 0, 0, None, log_start or 0)]
    leo = segments[-1].next_offset
    start = log_start
    if start is None or not segments[0].base_offset <= start <= leo:
        start = segments[0].base_offset
    high = leo if high_watermark is None else min(high_watermark, leo)
    return LogMeta(
        topic_partition=tp,
        segments=tuple(segments),
        log_start_offset=start,
        log_end_offset=leo,
        last_stable_offset=high if first_unstable is None else min(first_unstable, high),
        checkpoint=cleaner_checkpoint,
    )


RACY_NS = 2_000_000_000
"""A dir changed less than this long before a scan may change again within the same timestamp
(file systems stamp at the kernel's tick, not at each nanosecond): its listing is not trusted
for the next scan (git's "racy" rule). Generous against ticks and small clock steps."""

DirStamp = tuple[int, int, int, int]  # mtime_ns, ctime_ns, inode, size of a partition dir


def _dir_stamp(st: os.stat_result) -> DirStamp:
    return (int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino), int(st.st_size))


@dataclass(slots=True)
class _Listing:
    names: list[str] = field(default_factory=list)
    # (base offset, path, stamp): paths stay strings, Path objects cost more than the stat
    logs: list[tuple[int, str, FileStamp]] = field(default_factory=list)


def _list(directory: Path) -> _Listing:
    """The dir's names and its segments; NotRegularFileError (storage's rule, the partition's
    error) when a file named like a segment file is a symlink or a FIFO."""
    out = _Listing()
    found = segment_log_stats(directory, names=out.names)
    out.logs = sorted((base, path, FileStamp.of(st)) for base, (path, st) in found.items())
    return out


@dataclass(slots=True)
class _Known:
    """A partition dir as the last scan listed it, and what that scan made of it."""

    stamp: DirStamp
    trusted: bool  # not racy: the same stamp at the next scan means the same names
    listing: _Listing
    fingerprint: int
    paths: tuple[str, ...]  # of ``listing.logs``, for ``end_scan``
    key: tuple[object, ...] | None = None  # what ``meta`` was made from
    meta: PartitionMeta | None = None


def _same_listing(before: _Listing, now: _Listing) -> bool:
    """The same names and the same segment stats: a meta made from ``before`` holds for ``now``
    (its other inputs, the checkpoint entries, are in ``_Known.key``)."""
    return before.logs == now.logs and sorted(before.names) == sorted(now.names)


def _fingerprint(listing: _Listing) -> int:
    """Names of all files and stats of the inactive segments: appends to the active segment do
    not count (they are not what made a cleaning fail), a roll, a swap or a repair does."""
    inactive = tuple((path, st.size, st.mtime_ns) for _, path, st in listing.logs[:-1])
    return hash((tuple(sorted(listing.names)), inactive))


class MetadataCache:
    """Cached segment walks, LSOs and checkpoints across scans; counters for tests and bench."""

    def __init__(self) -> None:
        self._walks: dict[str, tuple[FileStamp, SegmentWalk]] = {}
        self._lso: dict[Path, tuple[object, int | None]] = {}
        self._checkpoints: dict[Path, tuple[FileStamp | None, Mapping[TopicPartition, int]]] = {}
        self._seen: set[Path] = set()  # partition dirs this scan read
        self._seen_logs: set[str] = set()  # segment files this scan read
        self._known: dict[Path, _Known] = {}  # partition dirs as last listed
        self._scan_ns = 0  # wall clock at the scan's start (``RACY_NS``)
        # per log dir, its entries' names -> partition and Path, or None (not a partition's
        # name): the survey's listing keeps them from one survey to the next
        self.dir_names: dict[Path, dict[str, tuple[TopicPartition, Path] | None]] = {}
        self.walks = 0  # segment header walks (full or resumed)
        self.summaries = 0  # cleaned segments read from their indexes instead
        self.lso_walks = 0  # producer-state walks
        self.checkpoint_reads = 0
        self.listings = 0  # partition dirs listed (the others: a stat of the dir and the active)

    # --- scans ------------------------------------------------------------------------------
    def begin_scan(self) -> None:
        self._seen = set()
        self._seen_logs = set()
        self._scan_ns = time.time_ns()  # file times are wall clock times

    def end_scan(self) -> None:
        """Forget segments and partitions this scan did not see (deleted, swapped out)."""
        # rebuilt only when something went: comparing the keys costs no Python per partition
        if not self._walks.keys() <= self._seen_logs:
            self._walks = {p: v for p, v in self._walks.items() if p in self._seen_logs}
        if not self._lso.keys() <= self._seen:
            self._lso = {d: v for d, v in self._lso.items() if d in self._seen}
        if not self._known.keys() <= self._seen:
            self._known = {d: v for d, v in self._known.items() if d in self._seen}

    # --- log dir checkpoints ----------------------------------------------------------------
    def _checkpoint(self, path: Path) -> Mapping[TopicPartition, int]:
        try:
            stamp: FileStamp | None = FileStamp.of(path.stat())
        except FileNotFoundError:
            stamp = None
        cached = self._checkpoints.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        entries: Mapping[TopicPartition, int] = _NONE
        if stamp is not None:
            self.checkpoint_reads += 1
            entries = MappingProxyType(read_offset_checkpoint(path))
        self._checkpoints[path] = (stamp, entries)
        return entries

    def checkpoints(self, log_dir: Path) -> LogDirCheckpoints:
        """The three offset checkpoints of ``log_dir`` (re-read only when their stat changed)."""
        try:
            cleaner, start, replication = (self._checkpoint(log_dir / n) for n in _CHECKPOINTS)
        except (StorageError, OSError) as e:
            return LogDirCheckpoints(error=str(e))
        return LogDirCheckpoints(cleaner, start, replication)

    # --- partitions -------------------------------------------------------------------------
    def read(
        self,
        directory: Path,
        tp: TopicPartition,
        checkpoints: LogDirCheckpoints,
        *,
        walk: bool = True,
    ) -> PartitionMeta:
        """The partition's metadata; ``walk=False`` only lists and stats (a topic the cleaner
        never compacts). Never raises for a bad partition: the error is in the result."""
        self._seen.add(directory)
        try:
            try:
                return self._read(directory, tp, checkpoints, walk)
            except FileNotFoundError:  # a file went away between listing and reading: once more
                return self._read(directory, tp, checkpoints, walk)
        except Exception as e:  # one bad partition must not stop the scan
            self._known.pop(directory, None)  # listed afresh next time
            file, position = locate(e)
            return PartitionMeta(
                tp,
                directory,
                0,
                0,
                error=f"{type(e).__name__}: {e}",
                error_file=file,
                error_position=position,
            )

    def _listing(self, directory: Path) -> _Known:
        """The dir's listing: the last one with its active segment stat'ed again when the dir
        did not change since (see the module docstring), else a new one."""
        stamp = _dir_stamp(os.stat(directory))  # before the listing: a change after is seen
        known = self._known.get(directory)
        if known is not None and known.trusted and known.stamp == stamp:
            logs = known.listing.logs
            if logs:
                base, path, before = logs[-1]
                now = FileStamp.of(os.stat(path, follow_symlinks=False))
                if now != before:
                    known.listing.logs = [*logs[:-1], (base, path, now)]
            return known
        self.listings += 1
        listing = _list(directory)
        trusted = stamp[1] < self._scan_ns - RACY_NS and stamp[0] < self._scan_ns - RACY_NS
        if known is not None and known.meta is not None and _same_listing(known.listing, listing):
            # Listed again (racy, or the dir's stamp moved) but nothing the meta was made of
            # changed: keep it, so a dir that changed in the last RACY_NS costs a listing per
            # scan, not a new meta and plan (a cleaned partition is racy for that long).
            known.stamp, known.trusted, known.listing = stamp, trusted, listing
            return known
        paths = tuple(path for _, path, _ in listing.logs)
        known = _Known(stamp, trusted, listing, _fingerprint(listing), paths)
        self._known[directory] = known
        return known

    def _read(
        self, directory: Path, tp: TopicPartition, checkpoints: LogDirCheckpoints, walk: bool
    ) -> PartitionMeta:
        known = self._listing(directory)
        listing, fingerprint = known.listing, known.fingerprint
        key = (
            walk,
            listing.logs[-1] if listing.logs else None,
            checkpoints.error,
            checkpoints.log_start.get(tp),
            checkpoints.replication.get(tp),
            checkpoints.cleaner.get(tp),
        )
        if known.meta is not None and known.key == key:
            if walk:
                self._seen_logs.update(known.paths)  # their walks are still needed
            return known.meta
        meta = self._read_listed(directory, tp, checkpoints, walk, listing, fingerprint)
        # a failed read is not kept: the next scan lists the dir again (an in-place repair)
        if meta.error is None:
            known.key, known.meta = key, meta
        else:
            known.trusted, known.key, known.meta = False, None, None
        return meta

    def _read_listed(
        self,
        directory: Path,
        tp: TopicPartition,
        checkpoints: LogDirCheckpoints,
        walk: bool,
        listing: _Listing,
        fingerprint: int,
    ) -> PartitionMeta:
        size = sum(st.size for _, _, st in listing.logs)
        if not walk:
            return PartitionMeta(tp, directory, size, fingerprint)
        if checkpoints.error is not None:
            return PartitionMeta(tp, directory, size, fingerprint, error=checkpoints.error)
        logs = listing.logs
        checkpoint = checkpoints.cleaner.get(tp)
        # A cleaning never passes the active segment's base: nothing is summarised on the word
        # of a checkpoint beyond it (Kafka's rules reset one past the log end to the start)
        clean_end = -1
        if checkpoint is not None and logs and checkpoint <= logs[-1][0]:
            clean_end = checkpoint
        nexts = [next_base for next_base, _, _ in logs[1:]]
        walks = [
            self._segment(
                base,
                path,
                stamp,
                active=i == len(nexts),
                # the next segment starts at or below the checkpoint: this one is cleaned whole
                cleaned_up_to=nexts[i] if i < len(nexts) and nexts[i] <= clean_end else None,
            )
            for i, (base, path, stamp) in enumerate(logs)
        ]
        # A corrupt segment is planned up to its bad batch, as ``cleanerd plan`` does, so the
        # partition's cleanable bytes still show (Kafka's uncleanable-bytes); ``error`` keeps
        # the manager from cleaning it.
        bad = next((w.error for w in walks if w.error is not None), None)
        txn = [
            (path, stamp)
            for (_, path, stamp), w in zip(listing.logs, walks, strict=True)
            if w.transactional
        ]
        log = partition_log_meta(
            tp,
            [w.meta for w in walks],
            log_start=checkpoints.log_start.get(tp),
            high_watermark=checkpoints.replication.get(tp),
            cleaner_checkpoint=checkpoints.cleaner.get(tp),
            first_unstable=self._first_unstable(directory, txn) if txn else None,
        )
        records = tuple(w.records for w in walks) or (0,)
        notes = tuple(str(w.torn_tail) for w in walks if w.torn_tail is not None)
        return PartitionMeta(
            tp,
            directory,
            size,
            fingerprint,
            log,
            records,
            bool(txn),
            None if bad is None else str(bad),
            notes,
            None if bad is None else bad.path,
            None if bad is None else bad.position,
        )

    def _segment(
        self,
        base: int,
        path: str,
        stamp: FileStamp,
        *,
        active: bool,
        cleaned_up_to: int | None = None,
    ) -> SegmentWalk:
        """The segment's walk: cached when unchanged, resumed when it only grew. For a segment
        wholly below the cleaner checkpoint (``cleaned_up_to``: the next segment's base offset)
        its summary from its indexes does (``compaction.summarise_cleaned``); for any other, a
        summary cached earlier is walked over."""
        self._seen_logs.add(path)
        cleaned = cleaned_up_to is not None
        cached = self._walks.get(path)
        if cached is not None and cached[0] == stamp and (cleaned or not cached[1].summary):
            walk = cached[1]
        else:
            result = None
            if cleaned_up_to is not None:
                result = summarise_cleaned(base, Path(path), cleaned_up_to, stamp.size)
                self.summaries += result is not None
            if result is None:
                grew = (
                    cached is not None
                    and cached[0].inode == stamp.inode
                    and (cached[0].size <= stamp.size)
                )
                resume = cached[1] if grew and cached is not None else None
                result = walk_segment(base, Path(path), torn_tail_ok=True, resume=resume)
                self.walks += 1
            walk = result.walk
            self._walks[path] = (FileStamp.of(result.stat), walk)
        return walk if active else settled(walk)

    def _first_unstable(self, directory: Path, txn: list[tuple[str, FileStamp]]) -> int | None:
        """First offset of the oldest open transaction, from the transactional segments only."""
        key = tuple(txn)
        cached = self._lso.get(directory)
        if cached is not None and cached[0] == key:
            return cached[1]
        self.lso_walks += 1
        scans = (
            scan
            for path, _ in txn
            for scan in producer_scans(offset_from_name(os.path.basename(path)), Path(path))
        )
        unstable = scan_producer_state(scans).first_unstable_offset
        self._lso[directory] = (key, unstable)
        return unstable
