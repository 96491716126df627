"""The daemon hands big partitions to Spark (issue 14, item 3), with a ``local[2]`` master.

``cleanerd run`` with ``cleanerd.engine.spark.master = local[2]`` and a low
``min.partition.bytes``: the big partition is compacted by Spark (plan B, forced by a tiny task
budget) and the small one locally; the metrics, ``/status`` and the log lines say which engine
did what, ``/status`` shows the Spark job's progress while it runs, and the big partition ends
with exactly the records a local ``compact`` of the same log keeps. A pause during the Spark job
cancels it and leaves the log as it was; a Spark cleaning that fails is retried with backoff and
then marked uncleanable, as a local one is.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cleanerd.compaction import compact_directory
from cleanerd.storage import PartitionLog, wall_clock_ms
from cleanerd.topics import LogConfig, StrategyConfig, TopicCleanerConfig
from tests.support.e2e_support import DaemonProcess, sample_value, write_config
from tests.support.polling import poll_until

pytest.importorskip("pyspark", reason="the spark extra is part of the test install")

BIG_RECORDS = 60_000
MIB = 1 << 20


def _gen(logdir: Path, topic: str, records: int, keys: int, segment_bytes: int) -> None:
    cmd = [sys.executable, "-m", "cleanerd", "gen", str(logdir), "--topic", topic]
    cmd += ["--records", str(records), "--keys", str(keys), "--segment-bytes", str(segment_bytes)]
    cmd += ["--tombstone-ratio", "0.05"]
    subprocess.run(cmd, check=True, capture_output=True)


def _records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record, in log order."""
    log = PartitionLog(directory)
    try:
        return [
            (r.offset, r.key, r.value)
            for batch in log.read()
            if not batch.header.is_control
            for r in batch.records()
        ]
    finally:
        log.close()


def _logs_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.log")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _config(tmp_path: Path, logdir: Path, **more: object) -> Path:
    settings: dict[str, object] = {
        "log.dirs": str(logdir),
        "log.cleanup.policy": "compact",
        "log.cleaner.backoff.ms": 300,
        "log.cleaner.threads": 2,
        "cleanerd.log.format": "json",
        "cleanerd.engine.spark.master": "local[2]",
        "cleanerd.engine.spark.min.partition.bytes": MIB,
        # 60,000 dirty records need more map than this (24 B a slot at 0.9): plan B
        "cleanerd.engine.spark.task.budget.bytes": MIB + 1,
        "cleanerd.engine.spark.conf.spark.sql.shuffle.partitions": "4",
    }
    settings.update(more)
    return write_config(tmp_path, settings)


def _partition(d: DaemonProcess, name: str) -> dict[str, Any]:
    status = d.status()
    return next(p for p in status["partitions"] if p["tp"] == name)


def _spark_worker(d: DaemonProcess) -> dict[str, Any] | None:
    return next((w for w in d.status()["workers"] if w["engine"] == "spark"), None)


def test_big_partition_by_spark_small_one_locally_pause_and_resume(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "big", BIG_RECORDS, 2000, 300_000)
    _gen(logdir, "small", 2000, 200, 30_000)
    before, records = _logs_digest(logdir / "big-0"), _records(logdir / "big-0")
    # the local engine's answer, from a copy compacted the same way before the daemon starts
    reference = tmp_path / "reference"
    shutil.copytree(logdir / "big-0", reference / "big-0")
    compact_directory(
        reference / "big-0",
        LogConfig(),
        TopicCleanerConfig(),
        StrategyConfig(),
        wall_clock_ms(),
    )
    progress: list[dict[str, Any]] = []

    def running() -> bool:
        """A worker's Spark cleaning has started its first Spark job (and /status says so)."""
        worker = _spark_worker(d)
        if worker is not None and worker["spark_job"] is not None:
            progress.append(worker["spark_job"])
        return bool(progress) and progress[-1]["jobs"] >= 1

    with DaemonProcess(_config(tmp_path, logdir), tmp_path) as d:
        # a pause during the Spark job cancels it: paused, nothing swapped in
        poll_until(running, timeout=120, interval=0.05, what="a running Spark job")
        assert d.post("/partitions/big/0/pause")[0] == 200
        poll_until(lambda: _partition(d, "big-0")["state"] == "paused", timeout=60, what="paused")
        assert _spark_worker(d) is None
        assert sample_value(d.scrape(), "cleanerd_spark_cleanings_total") == 0
        assert _records(logdir / "big-0") == records  # a cancelled plan B only staged
        assert _logs_digest(logdir / "big-0") == before
        # resumed, it is cleaned by Spark; the small partition was cleaned locally meanwhile
        assert d.post("/partitions/big/0/resume")[0] == 200
        poll_until(
            lambda: sample_value(d.scrape(), "cleanerd_spark_cleanings_total") >= 1,
            timeout=180,
            what="the Spark cleaning after resume",
        )
        samples = d.scrape()
        big, small = _partition(d, "big-0"), _partition(d, "small-0")
        d.signal(signal.SIGTERM)
        assert d.wait(60) == 0
    assert sample_value(samples, "cleanerd_cleanings_total") == 2
    assert sample_value(samples, "cleanerd_spark_cleanings_total") == 1
    assert sample_value(samples, "cleanerd_spark_failures_total") == 0
    assert (big["last_clean_engine"], small["last_clean_engine"]) == ("spark", "local")
    # /status showed the Spark job while it ran: plan B, its jobs and their tasks
    assert {p["plan"] for p in progress} == {"B"}
    assert max(p["tasks_total"] for p in progress) >= 1
    logs = d.logs()
    aborted = [line for line in logs if line["event"] == "cleaning aborted"]
    assert [(line["engine"], line["reason"]) for line in aborted] == [("spark", "paused")]
    cleaned = {line["partition"]: line for line in logs if line["event"] == "log cleaned"}
    assert (cleaned["big-0"]["engine"], cleaned["big-0"]["plan"]) == ("spark", "B")
    assert cleaned["small-0"]["engine"] == "local"
    assert _records(logdir / "big-0") == _records(reference / "big-0")
    assert len(_records(logdir / "big-0")) < BIG_RECORDS // 5


