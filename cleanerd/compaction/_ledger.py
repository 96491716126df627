"""What a cleaning writes to the partition's erasure ledger, once its last swap is done.

Each driver writes one entry per cleaning: ``clean_once`` (the daemon's local cleanings) and the
one-shot run (``cleanerd compact``, and Spark's plans A and B, which go through it). The file
and its format are storage's (``storage._erasure_ledger``).

The swap is the source of truth, the ledger its record: a ledger that cannot be written (a full
disk, a symlink under its name) does not fail a cleaning that already swapped its segments in.
``record_cleaning`` returns the problem instead, for the driver to report (the engine never
logs). A cleaning that fails or is aborted writes no entry, even when it swapped some groups
before it stopped: its checkpoint did not move, so the next cleaning covers its range again.
"""

from __future__ import annotations

from cleanerd.compaction._stats import CleanerStats
from cleanerd.storage import PartitionLog, StorageError, append_ledger_entry, new_ledger_entry
from cleanerd.topics import StrategyConfig

__all__ = ["ENGINE_LOCAL", "ENGINE_SPARK", "SegmentSizes", "record_cleaning", "segment_sizes"]

ENGINE_LOCAL = "local"
ENGINE_SPARK = "spark"
"""The ``engine`` an entry names: this process's cleaner, or a Spark job's."""

SegmentSizes = dict[int, int]
"""Base offset -> ``.log`` bytes of a log's segments at one moment."""


def segment_sizes(log: PartitionLog) -> SegmentSizes:
    """The size of each segment of ``log`` now (no I/O: segments know their size)."""
    return {seg.base_offset: seg.size for seg in list(log.segments)}


def _below(sizes: SegmentSizes, end: int) -> int:
    return sum(size for base, size in sizes.items() if base < end)


def record_cleaning(
    log: PartitionLog,
    *,
    first_dirty: int,
    end: int,
    stats: CleanerStats,
    before: SegmentSizes,
    engine: str,
    strategy: StrategyConfig,
) -> str | None:
    """Append the cleaning of ``[first_dirty, end)`` to the ledger (nothing when the range is
    empty: nothing was swapped). ``before``: the segment sizes before the cleaning. Returns
    why the entry could not be written, or None."""
    if end <= first_dirty:
        return None
    entry = new_ledger_entry(
        log.clock(),
        first_dirty,
        end,
        records_removed=stats.records_erased,
        tombstones_removed=stats.tombstones_removed,
        bytes_before=_below(before, end),
        bytes_after=_below(segment_sizes(log), end),
        engine=engine,
        strategy=str(strategy.strategy),
    )
    try:
        append_ledger_entry(log.directory, entry)
    except (StorageError, OSError) as e:
        return f"erasure ledger not written: {e}"
    return None
