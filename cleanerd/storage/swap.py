"""The swap protocol (``.cleaned`` -> ``.swap`` -> ``.deleted``) and its crash recovery.

This is what makes replacing segments crash-safe (reference 3.14). ``replace_segments`` renames in
Kafka's order; ``recover_temp_files`` runs when a partition is opened and either finishes a swap
whose new files all reached ``.swap`` or rolls back one that had not, so the log holds either the
old segments or the new one, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cleanerd.storage.checkpoints import fsync_dir
from cleanerd.storage.errors import StorageError
from cleanerd.storage.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    offset_from_name,
    segment_file,
)
from cleanerd.storage.log_config import LogConfig
from cleanerd.storage.segment import LogSegment

_KRAFT_DELETED = ".checkpoint" + DELETED_SUFFIX


@dataclass
class RecoveryReport:
    """What recovery did in one partition dir (for the log line and ``verify``)."""

    deleted: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.deleted or self.rolled_back or self.completed)


def _base(name: str) -> int | None:
    try:
        return offset_from_name(name)
    except ValueError:
        return None


def leftover_temp_files(directory: Path) -> list[Path]:
    """Files an interrupted swap left behind (``verify`` reports these)."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))
        and not p.name.endswith(_KRAFT_DELETED)
    )


def recover_temp_files(directory: Path, config: LogConfig) -> RecoveryReport:
    """Finish or roll back an interrupted swap, exactly as Kafka's LogLoader does on load."""
    report = RecoveryReport()
    cleaned: list[Path] = []
    swaps: list[Path] = []
    for p in sorted(directory.iterdir()):
        name = p.name
        if name.endswith(DELETED_SUFFIX) and not name.endswith(_KRAFT_DELETED):
            p.unlink()
            report.deleted.append(name)
        elif name.endswith(CLEANED_SUFFIX):
            cleaned.append(p)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(p)
    bases = [b for b in (_base(p.name) for p in cleaned) if b is not None]
    if bases:
        # a swap that had not moved every new file to .swap: abort it, old segments are intact
        min_cleaned = min(bases)
        for p in list(swaps):
            b = _base(p.name)
            if b is not None and b >= min_cleaned:
                p.unlink()
                swaps.remove(p)
                report.rolled_back.append(p.name)
    for p in cleaned:
        p.unlink()
        report.rolled_back.append(p.name)
    swap_logs = [p for p in swaps if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    if swap_logs:
        ranges = []
        for p in swap_logs:
            base = offset_from_name(p.name)
            seg = LogSegment(directory, base, config, temp_suffix=SWAP_SUFFIX)
            ranges.append((base, seg.next_offset()))
        low = min(r[0] for r in ranges)
        high = max(r[1] for r in ranges)
        # old segment files not yet renamed to .deleted when the crash came
        for p in sorted(directory.iterdir()):
            b = _base(p.name)
            if p.name.endswith(SWAP_SUFFIX) or b is None or p.is_dir():
                continue
            if low <= b < high:
                p.unlink()
                report.deleted.append(p.name)
    for p in swaps:
        target = p.with_name(p.name[: -len(SWAP_SUFFIX)])
        os.replace(p, target)
        report.completed.append(target.name)
    if report.changed:
        fsync_dir(directory)
    return report


def replace_segments(new: LogSegment, old: Sequence[LogSegment]) -> None:
    """Swap ``new`` (a flushed ``.cleaned`` segment) in for ``old`` (ascending, all live).

    Order, as Kafka: new files ``.cleaned`` -> ``.swap`` (the ``.log`` last, so a ``.swap`` log
    means the whole segment is there); old files -> ``.deleted``; new files -> final names;
    directory fsync; then the ``.deleted`` files are removed. A crash at any point is repaired
    by ``recover_temp_files``.
    """
    if new.temp_suffix != CLEANED_SUFFIX:
        raise StorageError(f"replace_segments needs a {CLEANED_SUFFIX} segment, got {new}")
    directory = new.directory
    next_offset = new.next_offset()
    for seg in old:
        if seg.size and not new.base_offset <= seg.base_offset < max(
            next_offset, new.base_offset + 1
        ):
            raise StorageError(
                f"cleaned segment {new.log_path} covers offsets [{new.base_offset}, {next_offset})"
                f" but replaces {seg.log_path}; a crash could resurrect it"
            )
    new.change_suffix(SWAP_SUFFIX)
    fsync_dir(directory)
    doomed: list[LogSegment] = []
    for seg in old:
        seg.change_suffix(DELETED_SUFFIX)
        doomed.append(seg)
        if seg.base_offset != new.base_offset:
            snap = segment_file(directory, seg.base_offset, SNAPSHOT_SUFFIX)
            if snap.exists():
                os.replace(snap, snap.with_name(snap.name + DELETED_SUFFIX))
    new.change_suffix("")
    fsync_dir(directory)
    for seg in doomed:
        seg.delete()
        snap = segment_file(directory, seg.base_offset, SNAPSHOT_SUFFIX, DELETED_SUFFIX)
        snap.unlink(missing_ok=True)