def test_a_failed_spark_cleaning_is_retried_then_uncleanable(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "big", BIG_RECORDS, 2000, 300_000)
    first = sorted((logdir / "big-0").glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(data))
    before = _logs_digest(logdir / "big-0")
    config = _config(
        tmp_path,
        logdir,
        cleanerd_retry_attempts=1,
        cleanerd_retry_backoff_ms=200,
        cleanerd_retry_backoff_max_ms=200,
    )
    with DaemonProcess(config, tmp_path) as d:
        poll_until(
            lambda: _partition(d, "big-0")["state"] == "uncleanable",
            timeout=180,
            what="uncleanable after a retry",
        )
        samples = d.scrape()
        big = _partition(d, "big-0")
    assert sample_value(samples, "cleanerd_spark_failures_total") == 2  # first try + one retry
    assert sample_value(samples, "cleanerd_failures_total") == 2
    assert sample_value(samples, "cleanerd_spark_cleanings_total") == 0
    assert first.name in big["last_error"]
    failed = [line for line in d.logs() if line["event"] == "cleaning failed"]
    assert [line["engine"] for line in failed] == ["spark", "spark"]
    assert _logs_digest(logdir / "big-0") == before


def test_sigterm_during_a_spark_job_cancels_it_and_exits_0(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "big", BIG_RECORDS, 2000, 300_000)
    before = _logs_digest(logdir / "big-0")

    def running() -> bool:
        worker = _spark_worker(d)
        return worker is not None and (worker["spark_job"] or {}).get("jobs", 0) >= 1

    with DaemonProcess(_config(tmp_path, logdir), tmp_path) as d:
        poll_until(running, timeout=120, interval=0.05, what="a running Spark job")
        d.signal(signal.SIGTERM)
        assert d.wait(60) == 0
    logs = d.logs()
    aborted = [line for line in logs if line["event"] == "cleaning aborted"]
    assert [(line["engine"], line["reason"]) for line in aborted] == [("spark", "shutdown")]
    assert [line["event"] for line in logs][-1] == "stopped"
    assert _logs_digest(logdir / "big-0") == before  # cancelled before any swap
    assert not list((logdir / "big-0").glob("*.cleaned"))


def test_a_spark_master_that_cannot_start_fails_the_cleaning_naming_the_setting(
    tmp_path: Path,
) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "big", 2000, 200, 30_000)
    before = _logs_digest(logdir / "big-0")
    config = _config(
        tmp_path,
        logdir,
        cleanerd_engine_spark_master="bogus://nowhere",
        cleanerd_engine_spark_min_partition_bytes=1,
        cleanerd_retry_attempts=0,
    )
    with DaemonProcess(config, tmp_path) as d:
        poll_until(
            lambda: _partition(d, "big-0")["state"] == "uncleanable", timeout=120, what="failed"
        )
        assert sample_value(d.scrape(), "cleanerd_spark_failures_total") == 1
    (failed,) = [line for line in d.logs() if line["event"] == "cleaning failed"]
    assert "cannot start the Spark session" in failed["error"]
    assert "cleanerd.engine.spark.master = 'bogus://nowhere'" in failed["error"]
    assert _logs_digest(logdir / "big-0") == before
