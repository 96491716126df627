"""The ``kafka-log`` data source read as ``cleanerd dump --format json`` reads the same files.

One log dir holds a ``cleanerd gen`` topic per codec (headers, tombstones, idempotent and
transactional producers with aborts, one topic with a transaction left open) and both Kafka
fixtures. The oracle is dump's own record items (``inspect._dump.log_items``); read_committed's
oracle is computed from those items (a producer's transactional data up to its ABORT marker
is dropped, markers too, and nothing at or past the first open transaction). Pushed filters are
checked against the full read filtered here, and by the bytes their tasks read (accumulators).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import shutil
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cleanerd.format import Compression, CorruptRecordError
from cleanerd.inspect import segment_logs
from cleanerd.inspect._dump import log_items
from cleanerd.spark._bounds import Bounds, to_micros
from cleanerd.spark._columns import ARROW_SCHEMA
from cleanerd.spark._metrics import ReadMetrics, ReadTotals
from cleanerd.spark._read import read_log
from cleanerd.spark._read_options import OptionError, parse_options
from cleanerd.spark._read_ranges import _entries, plan
from cleanerd.storage import OffsetIndex
from cleanerd.workload import WorkloadSpec, generate
from tests.support.bombs import bomb_logdir

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
Row = dict[str, Any]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, kafka_fixtures: Path) -> Path:
    root = tmp_path_factory.mktemp("spark-read") / "logs"
    for codec in CODECS:
        spec = WorkloadSpec(
            topic=f"gen-{codec}",
            records=400,
            keys=30,
            headers=2,
            codec=codec,
            records_per_batch=10,
            idempotent_producers=1,
            transactional_producers=2,
            abort_ratio=0.4,
            leave_open=codec == "zstd",
            partitions=2 if codec == "none" else 1,
            timestamps="in-order" if codec == "none" else "shuffled",
            segment_bytes=30_000,
            index_interval_bytes=600,
            seed=len(codec),
        )
        generate(root, spec)
    for name in ("small-gzip-hdr-tomb-0", "multiseg-snappy-0"):
        shutil.copytree(kafka_fixtures / name, root / name)
    return root


def partitions(logdir: Path) -> list[Path]:
    return sorted(p for p in logdir.iterdir() if p.is_dir())


def dump_rows(logdir: Path) -> list[Row]:
    """Every record line ``cleanerd dump --format json --values`` prints for the log dir."""
    rows: list[Row] = []
    for part in partitions(logdir):
        topic, _, partition = part.name.rpartition("-")
        for base, log in segment_logs(part):
            for item in log_items(log, batches=False, values=True):
                rows.append({**item, "topic": topic, "partition": int(partition), "segment": base})
    return rows


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def as_dump(row: Row) -> Row:
    """A DataFrame row in the terms of a dump record line (the fields both have)."""
    value: bytes | None = row["value"]
    ts = row["timestamp"]
    return {
        "topic": row["topic"],
        "partition": row["partition"],
        "segment": row["segment"],
        "offset": row["offset"],
        "timestamp": -1 if ts is None else ts // 1000,
        "key_hex": _hex(row["key"]),
        "value_len": -1 if value is None else len(value),
        "value_sha256": None if value is None else hashlib.sha256(value).hexdigest(),
        "tombstone": value is None,
        "headers": [{"key": h["key"], "value_hex": _hex(h["value"])} for h in row["headers"]],
        "control": row["control_type"],
        "timestamp_type": row["timestamp_type"],
        "transactional": row["transactional"],
        "is_control": row["is_control"],
        "producer_id": row["producer_id"],
        "producer_epoch": row["producer_epoch"],
        "leader_epoch": row["leader_epoch"],
        "sequence": row["sequence"],
    }


def expected(item: Row) -> Row:
    batch = item["batch"]
    seq = batch["base_sequence"]
    return {
        "topic": item["topic"],
        "partition": item["partition"],
        "segment": item["segment"],
        "offset": item["offset"],
        "timestamp": item["timestamp"],
        "key_hex": item["key_hex"],
        "value_len": item["value_len"],
        "value_sha256": item["value_sha256"],
        "tombstone": item["tombstone"],
        "headers": item["headers"],
        "control": item["control"],
        "timestamp_type": batch["timestamp_type"],
        "transactional": batch["transactional"],
        "is_control": batch["control"],
        "producer_id": batch["producer_id"],
        "producer_epoch": batch["producer_epoch"],
        "leader_epoch": batch["partition_leader_epoch"],
        "sequence": -1 if seq < 0 else (seq + item["offset"] - batch["base_offset"]) % 2**31,
    }


def committed(items: list[Row]) -> list[Row]:
    """What a read_committed consumer sees of dump's record lines (per partition, in order)."""
    out: list[Row] = []
    by_partition: dict[tuple[str, int], list[Row]] = {}
    for item in items:
        by_partition.setdefault((item["topic"], item["partition"]), []).append(item)
    for part in by_partition.values():
        pending: dict[int, list[int]] = {}
        aborted: set[int] = set()
        for item in part:
            batch = item["batch"]
            pid = batch["producer_id"]
            if batch["control"]:
                offsets = pending.pop(pid, [])
                if item["control"] == "ABORT":
                    aborted.update(offsets)
            elif batch["transactional"]:
                pending.setdefault(pid, []).append(item["offset"])
        open_from = min((offs[0] for offs in pending.values() if offs), default=None)
        out.extend(
            item
            for item in part
            if not item["batch"]["control"]
            and item["offset"] not in aborted
            and (open_from is None or item["offset"] < open_from)
        )
    return out


