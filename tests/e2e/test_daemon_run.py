"""``cleanerd run`` as a user meets it: a real process, a real HTTP scrape, real signals.

Each test starts the daemon as a subprocess on a log dir made here, scrapes ``/metrics`` with
prometheus-client's parser, reads ``/status`` and the JSON log lines on stderr, and checks the
files afterwards. Timeouts only bound the waiting; nothing asserts on speed (the deadline
promise has its own test, tests/e2e/test_daemon_deadlines.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cleanerd.storage import PartitionLog, TopicPartition
from cleanerd.workload import LiveWriter, check_survivors
from tests.support.e2e_support import DaemonProcess, sample_value, write_config
from tests.support.polling import poll_until

BACKOFF_MS = 300


def _gen(logdir: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "cleanerd", "gen", str(logdir), *args]
    subprocess.run(cmd, check=True, capture_output=True)


def _records(directory: Path) -> int:
    log = PartitionLog(directory)
    try:
        return sum(1 for _ in log.records())
    finally:
        log.close()


def _tree_hash(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _partition(status: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in status["partitions"] if p["tp"] == name)
    return found


def _ts_ms(line: dict[str, Any]) -> int:
    return int(
        dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
    )


def _event(d: DaemonProcess, event: str, **fields: object) -> dict[str, Any] | None:
    for line in d.logs():
        if line.get("event") == event and all(line.get(k) == v for k, v in fields.items()):
            return line
    return None


def test_compacts_while_a_writer_appends(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    writer = LiveWriter(logdir, ("orders", "users"), keys=300, rate=20000, seed=3)
    writer.step(60)
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": BACKOFF_MS,
            "log.cleaner.min.cleanable.ratio": 0.2,
            "log.cleaner.threads": 2,
        },
    )
    with writer, DaemonProcess(config, tmp_path) as d:
        writer.start(duration_s=3.0)
        poll_until(
            lambda: sample_value(d.scrape(), "cleanerd_cleanings_total") >= 4 or None,
            timeout=60,
            what="four cleanings",
        )
        writer.stop()
        assert writer.error is None
        total = writer.records_written
        # once the writer is quiet, the daemon catches up: nothing above the ratio is left
        poll_until(
            lambda: (
                all(
                    p["dirty_ratio"] <= 0.2 and p["state"] == "idle"
                    for p in d.status()["partitions"]
                )
                or None
            ),
            timeout=60,
            what="every partition cleaned",
        )
        metrics = d.scrape()
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    assert sample_value(metrics, "cleanerd_bytes_read_total") > 0
    assert sample_value(metrics, "cleanerd_records_removed_total") > 0
    assert sample_value(metrics, "cleanerd_dead_workers") == 0
    kept = 0
    for tp in writer.partitions:
        check = check_survivors(logdir, tp, writer.expected(tp), writer.tombstoned(tp))
        assert check.ok, check.problems
        kept += check.records
    assert kept < total  # compacted: fewer records than written, the same survivors
    assert not list(logdir.rglob("*.cleaned"))
    assert not list(logdir.rglob("*.swap"))
    assert _event(d, "log cleaned") is not None


def test_idle_overdue_partition_is_rolled_and_compacted_within_the_lag(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    lag_ms = 3000
    writer = LiveWriter(logdir, ("idle",), keys=50, rate=None, segment_bytes=10 << 20, seed=5)
    writer.step(40)  # 800 records, all in the active segment, then silence
    writer.close()
    tp = TopicPartition("idle", 0)
    first_ms = min(r.timestamp for r in _read(logdir / tp.dir_name))
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 1000,
            "log.cleaner.min.cleanable.ratio": 0.99,
            "log.cleaner.max.compaction.lag.ms": lag_ms,
        },
    )
    with DaemonProcess(config, tmp_path) as d:
        poll_until(
            lambda: _partition(d.status(), "idle-0")["cleanings"] >= 1 or None,
            timeout=60,
            what="the idle partition compacted",
        )
        metrics = d.scrape()
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    rolled = _event(d, "rolled the active segment for its deadline", partition="idle-0")
    cleaned = _event(d, "log cleaned", partition="idle-0")
    assert rolled is not None
    assert cleaned is not None
    # rolled its expected cleaning time before its first record was the lag old, not before
    # (Kafka would never roll it without a new append). How soon after depends on the machine's
    # load (a loaded CI machine took 10 s to start the daemon): no wall-clock upper bound
    assert 0 < rolled["lead_ms"] <= lag_ms // 2
    assert lag_ms - rolled["lead_ms"] <= _ts_ms(rolled) - first_ms
    assert sample_value(metrics, "cleanerd_segments_rolled_total") == 1
    # max-compaction-delay: how far past the lag the log was when it was grabbed (0 if before)
    delay_s = sample_value(metrics, "cleanerd_max_compaction_delay_seconds")
    low = max(_ts_ms(rolled) - first_ms - lag_ms, 0) / 1000
    high = max(_ts_ms(cleaned) - first_ms - lag_ms, 0) / 1000
    assert low - 0.01 <= delay_s <= high + 0.01
    overdue = sample_value(metrics, "cleanerd_num_logs_compacted_by_max_compaction_lag")
    assert overdue == (1 if delay_s > 0 else 0)
    check = check_survivors(logdir, tp, writer.expected(tp), writer.tombstoned(tp))
    assert check.ok, check.problems
    assert check.records < 800


def _read(directory: Path) -> list[Any]:
    log = PartitionLog(directory)
    try:
        return list(log.records())
    finally:
        log.close()


def test_sigterm_during_a_long_clean_exits_0_and_leaves_no_cleaned_file(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    # big enough that the clean outlasts the throttler's first check (Kafka's 300 ms)
    _gen(logdir, "--records", "600000", "--keys", "200000", "--segment-bytes", "8000000")
    before = _records(logdir / "demo-0")
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": BACKOFF_MS,
            "log.cleaner.io.max.bytes.per.second": 1_000_000,  # a clean of minutes
            "cleanerd.shutdown.timeout.ms": 10_000,
        },
    )
    with DaemonProcess(config, tmp_path) as d:
        poll_until(
            lambda: _partition(d.status(), "demo-0")["state"] == "in_progress" or None,
            timeout=30,
            what="a cleaning in progress",
        )
        poll_until(  # into the throttled passes: one throttled sleep has ended
            lambda: sample_value(d.scrape(), "cleanerd_throttle_sleep_seconds_total") > 0,
            timeout=60,
            what="a throttled sleep",
        )
        started = time.monotonic()
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
        waited = time.monotonic() - started
    assert waited < 10 + 5  # within the shutdown timeout (plus interpreter exit)
    assert not list(logdir.rglob("*.cleaned"))
    assert _event(d, "cleaning aborted", partition="demo-0") is not None
    assert _event(d, "stopped") is not None
    verify = subprocess.run(
        [sys.executable, "-m", "cleanerd", "verify", str(logdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert _records(logdir / "demo-0") == before  # aborted before any swap: nothing lost


def test_sighup_applies_a_new_throttle_and_keeps_the_old_config_when_invalid(
    tmp_path: Path,
) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "--records", "2000")
    settings: dict[str, object] = {
        "log.dirs": str(logdir),
        "log.cleanup.policy": "compact",
        "log.cleaner.backoff.ms": BACKOFF_MS,
        "log.cleaner.io.max.bytes.per.second": 1e9,
    }
    config = write_config(tmp_path, settings)
    with DaemonProcess(config, tmp_path) as d:
        write_config(tmp_path, {**settings, "log.cleaner.io.max.bytes.per.second": 5e6})
        d.signal(signal.SIGHUP)
        reloaded = poll_until(lambda: _event(d, "config reloaded"), timeout=30, what="reload")
        assert "log.cleaner.io.max.bytes.per.second" in reloaded["changed"]
        assert reloaded["needs_restart"] == []
        write_config(tmp_path, {**settings, "log.cleaner.threads": -1})
        d.signal(signal.SIGHUP)
        failed = poll_until(
            lambda: _event(d, "config reload failed; keeping the running config"),
            timeout=30,
            what="a refused reload",
        )
        assert any("log.cleaner.threads" in p and "-1" in p for p in failed["problems"])
        assert d.healthz()[0] == 200
        assert d.status()["ready"] is True
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0


def test_corrupt_partition_becomes_uncleanable_and_the_others_go_on(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "--partitions", "3", "--records", "20000", "--segment-bytes", "300000")
    bad = logdir / "demo-1"
    segment = sorted(bad.glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    position = 5000
    data[position] ^= 0xFF  # inside a record: the batch's CRC no longer matches
    segment.write_bytes(bytes(data))
    before = _tree_hash(bad)
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": BACKOFF_MS,
            "cleanerd.retry.attempts": 1,
            "cleanerd.retry.backoff.ms": 100,
        },
    )
    with DaemonProcess(config, tmp_path) as d:

        def settled() -> dict[str, Any] | None:
            status = d.status()
            others = [_partition(status, f"demo-{i}")["cleanings"] >= 1 for i in (0, 2)]
            corrupt = _partition(status, "demo-1")
            return status if all(others) and corrupt["uncleanable"] else None

        status = poll_until(settled, timeout=60, what="healthy ones cleaned, demo-1 uncleanable")
        metrics = d.scrape()
        logs = d.logs()
        assert d.healthz()[0] == 200
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    corrupt = _partition(status, "demo-1")
    assert corrupt["state"] == "uncleanable"
    assert segment.name in corrupt["last_error"]
    assert corrupt["failures"] == 2  # the first try and one retry
    assert sample_value(metrics, "cleanerd_failures_total") == 2
    # each failure is logged, naming the file and position (in a cleaning, or in a survey when
    # the survey itself checks the CRCs)
    events = ("cleaning failed", "partition survey failed")
    failed = [x for x in logs if x.get("event") in events and x.get("partition") == "demo-1"]
    assert [(f["failures"], f.get("uncleanable")) for f in failed] == [(1, None), (2, True)]
    assert all(f["file"] == str(segment) and isinstance(f["position"], int) for f in failed)
    assert sample_value(metrics, "cleanerd_uncleanable_partitions", log_dir=str(logdir)) == 1
    assert sample_value(metrics, "cleanerd_uncleanable_bytes", log_dir=str(logdir)) > 0
    assert _tree_hash(bad) == before  # its files are untouched
    assert not list(logdir.rglob("*.cleaned"))


def test_truncated_segment_is_logged_counted_and_retried_before_uncleanable(
    tmp_path: Path,
) -> None:
    logdir = tmp_path / "logs"
    _gen(logdir, "--partitions", "2", "--records", "20000", "--segment-bytes", "300000")
    bad = logdir / "demo-1"
    segment = sorted(bad.glob("*.log"))[0]  # rolled: the active segment is the last one
    segment.write_bytes(segment.read_bytes()[:-50])  # cut inside its last batch
    before = _tree_hash(bad)
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": BACKOFF_MS,
            "cleanerd.retry.attempts": 2,
            "cleanerd.retry.backoff.ms": 100,
            "cleanerd.retry.backoff.max.ms": 150,
        },
    )
    seen: list[tuple[bool, int]] = []  # (uncleanable, failures) of demo-1 at each look
    with DaemonProcess(config, tmp_path) as d:

        def settled() -> dict[str, Any] | None:
            status = d.status()
            corrupt = _partition(status, "demo-1")
            seen.append((corrupt["uncleanable"], corrupt["failures"]))
            cleaned = _partition(status, "demo-0")["cleanings"] >= 1
            return status if cleaned and corrupt["uncleanable"] else None

        status = poll_until(settled, timeout=90, interval=0.05, what="demo-1 uncleanable")
        metrics = d.scrape()
        logs = d.logs()
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    corrupt = _partition(status, "demo-1")
    assert (corrupt["state"], corrupt["failures"]) == ("uncleanable", 3)  # a try, two retries
    assert segment.name in corrupt["last_error"]
    assert all(failures == 3 for uncleanable, failures in seen if uncleanable)  # never at once
    assert status["totals"]["failures"] == 3
    assert sample_value(metrics, "cleanerd_failures_total") == 3
    assert sample_value(metrics, "cleanerd_uncleanable_partitions", log_dir=str(logdir)) == 1
    failed = [line for line in logs if line.get("event") == "partition survey failed"]
    assert [(f["failures"], f.get("retry_in_ms"), f.get("uncleanable")) for f in failed] == [
        (1, 100, None),
        (2, 150, None),
        (3, None, True),
    ]
    for line in failed:
        assert (line["partition"], line["file"], line["level"]) == ("demo-1", str(segment), "error")
        assert isinstance(line["position"], int)
        assert segment.name in line["error"]
    assert _tree_hash(bad) == before  # nothing written in it
