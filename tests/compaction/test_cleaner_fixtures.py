"""The Kafka-written fixtures compact to exactly the survivors their ``expected.json`` lists.

Each fixture dir is copied to a temporary log dir (the fixtures have no index files: opening the
log rebuilds them), its last segment is rolled so that all of it is cleanable, and it is cleaned
to completion with ``delete.retention.ms = 0``; one more pass over the whole log then removes the
tombstones. What is left must be exactly the keys whose newest record is not a tombstone, each at
that record's offset, and every batch must read back in kafka-python with its CRC intact.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from cleanerd.compaction import Cleaner, cleaner_checkpoint
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import PartitionLog
from tests.support.cleaning import (
    OFFSET,
    clean_until_done,
    compacted_config,
    data_records,
    make_plan,
    offset_map,
)

FIXTURES = ["small-gzip-hdr-tomb-0", "multiseg-snappy-0"]
NOW = 1_800_000_000_000


def kafka_python_records(log: PartitionLog) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Every data record of the log as kafka-python reads it (CRCs checked)."""
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    for seg in log.segments:
        if not seg.size:
            continue
        records = MemoryRecords(seg.log_path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert isinstance(batch, DefaultRecordBatch)
            assert batch.validate_crc()
            if not batch.is_control_batch:
                out.update((r.offset, (r.key, r.value)) for r in batch)
        assert records.valid_bytes() == seg.size
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("capacity", [1 << 12, 64])
def test_fixture_compacts_to_expected_survivors(
    kafka_fixtures: Path, tmp_path: Path, name: str, capacity: int
) -> None:
    expected = json.loads((kafka_fixtures / f"{name}.expected.json").read_text())
    directory = tmp_path / name
    shutil.copytree(kafka_fixtures / name, directory)
    log = PartitionLog(directory)
    log.roll()
    config = compacted_config(delete_retention_ms=0)
    results = clean_until_done(log, offset_map(capacity), OFFSET, config, NOW)
    keys = expected["keys"]
    if capacity < len(keys):
        assert len(results) > 1  # the small map needs several passes
    assert cleaner_checkpoint(log) == expected["next_offset"]
    # the tombstones kept (and stamped) so far go in a pass over the whole log
    whole = make_plan(log, log.log_start_offset, log.active_segment.base_offset)
    Cleaner(offset_map(1 << 12)).clean(log, whole, config, OFFSET, NOW)

    want = {v["offset"]: k.encode() for k, v in keys.items() if not v["tombstone"]}
    assert len(want) == expected["expected_survivors_drop_tombstones"]
    got = data_records(log)
    assert {o: r.key for o, r in got.items()} == want
    assert all(r.value is not None for r in got.values())
    assert {o: kv[0] for o, kv in kafka_python_records(log).items()} == want
    assert verify_partition(directory).problems == []
    log.close()
    assert {o: r.key for o, r in data_records(PartitionLog(directory)).items()} == want
