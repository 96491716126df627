"""``format("kafka-log")`` in a session cleanerd did not build: the pyspark shell's, a notebook's,
a plain ``SparkSession.builder`` one.

pyspark 4 registers the ``DefaultSource`` of every top-level ``pyspark_*`` module it finds on
``sys.path`` (``pyspark_cleanerd``). The session here is made in a fresh interpreter that can
import cleanerd, as an installed package can be, and never does before it reads: the rows must
be the ones ``cleanerd dump`` reads from the same files. Spark's lookup itself is run here too,
to show what it registers, that importing the module loads no kernels, and that a broken
cleanerd does not break the lookup for every other data source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cleanerd.inspect import segment_logs
from cleanerd.inspect._dump import log_items
from cleanerd.workload import WorkloadSpec, generate

pytest.importorskip("pyspark", reason="the spark extra is part of the test install")

REPO = Path(__file__).resolve().parents[2]
Row = tuple[str, int, int, str | None]  # topic, partition, offset, key as hex

_PLAIN_SESSION = """
import json, sys
from pyspark.sql import SparkSession

def rows(df):
    return [[r.topic, r.partition, r.offset, None if r.key is None else r.key.hex()]
            for r in df.select("topic", "partition", "offset", "key").collect()]

def filtered(spark):
    df = spark.read.format("kafka-log").load(sys.argv[1]).where("offset >= 150")
    plan = df._jdf.queryExecution().executedPlan().toString()
    return {"rows": rows(df), "spark_filters": "Filter " in plan}

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
report = {"rows": rows(spark.read.format("kafka-log").load(sys.argv[1]))}
report["imported_cleanerd"] = "cleanerd" in sys.modules
report["plain_filtered"] = filtered(spark)
from cleanerd.spark import build_session
report["same_session"] = build_session() is spark
report["built_filtered"] = filtered(spark)
spark.stop()
print(json.dumps(report))
"""

# Spark's own lookup, as its worker runs it, with the answer decoded: name -> class
_LOOKUP = """
import io, json, sys
from pyspark.serializers import UTF8Deserializer, read_int
from pyspark.worker_util import pickleSer
from pyspark.sql.worker import lookup_data_sources
{setup}
before, streams = set(sys.modules), (sys.stdout, sys.stderr)
sys.stdout = sys.stderr = printed = io.StringIO()
out = io.BytesIO()
lookup_data_sources._main(io.BytesIO(), out)
sys.stdout, sys.stderr = streams
loaded = sorted(set(sys.modules) - before)
out.seek(0)
found = {{}}
for _ in range(read_int(out)):
    name = UTF8Deserializer().loads(out)
    source = pickleSer._read_with_length(out)
    found[name] = [source.__module__, source.__qualname__, source.name()]
import pyspark_cleanerd
error = pyspark_cleanerd.LOAD_ERROR and type(pyspark_cleanerd.LOAD_ERROR).__name__
report = {{"found": found, "loaded": loaded, "printed": printed.getvalue(), "error": error}}
print(json.dumps(report))
"""


def _env() -> dict[str, str]:
    """cleanerd and pyspark_cleanerd on ``sys.path`` of the driver and of Spark's workers."""
    return {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}


def _python(code: str, *args: str, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=_env(),
        cwd=cwd,  # not the checkout: cleanerd comes from PYTHONPATH, as from site-packages
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def _dump_rows(logdir: Path) -> list[Row]:
    """What ``cleanerd dump`` reads: every record of every segment, control records too."""
    rows: list[Row] = []
    for part in sorted(p for p in logdir.iterdir() if p.is_dir()):
        topic, _, partition = part.name.rpartition("-")
        for _, log in segment_logs(part):
            for item in log_items(log, batches=False, values=False):
                offset, key = item["offset"], item["key_hex"]
                assert isinstance(offset, int)
                assert key is None or isinstance(key, str)
                rows.append((topic, int(partition), offset, key))
    return rows


def test_a_plain_session_reads_log_dirs_and_build_session_adds_pushdown(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    spec = WorkloadSpec(
        topic="orders",
        partitions=2,
        records=300,
        keys=40,
        codec="lz4",
        records_per_batch=10,
        transactional_producers=1,
        segment_bytes=8_000,
        seed=9,
    )
    generate(logdir, spec)
    expected = sorted(_dump_rows(logdir))
    assert len(expected) > 600  # two partitions' records and their transaction markers
    assert len(list((logdir / "orders-0").glob("*.log"))) > 2

    report = _python(_PLAIN_SESSION, str(logdir), cwd=tmp_path)

    assert sorted(tuple(r) for r in report["rows"]) == expected
    # nothing in the driver registered the source: Spark did, from pyspark_cleanerd
    assert report["imported_cleanerd"] is False
    later = sorted(r for r in expected if r[2] >= 150)
    plain, built = report["plain_filtered"], report["built_filtered"]
    assert sorted(tuple(r) for r in plain["rows"]) == later
    # the registered source takes no filters (the session's pushdown setting is off) ...
    assert plain["spark_filters"] is True
    # ... and build_session on the same session replaces it with the one that does
    assert report["same_session"] is True
    assert sorted(tuple(r) for r in built["rows"]) == later
    assert built["spark_filters"] is False


def test_spark_lookup_registers_kafka_log_and_loads_no_kernels(tmp_path: Path) -> None:
    report = _python(_LOOKUP.format(setup=""), cwd=tmp_path)
    assert report["error"] is None
    assert report["printed"] == ""  # it runs in every session: no word of it in anyone's output
    assert report["found"]["kafka-log"] == [
        "cleanerd.spark._datasource",
        "KafkaLogDataSource",
        "kafka-log",
    ]
    # every pyspark session on the machine pays for this import: pyspark's data source classes
    # are loaded already, and cleanerd adds its spark front door and the source's module only
    heavy = {"numba", "llvmlite", "numpy", "pyarrow", "pandas"}
    assert [m for m in report["loaded"] if m.split(".")[0] in heavy] == []
    ours = {m for m in report["loaded"] if m.split(".")[0] == "cleanerd"}
    assert ours <= {"cleanerd", "cleanerd.spark", "cleanerd.spark._extra", *SOURCE_MODULE}


SOURCE_MODULE = ("cleanerd.spark._datasource",)

# another package's data source, found beside it (the working dir is on sys.path)
_OTHER_SOURCE = """
from pyspark.sql.datasource import DataSource

class DefaultSource(DataSource):
    @classmethod
    def name(cls):
        return "other-source"
"""


def test_a_broken_cleanerd_leaves_other_sources_registered(tmp_path: Path) -> None:
    """Spark's lookup does not catch what a ``pyspark_*`` module raises: one that raised would
    take every other package's data sources down with it."""
    (tmp_path / "pyspark_other_source.py").write_text(_OTHER_SOURCE)
    broken = 'sys.modules["cleanerd.spark._datasource"] = None  # its import raises ImportError'
    report = _python(_LOOKUP.format(setup=broken), cwd=tmp_path)
    assert set(report["found"]) == {"other-source"}
    assert report["error"] == "ModuleNotFoundError"
    assert report["printed"] == ""
