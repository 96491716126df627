"""The swap protocol (``.cleaned`` -> ``.swap`` -> ``.deleted``) and its crash recovery.

This is what makes replacing segments crash-safe (docs/kafka-format.md §3.10). ``replace_segments``
renames in Kafka's order; ``recover_temp_files`` runs when a partition is opened and either finishes
a swap whose new files all reached ``.swap`` or rolls back one that had not, so the log holds either
the old segments or the new one, never a mix.

Kafka trusts any ``.swap`` file it finds: a stray or damaged one would replace good segments. So
recovery first checks every temporary file and plans every step, and only then acts; a file it
cannot trust (see ``_check_log_swap`` and ``_check_range``) refuses the partition with an
``UnsafeSwapError`` naming it, and nothing in the dir is renamed or deleted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import numpy as np

from cleanerd.format import INT_MAX
from cleanerd.storage._checkpoints import fsync_dir
from cleanerd.storage._errors import StorageError, UnsafeSwapError
from cleanerd.storage._files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    filename_prefix,
    parse_base_offset,
    segment_file,
)
from cleanerd.storage._header_summary import HeaderSummary, summarise_headers
from cleanerd.storage._regular import kind_of, map_regular, segment_logs
from cleanerd.storage._segment import LogSegment
from cleanerd.topics import LogConfig

_KRAFT_DELETED = ".checkpoint" + DELETED_SUFFIX
_TEMP_NAME = re.compile(r"([0-9]{20})(\.log|\.index|\.timeindex|\.txnindex)(\.cleaned|\.swap)")
_UNTOUCHED = "recovery refused, nothing in the partition dir was renamed or deleted"


@dataclass
class RecoveryReport:
    """What recovery did in one partition dir (for the log line and ``verify``)."""

    deleted: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.deleted or self.rolled_back or self.completed)


@dataclass(frozen=True)
class _SwapLog:
    """A checked ``.log.swap``: its batches are whole, CRC-clean and rise from its base."""

    path: Path
    base: int
    first: int | None  # the first batch's base offset; None when the file holds no batch
    next_offset: int

    @property
    def reach(self) -> int:
        """End of the base offsets it replaces (an empty one replaces the segment at its base)."""
        return max(self.next_offset, self.base + 1)


@dataclass
class _Plan:
    """Every step of one recovery, decided before the first is taken."""

    deleted: list[Path] = field(default_factory=list)  # *.deleted, removed first as Kafka does
    rolled_back: list[Path] = field(default_factory=list)  # interrupted swaps, then .cleaned
    replaced: list[Path] = field(default_factory=list)  # old files in the completed swaps' range
    completed: list[Path] = field(default_factory=list)  # .swap files, each segment's .log last


def _unsafe(path: Path, reason: str) -> UnsafeSwapError:
    return UnsafeSwapError(f"{path}: {reason}; {_UNTOUCHED}")


def leftover_temp_files(directory: Path) -> list[Path]:
    """Files an interrupted swap left behind (``verify`` reports these)."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))
        and not p.name.endswith(_KRAFT_DELETED)
    )


def recover_temp_files(directory: Path, config: LogConfig) -> RecoveryReport:
    """Finish or roll back an interrupted swap as Kafka's LogLoader does on load, once every
    file involved has been checked; UnsafeSwapError (and no change) otherwise.

    ``config`` is not needed: a ``.log.swap`` is read whole, not through its own indexes.
    """
    plan = _plan_recovery(directory)
    report = RecoveryReport(
        deleted=[p.name for p in plan.deleted + plan.replaced],
        rolled_back=[p.name for p in plan.rolled_back],
    )
    for p in plan.deleted + plan.rolled_back + plan.replaced:
        p.unlink()
    for p in plan.completed:
        target = p.with_name(p.name[: -len(SWAP_SUFFIX)])
        os.replace(p, target)
        report.completed.append(target.name)
    if report.changed:
        fsync_dir(directory)
    return report