def rows_of(table: Any) -> list[Row]:
    """Rows as dicts, timestamps as integer microseconds (no float or time zone in between)."""
    i = table.schema.get_field_index("timestamp")
    micros = table.column(i).cast(pa.int64())
    rows: list[Row] = table.set_column(i, "timestamp", micros).to_pylist()
    return rows


def read(
    spark: Any, path: Path, where: str | None = None, **options: object
) -> tuple[Any, ReadTotals]:
    metrics = ReadMetrics(spark)
    df = read_log(spark, str(path), metrics=metrics, **options)
    if where is not None:
        df = df.filter(where)
    table = df.toArrow()
    return table, metrics.totals()


@pytest.fixture(scope="module")
def full(spark: Any, logdir: Path) -> tuple[Any, ReadTotals]:
    """The whole log dir, ranges cut at ``.index`` positions every ~16 KiB."""
    return read(spark, logdir, max_segment_bytes_per_task=16_384)


def test_arrow_schema_is_what_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415 (pyspark's own)

    from cleanerd.spark._datasource import spark_schema  # noqa: PLC0415 (needs pyspark)

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)


def test_big_segments_are_cut_at_index_positions(logdir: Path) -> None:
    whole = plan(logdir, Bounds(), max_bytes=2**40, committed=False)
    cut = plan(logdir, Bounds(), max_bytes=16_384, committed=False)
    assert len(whole) == sum(len(segment_logs(p)) for p in partitions(logdir))
    assert len(cut) > len(whole) + 5
    assert sum(r.size for r in cut) == sum(r.size for r in whole)


def test_full_read_equals_dump(full: tuple[Any, ReadTotals], logdir: Path) -> None:
    table, totals = full
    items = dump_rows(logdir)
    assert len(items) > 20_000
    got = [as_dump(r) for r in rows_of(table)]
    assert got == [expected(i) for i in items]
    controls = {r["control"] for r in got}
    assert {"COMMIT", "ABORT", None} <= controls
    assert any(r["tombstone"] for r in got)
    assert any(r["headers"] for r in got)
    files = sum(log.stat().st_size for p in partitions(logdir) for _, log in segment_logs(p))
    assert totals.bytes_read == files
    assert totals.records == len(items)


def test_read_committed_drops_aborted_data_markers_and_open_transactions(
    spark: Any, logdir: Path
) -> None:
    table, _ = read(spark, logdir, isolation="read_committed")
    want = [expected(i) for i in committed(dump_rows(logdir))]
    got = [as_dump(r) for r in rows_of(table)]
    assert got == want
    everything = dump_rows(logdir)
    assert len(want) < len([i for i in everything if not i["batch"]["control"]])


def _micros(text: str) -> int:
    return to_micros(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC))


