"""Plan B (``SparkPass``) keeps the batch ending at the high watermark as the local engine does
(KAFKA-17076 as KAFKA-20452 narrowed it; docs/kafka-format.md §4.11): an emptied batch stays as
a 61-byte header only where its next offset is the watermark. The logs and the kafka-python
reading are ``tests/support/cleaning.py``'s; the expected batches follow from the rule and how
each log is built, as in ``tests/compaction/test_high_watermark_batch.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cleanerd.compaction import plan_log
from cleanerd.inspect._verify import verify_partition
from cleanerd.spark._distributed_pass import SparkPass
from tests.support.cleaning import (
    HEADER_ONLY,
    LARGE_TS,
    OFFSET,
    compacted_config,
    kafka_python_batches,
    unkeyed_tail,
)


@pytest.mark.parametrize(("active_records", "hw"), [(0, None), (1, None), (1, 3), (2, 5)])
def test_plan_b_keeps_the_emptied_batch_only_at_the_high_watermark(
    spark: Any, tmp_path: Path, active_records: int, hw: int | None
) -> None:
    log = unkeyed_tail(tmp_path / "logs", active_records, hw)
    leo = 3 + active_records
    high_watermark = leo if hw is None else min(hw, leo)
    config = compacted_config()
    _, plan = plan_log(log, config, LARGE_TS)
    assert plan.first_uncleanable_offset == 3
    result = SparkPass(spark, tmp_path / "staging").clean(log, plan, config, OFFSET, LARGE_TS)
    assert result.end_offset == 3
    got = kafka_python_batches(log, 3)
    expected: list[tuple[int, int, int | None]] = [(0, 1, None), (1, 1, None)]
    if high_watermark == 3:
        expected.append((2, 0, HEADER_ONLY))
    assert [(last, n, size if n == 0 else None) for last, n, size in got] == expected
    assert verify_partition(log.directory).problems == []
