"""Snapshot + replay against the reference model (``compaction_model``) on random logs.

The state a reader loads (newest valid snapshot, then the log after its end) must be the
model's winners of the whole log, tombstones out: under every strategy, with transactions and
aborts, with the offset map cut into slices (a tiny budget), after more appends, after
cleanings, and with the newest snapshot damaged (an older one, or the log, takes over).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.compaction import OffsetMap, slot_bytes
from cleanerd.format import Record
from cleanerd.snapshot import apply_retention, create_snapshot, load_state, truncate_log
from cleanerd.storage import PartitionLog, list_snapshots
from cleanerd.topics import LogConfig, StrategyConfig
from tests.support.cleaning import DAY, clean_until_done, compacted_config
from tests.support.compaction_model import winners
from tests.support.random_logs import NOW, Writer, append_st, op_st, strategy_config

Entry = tuple[bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def expected_state(writer: Writer, strategy: str) -> dict[bytes, tuple[bytes | None, int]]:
    return {
        key: (r.value, r.timestamp)
        for key, r in winners(writer.model(), strategy).items()
        if r.value is not None
    }


def loaded(
    log: PartitionLog, strategy: StrategyConfig, budget: int
) -> dict[bytes, tuple[bytes | None, int]]:
    warnings: list[str] = []
    records: list[Record] = list(
        load_state(log, strategy, budget_bytes=budget, warn=warnings.append)
    )
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)), "a key appears twice in the state"
    return {r.key: (r.value, r.timestamp) for r in records if r.key is not None}


@pytest.mark.slow
@settings(
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(op_st, min_size=5, max_size=40),
    commits=st.lists(st.booleans(), min_size=2, max_size=2),
    later=st.lists(append_st, min_size=1, max_size=6),
    strategy_name=st.sampled_from(["offset", "timestamp", "header"]),
    slots=st.sampled_from([3, 5, 64]),
    segment_bytes=st.sampled_from([300, 1000, 100_000]),
    clean=st.booleans(),
)
def test_snapshot_plus_replay_is_the_models_state(
    tmp_path_factory: object,
    ops: list[tuple[object, ...]],
    commits: list[bool],
    later: list[tuple[object, ...]],
    strategy_name: str,
    slots: int,
    segment_bytes: int,
    clean: bool,
) -> None:
    directory: Path = tmp_path_factory.mktemp("log") / "t-0"  # type: ignore[attr-defined]
    log = PartitionLog.create(directory, LogConfig(segment_bytes=segment_bytes))
    writer = Writer(log)
    writer.run(ops)
    writer.finish(commits)
    strategy = strategy_config(strategy_name)
    budget = slots * slot_bytes(strategy)  # 3 or 5 slots: the key space is cut into slices

    # from the log alone, then from a first snapshot
    want = expected_state(writer, strategy_name)
    assert loaded(log, strategy, budget) == want
    first = create_snapshot(log, strategy, budget_bytes=budget)
    if log.log_end_offset == 0:  # nothing was appended: nothing to snapshot
        assert first.path is None
        assert first.skipped
    else:
        assert first.path is not None, first.skipped
        # under timestamp and header the tombstone winners stay in the file (see build.py)
        every = winners(writer.model(), strategy_name)
        assert first.records == (len(every) if strategy.versioned else len(want))
    assert loaded(log, strategy, budget) == want

    # more appends (and a cleaning that keeps tombstones: the horizon has not passed)
    writer.run(later)
    writer.finish([True, True])
    if clean:
        omap = OffsetMap(64 * slot_bytes(strategy), strategy)
        clean_until_done(log, omap, strategy, compacted_config(delete_retention_ms=DAY), NOW)
    want = expected_state(writer, strategy_name)
    assert loaded(log, strategy, budget) == want

    # a second snapshot built from the first plus the log after it
    second = create_snapshot(log, strategy, budget_bytes=budget)
    assert second.path is not None
    assert second.base == first.sid
    assert loaded(log, strategy, budget) == want

    # cleanings long past every delete horizon: tombstones below the oldest snapshot's end may
    # go, the ones past it must stay (a replay from that snapshot needs them)
    omap = OffsetMap(64 * slot_bytes(strategy), strategy)
    for days in (3, 6):
        clean_until_done(
            log, omap, strategy, compacted_config(delete_retention_ms=DAY), NOW + days * DAY
        )
    assert loaded(log, strategy, budget) == want

    # truncated to the oldest snapshot (bounded by the cleaner checkpoint): the same state
    oldest = first.sid or second.sid
    truncated = truncate_log(log)
    assert truncated is not None
    assert oldest is not None
    assert log.log_start_offset == truncated.log_start_offset <= oldest.end_offset
    assert loaded(log, strategy, budget) == want

    # the newest damaged: a warning names it, the older snapshot and the log take over; with no
    # older snapshot behind a truncated log the warning says records below the start are gone
    data = bytearray(second.path.read_bytes())
    data[-5] ^= 0x55
    second.path.write_bytes(bytes(data))
    warnings: list[str] = []
    records = list(load_state(log, strategy, budget_bytes=budget, warn=warnings.append))
    assert str(second.path) in warnings[0]
    if first.sid is not None or log.log_start_offset == 0:
        assert {r.key: (r.value, r.timestamp) for r in records} == want
        assert len(warnings) == 1
    else:
        assert "records below it were deleted" in warnings[1]
    made = [sid for sid in (first.sid, second.sid) if sid is not None]
    assert [sid for sid, _ in list_snapshots(directory)] == made
    log.close()


def test_retention_keeps_the_newest(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    made = []
    for round_ in range(4):
        log.append([Record(0, 1000, b"k%d" % i, b"r%d" % round_) for i in range(5)])
        result = create_snapshot(log, strategy_config("offset"))
        assert result.sid is not None
        made.append(result.sid)
    paths = [p for _, p in list_snapshots(log.directory)]
    assert apply_retention(log.directory, 2) == paths[:2]
    assert [sid for sid, _ in list_snapshots(log.directory)] == made[2:]
    assert apply_retention(log.directory, 0) == paths[2:3]  # one always stays
    assert [sid for sid, _ in list_snapshots(log.directory)] == made[3:]
    want = {b"k%d" % i: (b"r3", 1000) for i in range(5)}
    assert loaded(log, strategy_config("offset"), 1 << 20) == want
    log.close()


def test_cleaning_keeps_the_tombstones_a_snapshot_replay_needs(tmp_path: Path) -> None:
    """k1's value is in the oldest snapshot; its tombstone comes after it. Cleanings past the
    delete horizon must keep that tombstone, or a reader starting from the snapshot (the newest
    one damaged) gets k1 back. A log without snapshots loses the tombstone as Kafka's would."""
    strategy = strategy_config("offset")
    config = compacted_config(delete_retention_ms=DAY)
    logs = {}
    for name in ("with", "without"):
        log = PartitionLog.create(tmp_path / name / "t-0")
        log.append([Record(0, 1000, b"k1", b"v1"), Record(0, 1000, b"k2", b"v2")])
        if name == "with":
            assert create_snapshot(log, strategy).path is not None
        log.append([Record(0, 1000, b"k1", None), Record(0, 1000, b"k2", b"v3")])
        log.roll()
        omap = OffsetMap(64 * slot_bytes(strategy), strategy)
        for days in (3, 6):  # the first stamps the horizon, the second is past it
            clean_until_done(log, omap, strategy, config, NOW + days * DAY)
            log.append([Record(0, 1000, b"k3", b"v%d" % days)])  # dirty again: cleaned whole
            log.roll()
        logs[name] = log
    kept = [r for r in logs["with"].records() if r.key == b"k1"]
    assert [r.value for r in kept] == [None]  # the tombstone stayed
    assert [r for r in logs["without"].records() if r.key == b"k1"] == []
    want = {b"k2": (b"v3", 1000), b"k3": (b"v6", 1000)}
    assert loaded(logs["with"], strategy, 1 << 20) == want
    for log in logs.values():
        log.close()


def test_retention_counts_only_valid_snapshots(tmp_path: Path) -> None:
    """A damaged newest snapshot does not push out the valid one a reader falls back to."""
    log = PartitionLog.create(tmp_path / "t-0")
    for round_ in range(3):
        log.append([Record(0, 1000, b"k%d" % i, b"r%d" % round_) for i in range(5)])
        assert create_snapshot(log, strategy_config("offset")).sid is not None
    paths = [p for _, p in list_snapshots(log.directory)]
    newest = paths[-1]
    newest.write_bytes(newest.read_bytes()[:-5])  # no footer any more
    assert apply_retention(log.directory, 1) == paths[:1]
    assert [p for _, p in list_snapshots(log.directory)] == paths[1:]
    want = {b"k%d" % i: (b"r2", 1000) for i in range(5)}  # the log after the valid one
    assert loaded(log, strategy_config("offset"), 1 << 20) == want
    log.close()
