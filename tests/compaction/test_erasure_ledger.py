"""Each cleaning appends one erasure ledger entry after its swap: the daemon's (``clean_once``)
and the one-shot run's (``compact_directory``, ``cleanerd compact``); a dry run appends none,
and a ledger that cannot be written never fails a cleaning that swapped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cleanerd.compaction import (
    Cleaner,
    CleanerStats,
    CompactionSummary,
    OffsetMap,
    clean_once,
    compact_directory,
    open_log,
)
from cleanerd.format import Record
from cleanerd.storage import LEDGER_FILE, PartitionLog, read_ledger
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig
from tests.support.cleaning import Producer
from tests.support.cli import run
from tests.support.logs import tree_hash

NOW = 1_800_000_000_000
CLOCK = 1_750_000_000_000  # the partition's wall clock: the time of the swap


def small_log(root: Path, name: str = "t-0") -> Path:
    """40 one-record batches over keys k0..k4, a tombstone for k0 last, rolled after 20 and
    at the end: [0, 41) is cleanable."""
    directory = root / name
    log = PartitionLog.create(directory, LogConfig(), clock=lambda: CLOCK)
    try:
        for n in range(40):
            log.append([Record(0, 1_000 + n, f"k{n % 5}".encode(), b"v%d" % n)])
            if n == 20:
                log.roll()
        log.append([Record(0, 2_000, b"k0", None)])
        log.roll()
    finally:
        log.close()
    return directory


def compact(directory: Path, *, dry_run: bool = False) -> CompactionSummary:
    config = TopicCleanerConfig(delete_retention_ms=0)
    return compact_directory(directory, LogConfig(), config, StrategyConfig(), NOW, dry_run=dry_run)


def test_compact_appends_one_entry_per_partition(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    summary = compact(directory)
    [entry] = read_ledger(directory).entries
    assert entry.first_dirty == 0
    assert entry.end == 41
    assert entry.records_removed == summary.records_in - summary.records_out
    assert entry.records_removed == 41 - 4  # k1..k4 keep their last; k0's tombstone goes too
    assert entry.tombstones_removed == 1
    assert (entry.bytes_before, entry.bytes_after) == (summary.bytes_in, summary.bytes_out)
    assert (entry.engine, entry.strategy, entry.cleanings) == ("local", "offset", 1)
    assert summary.ledger_error is None
    compact(directory)  # a second run appends a second entry
    assert len(read_ledger(directory).entries) == 2


def test_a_dry_run_appends_nothing(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    before = tree_hash(tmp_path)
    compact(directory, dry_run=True)
    assert tree_hash(tmp_path) == before
    assert not (directory / LEDGER_FILE).exists()


def test_the_cli_appends_one_entry_per_partition_and_none_on_dry_run(tmp_path: Path) -> None:
    for name in ("t-0", "t-1"):
        small_log(tmp_path, name)
    assert run("compact", tmp_path, "--dry-run", "--now", NOW).exit_code == 0
    assert not list(tmp_path.glob(f"*/{LEDGER_FILE}"))
    assert run("compact", tmp_path, "--now", NOW).exit_code == 0
    for name in ("t-0", "t-1"):
        [entry] = read_ledger(tmp_path / name).entries
        assert (entry.first_dirty, entry.end) == (0, 41)


def test_the_daemon_cleaning_appends_its_range(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    config = TopicCleanerConfig(delete_retention_ms=0)
    cleaner = Cleaner(OffsetMap(1 << 20, StrategyConfig()))
    with open_log(directory, LogConfig(), clock=lambda: CLOCK) as log:
        plan, result = clean_once(log, cleaner, config, StrategyConfig(), NOW)
        assert result.ledger_error is None
        [entry] = read_ledger(directory).entries
        assert entry.time_ms == CLOCK
        assert (entry.first_dirty, entry.end) == (plan.first_dirty_offset, result.end_offset)
        assert entry.records_removed == result.stats.records_erased > 0
        _, again = clean_once(log, cleaner, config, StrategyConfig(), NOW)  # nothing dirty
        assert again.end_offset == result.end_offset
    assert len(read_ledger(directory).entries) == 1  # nothing swapped, nothing recorded


def test_a_ledger_that_cannot_be_written_does_not_fail_the_cleaning(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    (directory / LEDGER_FILE).mkdir()  # in the way of the file
    summary = compact(directory)
    assert summary.records_out == 4
    assert summary.ledger_error is not None
    assert "erasure ledger not written" in summary.ledger_error
    assert str(directory / LEDGER_FILE) in summary.ledger_error


def test_the_cli_warns_when_the_ledger_is_not_written(tmp_path: Path) -> None:
    directory = small_log(tmp_path)
    (directory / LEDGER_FILE).symlink_to(tmp_path / "elsewhere")
    result = run("compact", directory, "--now", NOW, "--delete-retention-ms", 0)
    assert result.exit_code == 0, result.output
    assert f"warning: t-0: erasure ledger not written: {directory / LEDGER_FILE}" in result.stderr
    assert not (tmp_path / "elsewhere").exists()


def test_the_count_includes_batches_deleted_whole(tmp_path: Path) -> None:
    """Aborted batches and markers go without being read: the entry counts them too."""
    directory = tmp_path / "t-0"
    log = PartitionLog.create(directory, LogConfig(), clock=lambda: CLOCK)
    try:
        for pid in (1, 2, 3):
            producer = Producer(log, pid)
            producer(1, 2, 3)
            producer(4)
            producer.abort() if pid != 2 else producer.commit()
        log.roll()
    finally:
        log.close()
    summary = compact(directory)
    [entry] = read_ledger(directory).entries
    assert summary.aborted_records_removed == 8
    assert entry.records_removed == summary.records_in - summary.records_out


def test_records_erased_adds_the_unread_records() -> None:
    stats = CleanerStats(messages_read=10, messages_written=4, batch_records_deleted=3)
    assert stats.records_removed == 6
    assert stats.records_erased == 9
    merged = stats.merge(dataclasses.replace(stats))
    assert merged.batch_records_deleted == 6
