"""``cleanerd verify``: a full, read-only integrity check of a log dir, a partition dir or one
segment (named by its ``.log`` or one of its index files, as Kafka's tools take segment files).

``PartitionLog`` is deliberately not used: opening it recovers interrupted swaps, truncates torn
tails and rebuilds bad indexes, which would both modify the files and hide the very problems this
is meant to report. Files are read directly (see ``segment_checks``); nothing is ever written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cleanerd.format import CorruptRecordError
from cleanerd.inspect._files import (
    FileKind,
    UnknownFileKindError,
    classify,
    segment_logs,
    strip_temp_suffix,
)
from cleanerd.inspect._segment_checks import Problem, SegmentResult, check_segment
from cleanerd.snapshot import SnapshotError, SnapshotReader
from cleanerd.storage import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    OFFSET_CHECKPOINTS,
    PARTITION_METADATA,
    SNAPSHOT_PART_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogDir,
    LogSegment,
    ProducerState,
    StorageError,
    irregular_segment_files,
    leftover_temp_files,
    map_readonly,
    offsets_overlap,
    parse_base_offset,
    parse_partition_dir_name,
    read_any_checkpoint,
    scan_snapshot_dir,
    segment_file,
    snapshot_dir,
    txn_index_problems,
    why_refused,
)
from cleanerd.topics import LogConfig

LOG_DIR = "log_dir"
PARTITION_DIR = "partition_dir"
SEGMENT = "segment"
_SEGMENT_FILES = (FileKind.LOG, FileKind.OFFSET_INDEX, FileKind.TIME_INDEX, FileKind.TXN_INDEX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass
class PartitionReport:
    """One partition dir: its segments' results plus partition-level problems."""

    name: str
    path: Path
    segments: list[SegmentResult] = field(default_factory=list)
    own_problems: list[Problem] = field(default_factory=list)
    own_notes: list[Problem] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return self.own_problems + [p for s in self.segments for p in s.problems]

    @property
    def notes(self) -> list[Problem]:
        return self.own_notes + [n for s in self.segments for n in s.notes]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_offset(self) -> int | None:
        return next((s.first_offset for s in self.segments if s.first_offset is not None), None)

    @property
    def last_offset(self) -> int | None:
        offsets = [s.last_offset for s in self.segments if s.last_offset is not None]
        return offsets[-1] if offsets else None

    def summary(self) -> str:
        """The per-partition line of the text report."""
        state = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        batches = sum(s.batches for s in self.segments)
        records = sum(s.records for s in self.segments)
        span = (
            "no records"
            if self.first_offset is None
            else f"offsets {self.first_offset}..{self.last_offset}"
        )
        notes = f", {len(self.notes)} note(s) (see --format json)" if self.notes else ""
        return (
            f"{self.name}: {state}: {len(self.segments)} segment(s), {batches} batch(es), "
            f"{records} record(s), {span}{notes}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": str(self.path),
            "ok": self.ok,
            "segments": len(self.segments),
            "batches": sum(s.batches for s in self.segments),
            "records": sum(s.records for s in self.segments),
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "problems": [p.to_json() for p in self.problems],
            "notes": [n.to_json() for n in self.notes],
        }


@dataclass
class VerifyReport:
    """The whole run: log-dir-level problems (checkpoints) and one report per partition."""

    path: Path
    kind: str
    partitions: list[PartitionReport] = field(default_factory=list)
    own_problems: list[Problem] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return self.own_problems + [p for part in self.partitions for p in part.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "ok": self.ok,
            "problem_count": len(self.problems),
            "problems": [p.to_json() for p in self.own_problems],
            "partitions": [part.to_json() for part in self.partitions],
        }

    def text_lines(self) -> list[str]:
        """One line per problem, a summary per partition, then a verdict (notes: JSON only)."""
        lines = [f"{p.file}: {p.check}: {p.message}" for p in self.own_problems]
        for part in self.partitions:
            lines += [f"{p.file}: {p.check}: {p.message}" for p in part.problems]
            lines.append(part.summary())
        count = len(self.problems)
        verdict = "OK" if self.ok else f"{count} problem(s) found"
        scope = (
            f"1 segment of {self.partitions[0].name}"
            if self.kind == SEGMENT
            else f"{len(self.partitions)} partition(s)"
        )
        lines.append(f"verify {self.path}: {verdict} ({scope})")
        return lines


