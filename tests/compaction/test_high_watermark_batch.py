"""The batch a cleaning keeps so the log never ends below its high watermark (docs/kafka-format.md
§4.8, §4.11): KAFKA-17076 kept the batch ending at each round's upper bound, at least as an empty
header; KAFKA-20452 (apache/kafka PR #22089) keeps it only where its next offset is the high
watermark. Kafka's ``testCleanSegmentsRetainingLastEmptyBatch`` and
``testCleanSegmentsNotRetainingLastEmptyBatch``, and whole passes on logs built so that the
round's last batch loses its only record, with the high watermark at, above or absent
(``replication-offset-checkpoint``; without an entry the log end stands for it).

The oracle is the rule itself, worked out from how each log is built: the batches below the
cleaned range's end are the two keyed ones, plus an empty 61-byte header at offset 2 exactly when
3 (its next offset) is the high watermark. The cleaned segment is read back with kafka-python's
decoder, not ours.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cleanerd.compaction import plan_log
from cleanerd.compaction._cleaner import Cleaner
from cleanerd.inspect._verify import verify_partition
from tests.support.cleaning import (
    HEADER_ONLY,
    LARGE_TS,
    LONG_MAX,
    OFFSET,
    compacted_config,
    fill_segments,
    hashes_of,
    kafka_python_batches,
    keys_in_log,
    new_log,
    offset_map,
    rec,
    unkeyed_tail,
)


@pytest.mark.parametrize(
    ("active_records", "hw"),
    [
        (0, None),  # no checkpoint, empty active segment: the log end (3) is the watermark
        (1, None),  # no checkpoint: the log end (4) is past the cleaned range
        (1, 3),  # a broker's checkpoint at the active base: the round ends at the watermark
        (1, 4),  # the watermark is the log end, past the cleaned range
        (3, 5),  # the watermark inside the active segment
        (0, 10),  # a checkpoint past the log end counts as the log end (3)
    ],
)
def test_a_pass_keeps_the_emptied_batch_only_where_it_ends_at_the_high_watermark(
    tmp_path: Path, active_records: int, hw: int | None
) -> None:
    log = unkeyed_tail(tmp_path, active_records, hw)
    leo = 3 + active_records
    high_watermark = leo if hw is None else min(hw, leo)
    config = compacted_config()
    _, plan = plan_log(log, config, LARGE_TS)
    assert plan.first_uncleanable_offset == 3  # the round always ends at the active base
    result = Cleaner(offset_map()).clean(log, plan, config, OFFSET, LARGE_TS)
    assert result.end_offset == 3
    expected = [(0, 1), (1, 1)] + ([(2, 0)] if high_watermark == 3 else [])
    got = kafka_python_batches(log, 3)
    assert [(last, count) for last, count, _ in got] == expected
    assert all(size == HEADER_ONLY for _, count, size in got if count == 0)
    assert log.log_end_offset == leo  # the active segment is never touched
    assert verify_partition(log.directory).problems == []


def test_a_watermark_checkpointed_below_the_round_end_cleans_nothing(tmp_path: Path) -> None:
    """The watermark bounds the round too (through the last stable offset, §4.2): a batch
    ending at a watermark below the active base is outside every round."""
    log = unkeyed_tail(tmp_path, 1, 2)
    _, plan = plan_log(log, compacted_config(), LARGE_TS)
    assert plan.first_uncleanable_offset == plan.first_dirty_offset == 0


@pytest.mark.parametrize("beyond", [False, True])
def test_clean_segments_keeps_the_last_empty_batch_only_at_the_high_watermark(
    tmp_path: Path, beyond: bool
) -> None:
    """Kafka test 32, testCleanSegmentsRetainingLastEmptyBatch (``beyond`` False), and
    testCleanSegmentsNotRetainingLastEmptyBatch (True): every key superseded, so the group
    collapses to one empty batch when the watermark is the group's end, to nothing when it is
    past it."""
    log = new_log(tmp_path, segment_bytes=1024)
    fill_segments(log, 4, lambda o: rec(o, o))
    keys = [b"%d" % x for x in keys_in_log(log)]
    omap = offset_map(1 << 12)
    omap.put_batch(hashes_of(keys), np.full(len(keys), LONG_MAX))
    group = log.segments[:3]
    group_end = group[-1].next_offset()
    hw = log.log_end_offset if beyond else group_end
    assert (hw > group_end) == beyond
    Cleaner(omap).clean_segments(log, group, compacted_config(), OFFSET, LARGE_TS, hw)
    got = kafka_python_batches(log, group_end)
    assert got == ([] if beyond else [(group_end - 1, 0, HEADER_ONLY)])
    assert verify_partition(log.directory).problems == []
