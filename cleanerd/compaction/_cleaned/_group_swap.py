"""Swapping a cleaned group in: Kafka's ``replaceSegments`` as the cleaner calls it, written once.

``Cleaner`` (after filtering a group) and Spark's plan B (after its write tasks staged the
group, through ``compaction._external.swap_group``) both swap with ``replace_group``, so the
files they leave cannot differ. A group's output is one segment or, when it rolled (KAFKA-20036),
several; all of them replace the whole group in one swap (N -> M, ``storage.replace_segments``).
``PartitionLog.replace_segments`` takes the partition's writer lock for each swap; nothing here
holds it longer.

One deviation from Kafka, for crash safety: ``storage.replace_segments`` refuses to replace a
non-empty segment whose base offset lies outside every new segment's offsets (on a crash,
recovery could not tell it was replaced). A source segment that lost every batch up to the next
cleaned segment's base (the group's tail, or a gap before a rolled segment) is replaced by an
empty segment at its own base instead, in the same swap; the next pass merges those empty
segments into their neighbours, as Kafka's grouping merges empty segments.
"""

from __future__ import annotations

from collections.abc import Sequence

from cleanerd.storage import (
    CLEANED_SUFFIX,
    SEGMENT_SUFFIXES,
    LogSegment,
    PartitionLog,
    segment_file,
)


def new_cleaned_segment(log: PartitionLog, base_offset: int) -> LogSegment:
    """An empty ``.cleaned`` segment, after removing a stale one an earlier failure left."""
    for suffix in SEGMENT_SUFFIXES:
        segment_file(log.directory, base_offset, suffix, CLEANED_SUFFIX).unlink(missing_ok=True)
    return LogSegment.create(
        log.directory, base_offset, log.config, temp_suffix=CLEANED_SUFFIX, created_ms=log.clock()
    )


def uncovered(cleaned: Sequence[LogSegment], group: Sequence[LogSegment]) -> list[LogSegment]:
    """The group's non-empty segments whose base offset no cleaned segment's offsets hold."""
    spans = [(s.base_offset, max(s.next_offset(), s.base_offset + 1)) for s in cleaned]
    return [
        seg
        for seg in group
        if seg.size and not any(b <= seg.base_offset < reach for b, reach in spans)
    ]


def replace_group(
    log: PartitionLog, cleaned: Sequence[LogSegment], group: Sequence[LogSegment], mtime_ns: int
) -> None:
    """Replace the group by its ``cleaned`` segments in one swap; source segments outside their
    offsets get empty replacements (see the module doc), with the group's mtime ``mtime_ns``."""
    empties: list[LogSegment] = []
    try:
        for seg in uncovered(cleaned, group):
            empty = new_cleaned_segment(log, seg.base_offset)
            empties.append(empty)
            empty.on_become_inactive()
            empty.set_last_modified(mtime_ns)
        log.replace_segments([*cleaned, *empties], group)
    except BaseException:
        for empty in empties:
            if empty.temp_suffix == CLEANED_SUFFIX:
                empty.delete()
        raise