T100 = _micros("2023-11-14 22:13:20.100")
T300 = _micros("2023-11-14 22:13:20.300")
FILTERS: dict[str, Callable[[Row], bool]] = {
    "topic = 'gen-lz4' and partition = 0": lambda r: r["topic"] == "gen-lz4",
    "topic in ('gen-gzip', 'multiseg-snappy')": lambda r: (
        r["topic"] in ("gen-gzip", "multiseg-snappy")
    ),
    "offset >= 150 and offset < 170": lambda r: 150 <= r["offset"] < 170,
    "offset = 12345": lambda r: r["offset"] == 12345,
    "timestamp >= timestamp'2023-11-14 22:13:20.300Z'": lambda r: (
        r["timestamp"] is not None and r["timestamp"] >= T300
    ),
    "partition > 0": lambda r: r["partition"] > 0,
    "timestamp > timestamp'2023-11-14 22:13:20.100Z' and topic = 'gen-zstd' and offset <= 250": (
        lambda r: (
            r["timestamp"] is not None
            and r["timestamp"] > T100
            and r["topic"] == "gen-zstd"
            and r["offset"] <= 250
        )
    ),
}
"""Each SQL filter and the same predicate over the full read's rows."""


@pytest.mark.parametrize("where", list(FILTERS))
def test_pushed_filters_give_the_filtered_rows_and_read_less(
    spark: Any, logdir: Path, full: tuple[Any, ReadTotals], where: str
) -> None:
    table, totals = read(spark, logdir, where)
    everything, full_totals = full
    keep = FILTERS[where]
    want = [(r["topic"], r["offset"]) for r in rows_of(everything) if keep(r)]
    assert want
    assert [(r["topic"], r["offset"]) for r in rows_of(table)] == want
    assert totals.bytes_read < full_totals.bytes_read


def test_options_topics_glob_and_partitions(
    spark: Any, logdir: Path, full: tuple[Any, ReadTotals]
) -> None:
    table, totals = read(spark, logdir, topics="gen-n*,small-*", partitions="1-3")
    everything, _ = full
    want = [
        (r["topic"], r["partition"], r["offset"])
        for r in rows_of(everything)
        if r["topic"] == "gen-none" and r["partition"] == 1
    ]
    assert want
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows_of(table)] == want
    assert totals.bytes_read == sum(
        log.stat().st_size for _, log in segment_logs(logdir / "gen-none-1")
    )


def test_key_only_scan(spark: Any, logdir: Path, full: tuple[Any, ReadTotals]) -> None:
    table, _ = read(spark, logdir, "topic = 'gen-lz4'", include_values=False)
    everything, _ = full
    want = [r for r in rows_of(everything) if r["topic"] == "gen-lz4"]
    got = rows_of(table)
    assert [r["key"] for r in got] == [r["key"] for r in want]
    assert [r["record_bytes"] for r in got] == [r["record_bytes"] for r in want]
    assert [r["value"] for r in got] == [None if r["value"] is None else b"" for r in want]
    assert any(r["value"] is None for r in got)


def test_without_pushdown_the_source_reads_everything_and_spark_filters(
    spark: Any, logdir: Path, full: tuple[Any, ReadTotals]
) -> None:
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, "false")
    try:
        table, totals = read(spark, logdir, "offset >= 150 and offset < 170")
    finally:
        spark.conf.set(key, "true")
    everything, full_totals = full
    assert totals.bytes_read == full_totals.bytes_read
    want = [(r["topic"], r["offset"]) for r in rows_of(everything) if 150 <= r["offset"] < 170]
    assert [(r["topic"], r["offset"]) for r in rows_of(table)] == want


def _corrupt_copy(logdir: Path, tmp_path: Path) -> tuple[Path, Path, CorruptRecordError]:
    """A log dir holding one partition whose first segment has a flipped byte mid-way."""
    root = tmp_path / "logs"
    shutil.copytree(logdir / "gen-none-0", root / "gen-none-0")
    log = segment_logs(root / "gen-none-0")[0][1]
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0xFF
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as caught:
        list(log_items(log, batches=False, values=True))
    return root, log, caught.value


def test_corrupt_segment_fails_with_dumps_error(spark: Any, logdir: Path, tmp_path: Path) -> None:
    root, log, error = _corrupt_copy(logdir, tmp_path)
    assert str(log) in str(error)
    with pytest.raises(Exception, match="CorruptRecordError") as caught:
        read(spark, root)
    assert str(error) in str(caught.value)


