"""The manager loop's rolls: at the deadline minus the expected cleaning time, under the writer
lock, and never a second roll (so never an empty segment) after a writer's own roll.

The manager's clock is injected; the files are real, and the rolls run in a thread as in the
daemon.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cleanerd.format import Record
from cleanerd.scheduling import CleanerManager
from cleanerd.service._maintenance import Maintenance
from cleanerd.storage import PartitionLog
from tests.support.scheduling import LAG, NOW, PER_SEGMENT, RECENT, Clock, _log, _settings, _tp

FIRST = NOW - LAG + 10_000  # the active segment's first record: its deadline is NOW + 10 s


def _bases(directory: Path) -> list[int]:
    return sorted(int(p.name.removesuffix(".log")) for p in directory.glob("*.log"))


def _surveyed(log_dir: Path, clock: Clock) -> tuple[CleanerManager, Maintenance]:
    manager = CleanerManager([log_dir], _settings, clock_ms=clock)
    manager.apply(manager.scan())
    return manager, Maintenance(manager, clock)


def _expected_ms(manager: CleanerManager) -> int:
    status = manager.status(_tp("t"))
    assert status is not None
    return status.expected_clean_ms


@pytest.mark.asyncio
async def test_the_active_segment_rolls_at_its_deadline_minus_the_expected_time(
    tmp_path: Path,
) -> None:
    _log(tmp_path, "t", [RECENT], active=FIRST).close()
    directory = tmp_path / _tp("t").dir_name
    clock = Clock(NOW)
    manager, maintenance = _surveyed(tmp_path, clock)
    roll_at = FIRST + LAG - _expected_ms(manager)
    assert roll_at < FIRST + LAG  # before the deadline, not after it as a lag-old roll would
    clock.now = roll_at
    assert not await maintenance.run()
    assert _bases(directory) == [0, PER_SEGMENT]
    clock.now = roll_at + 1
    assert await maintenance.run()  # rolled: the caller plans again at once
    assert maintenance.rolled == 1
    assert _bases(directory) == [0, PER_SEGMENT, PER_SEGMENT + 1]
    manager.apply(manager.scan())
    status = manager.status(_tp("t"))
    assert status is not None
    assert status.cleanable  # what was active is cleanable now, by its deadline
    assert manager.rolls() == []  # the new active segment is empty


@pytest.mark.asyncio
async def test_a_writers_roll_between_the_survey_and_the_roll_is_not_doubled(
    tmp_path: Path,
) -> None:
    """The survey saw the segment due; a writer rolled it before the daemon's roll ran, and
    appended to the next one (records stamped as old: the rule alone would roll it too). The
    daemon rolls nothing, asks for a new plan, and no empty segment appears."""
    _log(tmp_path, "t", [RECENT], active=FIRST).close()
    directory = tmp_path / _tp("t").dir_name
    clock = Clock(NOW)
    manager, maintenance = _surveyed(tmp_path, clock)
    clock.now = FIRST + LAG  # due
    assert [r.active_base for r in manager.rolls()] == [PER_SEGMENT]
    writer = PartitionLog(directory)
    try:
        writer.roll()
        writer.append([Record(0, FIRST, b"late", b"v")])
        assert await maintenance.run()  # nothing rolled, but the files changed: plan again
        assert maintenance.rolled == 0
        assert _bases(directory) == [0, PER_SEGMENT, PER_SEGMENT + 1]
        # planned again, the writer's segment is the one due, and it is rolled once
        manager.apply(manager.scan())
        assert [r.active_base for r in manager.rolls()] == [PER_SEGMENT + 1]
        assert await maintenance.run()
        assert maintenance.rolled == 1
        assert _bases(directory) == [0, PER_SEGMENT, PER_SEGMENT + 1, PER_SEGMENT + 2]
        # the writer appends to the daemon's new segment; nothing is rolled twice
        writer.append([Record(0, NOW, b"k", b"v")])
        assert writer.active_segment.base_offset == PER_SEGMENT + 2
        manager.apply(manager.scan())
        assert manager.rolls() == []
    finally:
        writer.close()
    assert all((directory / f"{b:020d}.log").stat().st_size > 0 for b in _bases(directory))
