"""The partition's leader epochs (``leader-epoch-checkpoint``), as Kafka's LeaderEpochFileCache.

Every appended batch is stamped with the current leader epoch; when a higher epoch starts, its
first offset is recorded so readers can tell which leader wrote which offsets.
"""

from __future__ import annotations

from pathlib import Path

from cleanerd.storage._checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition dir, read once and appended to."""

    def __init__(self, partition_dir: Path) -> None:
        self.path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT
        self._entries: list[tuple[int, int]] | None = None

    @property
    def entries(self) -> list[tuple[int, int]]:
        if self._entries is None:
            self._entries = read_leader_epoch_checkpoint(self.path) if self.path.exists() else []
        return self._entries

    @property
    def latest(self) -> int:
        """The newest epoch, -1 when none was recorded."""
        return self.entries[-1][0] if self.entries else -1

    def assign(self, requested: int | None, start_offset: int) -> int:
        """The epoch to stamp on a batch at ``start_offset``; a new, higher one is recorded.

        ``None`` means "the current epoch" (0 for a partition that has none yet).
        """
        epoch = max(self.latest, 0) if requested is None else requested
        if epoch > self.latest:
            self.entries.append((epoch, start_offset))
            write_leader_epoch_checkpoint(self.path, self.entries)
        return epoch
