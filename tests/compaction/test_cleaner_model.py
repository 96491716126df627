"""The engine against the reference model (``compaction_model``) on random logs.

Random logs: keys and unkeyed records, tombstones, out-of-order timestamps, version headers
(present, missing, wrong length), codecs, several segments, idempotent producers and
transactional producers with commits and aborts. Random offset maps down to two slots, so most
examples need several passes. Each example cleans to completion (a fresh plan per pass until
the first dirty offset reaches the first uncleanable one) and compares the data records left with
the model; then, past the delete horizon, appends more records and cleans again, which must
remove every tombstone of the first part.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.compaction import OffsetMap, slot_bytes
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig
from tests.support.cleaning import (
    DAY,
    clean_until_done,
    compacted_config,
    data_records,
)
from tests.support.compaction_model import ModelRecord, survivors
from tests.support.random_logs import (
    NOW,
    Writer,
    append_st,
    op_st,
    strategy_config,
)


def _check(log: PartitionLog, expected: dict[int, ModelRecord]) -> None:
    got = data_records(log)
    assert {o: (r.key, r.value) for o, r in got.items()} == {
        o: (r.key, r.value) for o, r in expected.items()
    }


@pytest.mark.slow
@settings(
    max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ops=st.lists(op_st, min_size=10, max_size=50),
    commits=st.lists(st.booleans(), min_size=2, max_size=2),
    later=st.lists(append_st, min_size=1, max_size=6),
    strategy_name=st.sampled_from(["offset", "timestamp", "header"]),
    slots=st.integers(2, 8),
    load_factor=st.sampled_from([0.75, 0.9, 1.0]),
    segment_bytes=st.sampled_from([200, 400, 1000, 100_000]),
    replica=st.booleans(),
    lost=st.lists(st.sampled_from(["index", "timeindex", "txnindex"]), max_size=12),
)
def test_engine_matches_model(
    tmp_path_factory: object,
    ops: list[tuple[object, ...]],
    commits: list[bool],
    later: list[tuple[object, ...]],
    strategy_name: str,
    slots: int,
    load_factor: float,
    segment_bytes: int,
    replica: bool,
    lost: list[str],
) -> None:
    """Also through ``append_batches`` and with index files lost at random before cleaning (a
    log dir copied without them): recovery and the cleaner's check of each ``.txnindex``
    must leave no aborted record taken for committed."""
    directory: Path = tmp_path_factory.mktemp("log") / "t-0"  # type: ignore[attr-defined]
    seg_config = LogConfig(segment_bytes=segment_bytes)
    log = PartitionLog.create(directory, seg_config)
    writer = Writer(log, replica)
    writer.run(ops)
    writer.finish(commits)
    if lost:
        log.close()
        logs = sorted(directory.glob("*.log"))
        for i, suffix in enumerate(lost):  # segment i mod n loses that index
            logs[(i * 7) % len(logs)].with_suffix("." + suffix).unlink(missing_ok=True)
        log = writer.log = PartitionLog(directory, seg_config)
    strategy = strategy_config(strategy_name)
    slots = max(slots, 2)
    omap = OffsetMap(slots * slot_bytes(strategy), strategy, load_factor)
    config = compacted_config(delete_retention_ms=DAY)

    results = clean_until_done(log, omap, strategy, config, NOW)
    _check(log, survivors(writer.model(), strategy_name))
    unkeyed = sum(
        1 for i, r in enumerate(writer.records) if r.key is None and i not in writer.aborted
    )
    assert sum(r.stats.invalid_messages_read for r in results) == unkeyed
    assert verify_partition(directory).problems == []

    # past the horizon: new data and a clean remove every tombstone of the first part
    boundary = log.log_end_offset
    writer.run(later)
    writer.finish([True, True])
    if strategy.versioned:
        # one pass: under timestamp/header a record that loses to a tombstone comes back if a
        # pass drops the expired tombstone before a later pass compares the two (Kafka's
        # tombstone semantics); which one survives then depends on where passes end
        omap = OffsetMap(64 * slot_bytes(strategy), strategy)
    clean_until_done(log, omap, strategy, config, NOW + DAY)
    expected = survivors(writer.model(), strategy_name, expired_below=boundary)
    _check(log, expected)
    assert verify_partition(directory).problems == []
    log.close()
    _check(PartitionLog(directory), expected)
