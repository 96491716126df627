"""Take a snapshot of a partition, and load a partition's state through its snapshots.

Both start from the newest valid snapshot at or below the end offset (a corrupt or unfinished
one is reported and an older one tried) and replay the log after it, through ``state``'s two
passes. The end offset defaults to the high watermark (``replication-offset-checkpoint``, else
the log end) and never passes the last stable offset: an open transaction's records may still
abort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cleanerd.format import Compression, Record
from cleanerd.snapshot._format import SnapshotError, SnapshotReader, SnapshotWriter
from cleanerd.snapshot._state import Source, live_records, log_candidates, snapshot_candidates
from cleanerd.storage import (
    LogSegment,
    PartitionLog,
    ReadOnlyLog,
    SnapshotId,
    list_snapshots,
    remove_leftovers,
)
from cleanerd.topics import StrategyConfig

Warn = Callable[[str], None]
DEFAULT_BUDGET = 128 * 1024 * 1024
"""Offset map bytes when the caller gives none: Kafka's default dedupe buffer."""


def _ignore(message: str) -> None:
    del message


class LogView(Protocol):
    """What reading a state needs of a log: a ``PartitionLog`` (the writers' and the daemon's)
    or a ``ReadOnlyLog`` (``snapshot load``, which must not write)."""

    directory: Path
    segments: list[LogSegment]

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def last_stable_offset(self) -> int: ...


@dataclass
class StatePlan:
    """Where a state comes from: a base snapshot (or none) and the log range replayed after it."""

    end_offset: int
    base: SnapshotReader | None
    replay_from: int
    warnings: list[str] = field(default_factory=list)

    @property
    def base_id(self) -> SnapshotId | None:
        return None if self.base is None else self.base.sid


def end_offset_for(log: LogView, upto: int | None = None) -> int:
    """``upto`` or the high watermark, capped at the last stable offset."""
    end = log.high_watermark if upto is None else min(upto, log.log_end_offset)
    return min(end, log.last_stable_offset())


def plan_state(log: LogView, end: int, warn: Warn = _ignore) -> StatePlan:
    """The newest valid snapshot that can start the state at ``end``, opened (its caller closes
    it), and the log offset the replay starts from."""
    start = log.log_start_offset
    plan = StatePlan(end, None, start)
    for sid, path in reversed(list_snapshots(log.directory)):
        if sid.end_offset > end:
            continue
        if sid.end_offset < start:
            why = f"{path}: ends at {sid.end_offset}, below the log start offset {start}"
            plan.warnings.append(why + "; not usable")
            warn(plan.warnings[-1])
            continue
        try:
            plan.base = SnapshotReader(path)
        except SnapshotError as e:
            plan.warnings.append(f"{e}; trying an older snapshot")
            warn(plan.warnings[-1])
            continue
        plan.base.sid = sid
        plan.replay_from = sid.end_offset
        return plan
    if start > 0:
        plan.warnings.append(
            f"{log.directory}: no valid snapshot; the state starts at the log start offset "
            f"{start} (records below it were deleted)"
        )
        warn(plan.warnings[-1])
    return plan


def _sources(log: LogView, plan: StatePlan) -> tuple[list[Source], int]:
    sources: list[Source] = []
    bound = max(0, plan.end_offset - plan.replay_from)
    if plan.base is not None:
        sources.append(snapshot_candidates(plan.base.buffer, str(plan.base.path)))
        bound += plan.base.info.records
    sources.append(log_candidates(list(log.segments), plan.replay_from, plan.end_offset))
    return sources, bound


def load_state(
    log: LogView | Path,
    strategy: StrategyConfig | None = None,
    *,
    upto: int | None = None,
    budget_bytes: int = DEFAULT_BUDGET,
    warn: Warn = _ignore,
) -> Iterator[Record]:
    """The materialised state (each live key's record) below ``upto`` (default: the high
    watermark, capped at the LSO): newest valid snapshot, then the log after it.

    ``log`` is an open partition or a partition dir (opened read-only for the walk, then
    closed: ``ReadOnlyLog``); ``strategy`` is the topic's (default: offset)."""
    strategy = strategy or StrategyConfig()
    if isinstance(log, Path):
        with ReadOnlyLog(log) as opened:
            yield from load_state(opened, strategy, upto=upto, budget_bytes=budget_bytes, warn=warn)
        return
    end = end_offset_for(log, upto)
    with ExitStack() as stack:
        plan = plan_state(log, end, warn)
        if plan.base is not None:
            stack.callback(plan.base.close)
        sources, bound = _sources(log, plan)
        for record in live_records(
            sources, strategy, budget_bytes, bound, tombstones=strategy.versioned
        ):
            if record.value is not None:
                yield record


@dataclass(frozen=True)
class SnapshotResult:
    """A snapshot just written (or the reason none was)."""

    path: Path | None
    sid: SnapshotId | None
    records: int = 0
    bytes: int = 0
    base: SnapshotId | None = None
    replayed_offsets: int = 0
    skipped: str | None = None
    warnings: tuple[str, ...] = ()


def _last_batch_below(log: PartitionLog, end: int) -> tuple[int, int]:
    """(leader epoch, max timestamp) of the batch holding offset ``end - 1``."""
    for batch in log.read(end - 1):
        return batch.header.partition_leader_epoch, batch.header.max_timestamp
    return 0, -1  # pragma: no cover - read() of an offset below the end yields its batch


def create_snapshot(
    log: PartitionLog,
    strategy: StrategyConfig,
    *,
    upto: int | None = None,
    compression: Compression = Compression.NONE,
    budget_bytes: int = DEFAULT_BUDGET,
    warn: Warn = _ignore,
) -> SnapshotResult:
    """Write the snapshot of every record below the end offset (``end_offset_for``)."""
    remove_leftovers(log.directory)
    end = end_offset_for(log, upto)
    if end <= log.log_start_offset:
        return SnapshotResult(None, None, skipped=f"nothing below offset {end} to snapshot")
    epoch, last_ts = _last_batch_below(log, end)
    sid = SnapshotId(end, max(epoch, 0))
    with ExitStack() as stack:
        plan = plan_state(log, end, warn)
        if plan.base is not None:
            stack.callback(plan.base.close)
            if plan.replay_from == end:
                return SnapshotResult(
                    None, plan.base_id, skipped=f"the newest snapshot already ends at {end}"
                )
        sources, bound = _sources(log, plan)
        with SnapshotWriter(
            log.directory, sid, last_contained_timestamp=last_ts, compression=compression
        ) as writer:
            # under timestamp and header a tombstone winner must stay in the snapshot: a later
            # record with a lower version loses to it (the whole-log rule), whatever the replay
            winners = live_records(
                sources, strategy, budget_bytes, bound, tombstones=strategy.versioned
            )
            writer.append(winners)
            path = writer.finish()
        return SnapshotResult(
            path,
            sid,
            records=writer.records,
            bytes=writer.bytes,
            base=plan.base_id,
            replayed_offsets=end - plan.replay_from,
            warnings=tuple(plan.warnings),
        )