def _plan_recovery(directory: Path) -> _Plan:
    """Kafka's recovery steps (kafka-format.md §3.10) as a plan; raises before any unsafe step."""
    plan = _Plan()
    cleaned: list[tuple[int, Path]] = []
    swaps: list[tuple[int, str, Path]] = []  # (base, segment suffix, path)
    entries = sorted(directory.iterdir())
    for p in entries:
        name = p.name
        if name.endswith(DELETED_SUFFIX) and not name.endswith(_KRAFT_DELETED):
            if not p.is_dir():
                plan.deleted.append(p)
        elif name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)):
            base, suffix, temp = _parse_temp_name(p)
            if temp == CLEANED_SUFFIX:
                cleaned.append((base, p))
            else:
                swaps.append((base, suffix, p))
    if cleaned:
        # a swap that had not moved every new file to .swap: abort it, old segments are intact
        min_cleaned = min(base for base, _ in cleaned)
        plan.rolled_back += [p for base, _, p in swaps if base >= min_cleaned]
        swaps = [s for s in swaps if s[0] < min_cleaned]
        plan.rolled_back += [p for _, p in cleaned]
    if not swaps:
        return plan
    live = {base: path for base, (path, _) in segment_logs(directory).items()}
    logs = [_check_log_swap(p, base) for base, suffix, p in swaps if suffix == LOG_SUFFIX]
    if logs:
        _check_range(logs, live)
        low = min(s.base for s in logs)
        high = max(s.reach for s in logs)  # an empty swap replaces the segment at its base
        # old segment files not yet renamed to .deleted when the crash came
        doomed = {*plan.deleted, *plan.rolled_back}
        for p in entries:
            b = parse_base_offset(p.name)
            if b is None or p.name.endswith(SWAP_SUFFIX) or p in doomed or p.is_dir():
                continue
            if low <= b < high:
                plan.replaced.append(p)
    _check_index_swaps(swaps, logs, live, plan.replaced)
    plan.completed = [p for _, _, p in sorted(swaps, key=lambda s: (s[0], s[1] == LOG_SUFFIX))]
    return plan


def _parse_temp_name(path: Path) -> tuple[int, str, str]:
    """(base offset, segment suffix, temporary suffix) of a ``.cleaned`` or ``.swap`` file."""
    kind = "a swap" if path.name.endswith(SWAP_SUFFIX) else f"a {CLEANED_SUFFIX}"
    match = _TEMP_NAME.fullmatch(path.name)
    if match is None:
        raise _unsafe(
            path,
            f"{kind} file name must start with a 20-digit base offset, then .log, .index,"
            " .timeindex or .txnindex",
        )
    if kind_of(os.lstat(path).st_mode) is not None:
        raise _unsafe(path, f"{kind} file must be a regular file, not a symlink or special file")
    return int(match[1]), match[2], match[3]


def _summary(path: Path, *, check_crc: bool) -> HeaderSummary | None:
    """The batches of a whole file summarised (None when it is empty), read through a private
    map a chunk at a time."""
    mm, _ = map_regular(path)
    if mm is None:
        return None
    with mm:
        arr = np.frombuffer(mm, np.uint8)
        try:
            return summarise_headers(arr, path=str(path), check_crc=check_crc)
        finally:
            del arr  # the map closes next


def _check_log_swap(path: Path, base: int) -> _SwapLog:
    """Kafka completes a ``.log.swap`` unread; a torn or foreign file would replace good data,
    so every batch must be whole, pass its CRC and rise from the file's base offset."""
    walked = _summary(path, check_crc=True)
    if walked is None:
        return _SwapLog(path, base, None, base)
    if walked.error is not None:
        where = walked.error.position if walked.error.position is not None else walked.end
        raise _unsafe(
            path, f"not a complete swapped segment: at byte {where}: {walked.error.reason}"
        )
    if walked.first_offset is None or walked.last_offset is None:  # pragma: no cover
        raise _unsafe(path, "not a complete swapped segment: no batch")
    first, last = walked.first_offset, walked.last_offset
    if first < base:
        raise _unsafe(path, f"its first batch has base offset {first}, below its name's {base}")
    if last - base > INT_MAX:
        raise _unsafe(path, f"its last offset {last} is beyond the 32-bit range from {base}")
    return _SwapLog(path, base, first, last + 1)


