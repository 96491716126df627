"""The ``kafka-log`` source reads a partition that began before Kafka 0.11: magic 0 and 1
message sets (plain and compressed wrappers) then v2 batches, written by kafka-python, and
gives what kafka-python's reader gives (docs/kafka-format.md §2.8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cleanerd.spark._read import read_log
from cleanerd.spark._read_options import parse_options
from cleanerd.spark._read_ranges import plan
from cleanerd.spark._segment_read import RangeStats, read_range
from tests.support.cleaning import write_segment
from tests.support.legacy import Rec, legacy_set, read_back, v2_batch

Row = tuple[int, int | None, str, bytes | None, bytes | None]


def _recs(first: int, n: int) -> list[Rec]:
    return [
        (first + i, 5_000 + i, b"key-%d" % (i % 4), None if i % 5 == 3 else b"v%d" % (first + i))
        for i in range(n)
    ]


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    part = tmp_path / "logs" / "old-0"
    write_segment(part, 0, [
        legacy_set(0, "none", _recs(0, 1)), legacy_set(0, "gzip", _recs(1, 4)),
        legacy_set(0, "lz4", _recs(5, 3)),
    ])  # fmt: skip
    write_segment(part, 8, [
        legacy_set(1, "snappy", _recs(8, 5)), legacy_set(1, "none", _recs(13, 1)),
        legacy_set(1, "lz4", _recs(14, 3), log_append_time=42_000),
        v2_batch(17, "gzip", _recs(17, 4)),
    ])  # fmt: skip
    return tmp_path / "logs"


def kafka_python_rows(logdir: Path) -> list[Row]:
    rows: list[Row] = []
    for log in sorted((logdir / "old-0").glob("*.log")):
        recs, _ = read_back(log)
        for r in recs:
            kind = "NoTimestampType" if r.magic == 0 else None
            ts = None if r.timestamp in (None, -1) else r.timestamp
            rows.append((r.offset, ts, kind or "?", r.key, r.value))
    return rows


def _as_rows(batches: list[Any]) -> list[Row]:
    out: list[Row] = []
    for b in batches:
        for d in b.to_pylist():
            ts = d["timestamp"]
            ms = None if ts is None else int(ts.timestamp() * 1000)
            out.append((d["offset"], ms, d["timestamp_type"], d["key"], d["value"]))
    return out


def _same(got: list[Row], want: list[Row]) -> None:
    assert [g[:2] + g[3:] for g in got] == [w[:2] + w[3:] for w in want]
    for g, w in zip(got, want, strict=True):
        if w[2] == "NoTimestampType":
            assert g[2] == "NoTimestampType"
        else:
            assert g[2] in ("CreateTime", "LogAppendTime")
    assert [g[2] for g in got if g[0] in (14, 15, 16)] == ["LogAppendTime"] * 3


def test_ranges_read_legacy_and_v2_as_kafka_python_does(logdir: Path) -> None:
    options = parse_options({"path": str(logdir)})
    bounds = options.bounds()
    batches = [
        b
        for r in plan(logdir, bounds, max_bytes=1 << 20, committed=False)
        for b in read_range(r, options.spec(bounds), RangeStats())
    ]
    for b in batches:
        b.validate(full=True)
    _same(_as_rows(batches), kafka_python_rows(logdir))


def test_spark_reads_a_legacy_partition(spark: Any, logdir: Path) -> None:
    table = read_log(spark, str(logdir)).orderBy("offset").toArrow()
    _same(_as_rows(table.to_batches()), kafka_python_rows(logdir))
