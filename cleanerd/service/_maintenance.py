"""What the manager loop does besides cleaning: idle rolls (KIP-354) and retention.

Kafka rolls an active segment only when a record is appended, so a compacted topic that stops
receiving writes keeps its last records (deletions included) in the active segment, out of the
cleaner's reach, forever; and a writer rolls a compacted topic's segment only once its first
record is ``max.compaction.lag.ms`` old, too late for a cleaning to end within the lag. cleanerd
rolls the active segment the expected cleaning time before that (``CleanerManager.rolls``),
under the partition's writer lock and only if it is still the segment the survey saw, so the
cleaning that follows ends within the lag and a writer's own roll meanwhile is not doubled.

``compact,delete`` logs also get Kafka's retention (``retention.ms``, ``retention.bytes``) after
each cleaning (``clean_job``) and here for those no worker has taken.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cleanerd.scheduling import CleanerManager
from cleanerd.service._clean_job import roll_if_idle
from cleanerd.service._logging import get_logger
from cleanerd.service._threads import Blocking, in_default_pool
from cleanerd.storage import PartitionLog, delete_old_segments
from cleanerd.topics import TopicSettings

log = get_logger("cleanerd.maintenance")


class Maintenance:
    """Idle rolls and retention for the partitions no worker holds; counts what it did."""

    def __init__(
        self,
        manager: CleanerManager,
        clock_ms: Callable[[], int],
        run: Blocking = in_default_pool,
    ) -> None:
        """``run``: where the file work goes (the daemon's service threads)."""
        self.manager = manager
        self.clock_ms = clock_ms
        self.run_blocking = run
        self.rolled = 0
        self.deleted = 0

    async def run(self) -> bool:
        """One round; True when some segment was rolled or deleted (the caller replans)."""
        changed = False
        for roll in self.manager.rolls():
            if not self.manager.reserve(roll.tp):
                continue
            try:
                settings = self.manager.settings_for(roll.tp)
                rolled = await self.run_blocking(
                    roll_if_idle,
                    roll.directory,
                    settings,
                    self.clock_ms(),
                    roll.lead_ms,
                    roll.active_base,
                )
            except Exception as e:
                log.error("idle roll failed", partition=str(roll.tp), error=str(e))
                continue
            finally:
                self.manager.release(roll.tp)
            # not rolled: the files changed since the survey (a writer rolled): plan them anew
            changed = True
            if rolled:
                self.rolled += 1
                log.info(
                    "rolled the active segment for its deadline",
                    partition=str(roll.tp),
                    max_compaction_lag_ms=roll.max_lag_ms,
                    lead_ms=roll.lead_ms,
                )
        for status in self.manager.deletable():
            if not self.manager.reserve(status.tp):
                continue
            try:
                settings = self.manager.settings_for(status.tp)
                result = await self.run_blocking(
                    _retention, status.directory, settings, self.clock_ms()
                )
            except Exception as e:
                log.error("retention failed", partition=str(status.tp), error=str(e))
                continue
            finally:
                self.manager.release(status.tp)
            if result:
                self.deleted += result
                changed = True
                log.info("retention deleted segments", partition=str(status.tp), segments=result)
        return changed


def _retention(directory: Path, settings: TopicSettings, now_ms: int) -> int:
    """Kafka's deleteOldSegments on one log; returns how many segments went."""
    partition = PartitionLog(directory, settings.log)
    try:
        return delete_old_segments(partition, settings.retention, now_ms).segments_deleted
    finally:
        partition.close()