def looks_like_partition_dir(path: Path) -> bool:
    """A dir holding segments is a partition dir, one holding partition dirs is a log dir; an
    empty one (or one with only swap leftovers) is a partition dir if its name says so."""
    if irregular_segment_files(path) or segment_logs(path):
        return True
    if _has_partitions(path):
        return False
    return bool(leftover_temp_files(path)) or parse_partition_dir_name(path.name) is not None


def _has_partitions(path: Path) -> bool:
    return any(p.is_dir() and parse_partition_dir_name(p.name) for p in path.iterdir())


def verify_path(path: Path) -> VerifyReport:
    """Verify a log dir (all partitions and its checkpoints), a single partition dir, or the
    segment a file names. ``UnknownFileKindError`` (a usage error) for any other file."""
    if not path.is_dir():
        return verify_segment(path)
    if looks_like_partition_dir(path):
        return VerifyReport(path, PARTITION_DIR, [verify_partition(path)])
    report = VerifyReport(path, LOG_DIR)
    for name in OFFSET_CHECKPOINTS:
        problem = _checkpoint_problem(path / name)
        if problem is not None:
            report.own_problems.append(problem)
    log_dir = LogDir(path)
    for tp in log_dir.partitions():
        report.partitions.append(_verify_or_unreadable(path / tp.dir_name))
    return report


def _verify_or_unreadable(directory: Path) -> PartitionReport:
    """One partition of a log dir: a partition that cannot be read (permissions, I/O) is that
    partition's problem, naming the file and the reason, and the others are still checked, as
    the daemon goes on past a partition it cannot clean."""
    try:
        return verify_partition(directory)
    except OSError as exc:
        where = directory if exc.filename is None else Path(os.fsdecode(exc.filename))
        reason = exc.strerror or str(exc)
        report = PartitionReport(directory.name, directory)
        report.own_problems.append(Problem(str(where), "unreadable", reason))
        return report


def verify_segment(path: Path) -> VerifyReport:
    """The segment ``path`` belongs to (its ``.log`` or an index file, named as ``cleanerd
    dump`` names them, ``inspect._files.classify``): every check of its files, its offsets
    against the next segment's base offset, and its ``.txnindex`` against the ABORT markers
    of the log up to it (a transaction may start in an earlier segment, so those are read)."""
    try:
        kind: FileKind | None = classify(path)
    except UnknownFileKindError:  # its words list what dump takes
        kind = None
    if kind not in _SEGMENT_FILES or strip_temp_suffix(path.name) != path.name:
        raise UnknownFileKindError(
            f"{path}: verify takes a log dir, a partition dir, or a segment's .log, .index, "
            ".timeindex or .txnindex file"
            + (" (a swap's leftover: verify its partition dir)" if kind in _SEGMENT_FILES else "")
        )
    directory = path.parent
    part = PartitionReport(directory.absolute().name, directory)  # "." names no partition
    report = VerifyReport(path, SEGMENT, [part])
    base = parse_base_offset(path.name)
    if base is None:  # classify already requires it of an index file
        part.own_problems.append(
            Problem(str(path), "file-name", "a .log file name must be a 20-digit base offset")
        )
        return report
    log = segment_file(directory, base, LOG_SUFFIX)
    if not log.is_file():
        part.own_problems.append(
            Problem(str(path), "orphan-index", "index file without its .log (Kafka deletes it)")
        )
        return report
    part.segments.append(check_segment(directory, base))
    bases = [b for b, _ in segment_logs(directory)]
    following = [b for b in bases if b > base]
    last = part.segments[0].last_offset
    if following and last is not None:
        name = segment_file(directory, following[0], LOG_SUFFIX).name
        problem = offsets_overlap(last, following[0], name)
        if problem is not None:
            part.own_problems.append(Problem(str(log), "offsets", problem))
    _check_txn_indexes(directory, [b for b in bases if b <= base], part)
    return report


def _checkpoint_problem(path: Path) -> Problem | None:
    if not path.exists():
        return None
    try:
        read_any_checkpoint(path)
    except StorageError as exc:
        return Problem(str(path), "checkpoint", str(exc))
    return None