def test_skip_corrupt_drops_the_bad_tail_and_counts_it(
    spark: Any, logdir: Path, tmp_path: Path
) -> None:
    root, log, error = _corrupt_copy(logdir, tmp_path)
    good: list[Row] = []
    with pytest.raises(CorruptRecordError):
        good.extend(log_items(log, batches=False, values=True))
    later = [
        i
        for base, seg in segment_logs(root / "gen-none-0")[1:]
        for i in log_items(seg, batches=False, values=True)
    ]
    table, totals = read(spark, root, skip_corrupt=True)
    assert [r["offset"] for r in rows_of(table)] == [i["offset"] for i in good + later]
    assert error.position is not None
    assert totals.corrupt_bytes == log.stat().st_size - error.position
    assert totals.corrupt_ranges == 1


def test_bad_options_name_the_option() -> None:
    with pytest.raises(OptionError, match="isolation"):
        parse_options({"path": "/x", "isolation": "serializable"})
    with pytest.raises(OptionError, match="partitions"):
        parse_options({"path": "/x", "partitions": "3-1"})
    with pytest.raises(OptionError, match="max_segment_bytes_per_task"):
        parse_options({"path": "/x", "max_segment_bytes_per_task": "lots"})
    with pytest.raises(OptionError, match="unknown kafka-log option"):
        parse_options({"path": "/x", "topic": "a"})
    assert (
        parse_options({"path": "/x", "max_segment_bytes_per_task": "2m"}).max_segment_bytes_per_task
        == 2 * 1024**2
    )


