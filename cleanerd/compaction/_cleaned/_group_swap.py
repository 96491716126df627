"""Swapping a cleaned group in: Kafka's ``replaceSegments`` as the cleaner calls it, written once.

``Cleaner`` (after filtering a group) and Spark's plan B (after its write tasks staged the
group, through ``compaction._external.swap_group``) both swap with ``replace_group``, so the
files they leave cannot differ. ``PartitionLog.replace_segments`` takes the partition's writer
lock for each swap; nothing here holds it longer.

One deviation from Kafka, for crash safety: ``storage.replace_segments`` refuses to replace a
non-empty segment whose base offset lies beyond the cleaned segment's offsets (on a crash,
recovery could not tell it was replaced). When the tail segments of a group lose every batch,
they are replaced each by an empty segment at its own base instead; the next pass merges those
empty segments into their neighbours, as Kafka's grouping merges empty segments.
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


def replace_group(
    log: PartitionLog, cleaned: LogSegment, group: Sequence[LogSegment], mtime_ns: int
) -> None:
    """Replace the group by ``cleaned``; tail segments past the cleaned offsets get empty
    replacements (see the module doc), with the group's mtime ``mtime_ns``."""
    reach = max(cleaned.next_offset(), cleaned.base_offset + 1)
    covered = [s for s in group if s.size == 0 or s.base_offset < reach]
    rest = [s for s in group if not (s.size == 0 or s.base_offset < reach)]
    log.replace_segments(cleaned, covered)
    for seg in rest:
        empty = new_cleaned_segment(log, seg.base_offset)
        try:
            empty.on_become_inactive()
            empty.set_last_modified(mtime_ns)
            log.replace_segments(empty, [seg])
        except BaseException:
            if empty.temp_suffix == CLEANED_SUFFIX:
                empty.delete()
            raise