def verify_partition(directory: Path) -> PartitionReport:
    """Every check of one partition dir, in segment order, without opening it as a log."""
    report = PartitionReport(directory.name, directory)
    for leftover in leftover_temp_files(directory):
        report.own_problems.append(
            Problem(
                str(leftover),
                "interrupted-swap",
                "interrupted swap; opening the log will recover it",
            )
        )
    for name in (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA):
        problem = _checkpoint_problem(directory / name)
        if problem is not None:
            report.own_problems.append(problem)
    irregular = irregular_segment_files(directory)
    for p, kind in irregular:
        report.own_problems.append(Problem(str(p), "not-regular-file", why_refused(kind)))
    # a segment with any file that is not regular is reported once, above, and not read
    skipped = {parse_base_offset(p.name) for p, _ in irregular}
    logs = [(b, p) for b, p in segment_logs(directory, skip=True) if b not in skipped]
    bases = {base for base, _ in logs} | {b for b in skipped if b is not None}
    for p in sorted(directory.iterdir()):
        if p.name.endswith(LOG_SUFFIX) and parse_base_offset(p.name) is None:
            report.own_problems.append(
                Problem(str(p), "file-name", "a .log file name must be a 20-digit base offset")
            )
        elif p.name.endswith(_INDEX_SUFFIXES) and parse_base_offset(p.name) not in bases:
            report.own_problems.append(
                Problem(str(p), "orphan-index", "index file without its .log (Kafka deletes it)")
            )
    for base, log in logs:
        try:
            report.segments.append(check_segment(directory, base))
        except OSError as exc:
            report.own_problems.append(Problem(str(log), "unreadable", str(exc)))
    _check_across_segments(report)
    _check_txn_indexes(directory, [s.base_offset for s in report.segments], report)
    _check_snapshots(directory, report)
    return report


def _check_snapshots(directory: Path, report: PartitionReport) -> None:
    """Every KIP-630 snapshot in ``checkpoints/`` whole and valid (CRCs, header first, footer
    last, offsets numbered as written); a symlink, FIFO or the like under a snapshot's name is a
    problem (it is never opened); a ``.part`` left by a killed writer is a note (the next
    snapshot removes it)."""
    try:
        found = scan_snapshot_dir(directory)
    except OSError as exc:
        report.own_problems.append(
            Problem(str(snapshot_dir(directory)), "snapshot", f"cannot list: {exc.strerror}")
        )
        return
    for _, path in found.snapshots:
        try:
            SnapshotReader(path).close()
        except SnapshotError as exc:
            report.own_problems.append(Problem(str(path), "snapshot", exc.reason))
    for path, kind in found.impostors:
        report.own_problems.append(
            Problem(str(path), "snapshot", f"{kind}, not a snapshot file; never read")
        )
    snapshots = snapshot_dir(directory)
    if snapshots.is_dir() and not snapshots.is_symlink():
        for p in sorted(snapshots.iterdir()):
            if p.name.endswith(SNAPSHOT_PART_SUFFIX):
                report.own_notes.append(
                    Problem(str(p), "snapshot", "unfinished snapshot (a write was cut short)")
                )


def _fold_checked(seg: LogSegment, state: ProducerState) -> None:
    """Fold a segment's valid batches (CRC checked: a bad one ends it, ``check_segment`` has
    reported it) into the producer state."""
    arr = map_readonly(seg.log_path)
    state.apply(arr, seg.scan(view=arr).batches, str(seg.log_path))


def _check_txn_indexes(directory: Path, bases: list[int], report: PartitionReport) -> None:
    """The ``.txnindex`` of each segment in ``report`` against the ABORT markers of the
    segments ``bases`` (``storage._txn_check``): a missing, extra or wrong entry is how aborted
    data passes for committed."""
    segments = [LogSegment(directory, base, LogConfig()) for base in bases]  # reads only
    state = ProducerState()
    try:
        for seg in segments:
            _fold_checked(seg, state)
    except (OSError, CorruptRecordError) as exc:  # reported by the segment checks already
        report.own_notes.append(
            Problem(str(directory), "txn-index", f"not checked against the markers: {exc}")
        )
        return
    results = {r.base_offset: r for r in report.segments}
    for problem in txn_index_problems(segments, state):
        # a corrupt index: the segment check reported it; segments outside the report: not asked
        if not problem.unreadable and problem.base_offset in results:
            results[problem.base_offset].add(problem.path, "txn-index", problem.message)


def _check_across_segments(report: PartitionReport) -> None:
    """Offsets rise across segments (storage's rule, ``segment_list.offsets_overlap``), checked
    on every pair and reported for each, where the cleaner stops at the first.

    With ``check_segment``'s "first batch >= base offset" this also makes every segment's first
    offset exceed the previous segment's last one.
    """
    prev_last: int | None = None  # last offset of the last segment that had batches
    prev_path: Path | None = None
    for seg in report.segments:
        if prev_last is not None and prev_path is not None:
            problem = offsets_overlap(prev_last, seg.base_offset, seg.path.name)
            if problem is not None:
                report.own_problems.append(Problem(str(prev_path), "offsets", problem))
        if seg.last_offset is not None:
            prev_last, prev_path = seg.last_offset, seg.path