def test_missing_log_dir_is_named(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a directory") as caught:
        read(spark, tmp_path / "nope")
    assert str(tmp_path / "nope") in str(caught.value)


def test_pushdown_accepts_only_what_it_applies_exactly() -> None:
    from pyspark.sql.datasource import (  # noqa: PLC0415 (pyspark's filter classes)
        EqualTo,
        GreaterThan,
        LessThanOrEqual,
        StringStartsWith,
    )

    from cleanerd.spark._pushdown import push  # noqa: PLC0415 (needs pyspark)

    at = dt.datetime(2023, 11, 14, 22, 13, 20, 100_500, tzinfo=dt.UTC)  # 1700000000100.5 ms
    other = [EqualTo(("key",), b"k"), StringStartsWith(("topic",), "gen"), EqualTo(("a", "b"), 1)]
    accepted = [
        GreaterThan(("timestamp",), at),
        LessThanOrEqual(("offset",), 99),
        EqualTo(("partition",), 3),
    ]
    bounds, rejected = push(Bounds(), [*other, *accepted])
    assert all(r is o for r, o in zip(rejected, other, strict=True))
    # ms * 1000 > 1700000000100500 us holds from 1700000000101 ms on, not at 100
    assert bounds.ts_min_ms == 1_700_000_000_101
    assert bounds.ts_filtered
    assert bounds.offset_max == 99
    assert bounds.wants_partition(3)
    assert not bounds.wants_partition(2)


def test_columns_declared_never_null_hold_no_null(logdir: Path) -> None:
    """Spark skips the null check of a column its schema says is never null (and reads
    whatever the buffer holds): every batch of every kind of record must agree."""
    from cleanerd.spark._segment_read import RangeStats, read_range  # noqa: PLC0415

    options = parse_options({"path": str(logdir)})
    bounds = options.bounds()
    never_null = [f.name for f in ARROW_SCHEMA if not f.nullable]
    assert "offset" in never_null
    assert "key" not in never_null
    rows = headers = 0
    for r in plan(logdir, bounds, max_bytes=16_384, committed=False):
        for batch in read_range(r, options.spec(bounds), RangeStats()):
            batch.validate(full=True)
            rows += batch.num_rows
            assert [n for n in never_null if batch.column(n).null_count] == []
            flat = batch.column("headers").flatten()
            headers += len(flat)
            assert flat.null_count == 0
            assert flat.field("key").null_count == 0
    assert rows > 2000
    assert headers > 1000


def test_names_column_mixes_names_and_nulls() -> None:
    import numpy as np  # noqa: PLC0415

    from cleanerd.format import ControlType  # noqa: PLC0415
    from cleanerd.spark import _columns as columns  # noqa: PLC0415

    ts = columns.names_column(columns._TIMESTAMP_TYPE_TABLE, np.array([1, 0, 1], np.int8))
    assert ts.to_pylist() == ["LogAppendTime", "CreateTime", "LogAppendTime"]
    assert ts.buffers()[0] is None  # no validity bitmap without nulls
    commit, abort = (
        columns.CONTROL_CODE[ControlType.COMMIT],
        columns.CONTROL_CODE[ControlType.ABORT],
    )
    codes = np.array([0, commit, 0, abort], np.int8)
    control = columns.names_column(columns._CONTROL_TYPE_TABLE, codes)
    assert control.to_pylist() == [None, "COMMIT", None, "ABORT"]
    assert columns.names_column(columns._CONTROL_TYPE_TABLE, np.zeros(3, np.int8)).null_count == 3


def test_a_cut_segment_gives_ranges_of_about_equal_size(logdir: Path) -> None:
    """Cut at the index position nearest each 1/n mark: no small leftover range (a stage's
    tasks then take about as long each; cut every 12,000 bytes, a 29,000-byte segment left
    one of 5,000)."""
    by_segment: dict[str, list[int]] = {}
    for r in plan(logdir, Bounds(), max_bytes=12_000, committed=False):
        by_segment.setdefault(r.path, []).append(r.size)
    cut = [sizes for sizes in by_segment.values() if len(sizes) > 1]
    assert cut
    for sizes in cut:
        assert min(sizes) >= 0.7 * max(sizes), sizes
        assert max(sizes) <= 12_000 + 1_500, sizes  # index entries about 1,000 bytes apart


def test_min_tasks_cuts_big_segments_for_the_cores(logdir: Path) -> None:
    from cleanerd.spark._read_ranges import MIN_TASK_BYTES, split_bytes  # noqa: PLC0415

    assert split_bytes(100 << 20, 4, 128 << 20) == 25 << 20
    assert split_bytes(100 << 20, 4, 16 << 20) == 16 << 20  # never above max_segment_bytes
    assert split_bytes(1 << 20, 8, 128 << 20) == MIN_TASK_BYTES  # nor below 4 MiB
    assert parse_options({"path": "/x"}).min_tasks == 1
    assert parse_options({"path": "/x", "min_tasks": "8"}).min_tasks == 8
    with pytest.raises(OptionError, match="min_tasks"):
        parse_options({"path": "/x", "min_tasks": "0"})
    whole = plan(logdir, Bounds(), max_bytes=2**40, committed=False)
    assert plan(logdir, Bounds(), max_bytes=2**40, committed=False, min_tasks=2) == whole


def test_a_decompression_bomb_fails_the_task_naming_the_setting(spark: Any, tmp_path: Path) -> None:
    """A 2 GiB zstd bomb fails its task at the default bound (nothing near 2 GiB is held), and
    the ``max_decompressed_message_bytes`` option sets the bound for a read."""
    root = tmp_path / "logs"
    _, part = bomb_logdir(root, Compression.ZSTD, 2 << 30)
    with pytest.raises(
        Exception, match=re.escape("max.decompressed.message.bytes = 134217728")
    ) as caught:
        read(spark, part.parent)
    assert "zstd payload decompresses past" in str(caught.value)
    small = bomb_logdir(tmp_path / "small", Compression.LZ4, 3 << 20)[1].parent
    with pytest.raises(Exception, match=re.escape("max.decompressed.message.bytes = 1048576")):
        read(spark, small, max_decompressed_message_bytes="1m")
    table, _ = read(spark, small, max_decompressed_message_bytes="4m", skip_corrupt=True)
    assert table.num_rows == 300  # the bomb decompresses; its record count is what is wrong


def test_index_entries_are_read_no_further_than_the_index_loaded(tmp_path: Path) -> None:
    """The read plan re-reads a segment's ``.index`` for its positions: only as many entries
    as the index loaded (at most ``segment.index.bytes`` of them), even when the file has grown
    since to a sparse gigabyte."""
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(b"".join(struct.pack(">ii", 10 * i, 4096 * i) for i in range(50)))
    index = OffsetIndex(path, 100)
    assert index.entries == 50
    with open(path, "r+b") as f:
        f.truncate(1 << 30)
    tracemalloc.start()
    try:
        offsets, positions = _entries(index)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert offsets.tolist() == [100 + 10 * i for i in range(50)]
    assert positions.tolist() == [4096 * i for i in range(50)]
    assert peak < 1 << 20