def _check_range(logs: list[_SwapLog], live: dict[int, Path]) -> None:
    """The swaps' offsets must lie inside the segments they replace (those with base offsets in
    [base, next offset)): never reach into a segment left in place, never replace the active
    segment or lie past it, and every segment their range deletes is replaced by one of them."""
    logs = sorted(logs, key=lambda s: s.base)
    for a, b in pairwise(logs):
        if a.next_offset > b.base:
            raise _unsafe(
                b.path, f"it overlaps {a.path.name}, which holds offsets up to {a.next_offset - 1}"
            )
    low, top = logs[0].base, max(s.reach for s in logs)
    for base, seg in sorted(live.items()):
        if low <= base < top and not any(s.base <= base < s.reach for s in logs):
            raise _unsafe(
                logs[0].path, f"with the other swap files it would delete {seg.name}, unreplaced"
            )
    if not any(base >= top for base in live):
        if live and max(live) >= low:
            reason = f"it would replace the active segment {live[max(live)].name}"
        elif live:
            reason = f"its offsets lie past the log's last segment {live[max(live)].name}"
        else:
            reason = "the partition dir has no segment for it to replace"
        raise _unsafe(logs[0].path, f"{reason}; a swap only replaces segments before the active")
    before = [base for base in live if base < low]
    first = logs[0].first
    if before and first is not None:
        prev = live[max(before)]
        walked = _summary(prev, check_crc=False)
        last = walked.last_offset if walked is not None else None
        if last is not None and last >= first:
            raise _unsafe(
                logs[0].path,
                f"its offsets from {first} reach into {prev.name}, which it does not replace"
                f" (that segment holds offsets up to {last})",
            )


def _check_index_swaps(
    swaps: list[tuple[int, str, Path]],
    logs: list[_SwapLog],
    live: dict[int, Path],
    replaced: list[Path],
) -> None:
    """An index ``.swap`` belongs to a ``.log.swap`` of its base, or (Kafka renames the ``.log``
    to its final name first) to a final ``.log`` outside the replaced range whose index of that
    kind is gone; anything else would overwrite or orphan a live index."""
    swapped = {s.base for s in logs}
    gone = set(replaced)
    for base, suffix, path in swaps:
        if suffix == LOG_SUFFIX or base in swapped:
            continue
        prefix = filename_prefix(base)
        final = path.with_name(path.name[: -len(SWAP_SUFFIX)])
        if base not in live or live[base] in gone:
            raise _unsafe(path, f"it has no segment: neither {prefix}.log.swap nor {prefix}.log")
        if final.exists():
            raise _unsafe(path, f"{final.name} exists: this is not part of an interrupted swap")


def replace_segments(new: Sequence[LogSegment], old: Sequence[LogSegment]) -> None:
    """Swap ``new`` (flushed ``.cleaned`` segments, one or more) in for ``old`` (ascending, all
    live): N segments become M (KAFKA-20036 rolls a group's output into several).

    Order, as Kafka's ``LocalLog.replaceSegments``: new files ``.cleaned`` -> ``.swap``, the
    highest base offset first and each segment's ``.log`` last (so while any new file is still
    ``.cleaned``, every ``.swap`` file has a base at or above it and recovery rolls the swap back);
    old files -> ``.deleted``; new files -> final names; directory fsync; then the ``.deleted``
    files are removed. A crash at any point is repaired by ``recover_temp_files``.
    """
    new = sorted(new, key=lambda s: s.base_offset)
    if not new:
        raise StorageError("replace_segments needs at least one new segment")
    for seg in new:
        if seg.temp_suffix != CLEANED_SUFFIX:
            raise StorageError(f"replace_segments needs {CLEANED_SUFFIX} segments, got {seg}")
    spans = [(s.base_offset, s.next_offset()) for s in new]
    for (a_base, a_next), (b_base, _) in pairwise(spans):
        if max(a_next, a_base + 1) > b_base:
            raise StorageError(
                f"new segments overlap: [{a_base}, {a_next}) reaches segment {b_base}"
            )
    for seg in old:
        if seg.size and not any(b <= seg.base_offset < max(n, b + 1) for b, n in spans):
            covers = ", ".join(f"[{b}, {n})" for b, n in spans)
            raise StorageError(
                f"cleaned segments cover offsets {covers} but replace {seg.log_path};"
                " a crash could resurrect it"
            )
    directory = new[0].directory
    for seg in reversed(new):
        seg.change_suffix(SWAP_SUFFIX)
    fsync_dir(directory)
    bases = {s.base_offset for s in new}
    doomed: list[LogSegment] = []
    for seg in old:
        seg.change_suffix(DELETED_SUFFIX)
        doomed.append(seg)
        if seg.base_offset not in bases:
            snap = segment_file(directory, seg.base_offset, SNAPSHOT_SUFFIX)
            if snap.exists():
                os.replace(snap, snap.with_name(snap.name + DELETED_SUFFIX))
    for seg in new:
        seg.change_suffix("")
    fsync_dir(directory)
    for seg in doomed:
        seg.delete()
        snap = segment_file(directory, seg.base_offset, SNAPSHOT_SUFFIX, DELETED_SUFFIX)
        snap.unlink(missing_ok=True)
