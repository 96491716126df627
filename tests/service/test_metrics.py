"""The Prometheus exposition built from hand-made statuses, read back with the client's parser.

Checks names, units and Kafka's computations (docs/kafka-format.md §4.15): maxima over the workers'
last passes, the recopy ratio over their sums, delays in seconds, zeros without workers,
uncleanable figures per log dir, and the per-partition switch.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cleanerd import __version__
from cleanerd.scheduling import CleaningState, CleaningTotals, PartitionStatus
from cleanerd.service._lateness import DeadlineFigures
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.service._metrics_doc import METRICS_DOC
from cleanerd.service._status import DaemonStatus, WorkerStatus
from cleanerd.storage import TopicPartition

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _status(topic: str, partition: int, log_dir: str = "/data/a", **kw: Any) -> PartitionStatus:
    tp = TopicPartition(topic, partition)
    kw.setdefault("compacted", True)
    return PartitionStatus(
        tp=tp, log_dir=Path(log_dir), directory=Path(log_dir) / tp.dir_name, **kw
    )


def _scrape(status: DaemonStatus, metrics: DaemonMetrics | None = None) -> tuple[Samples, set[str]]:
    metrics = metrics or DaemonMetrics(lambda: status)
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    samples: Samples = {}
    families = set()
    for family in text_string_to_metric_families(body.decode()):
        families.add(family.name)
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, families


def _one(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _busy_status(*, per_partition: bool = True) -> DaemonStatus:
    partitions = (
        _status(
            "orders",
            0,
            dirty_ratio=0.75,
            compaction_delay_ms=2500,
            overdue=True,
            state=CleaningState.IN_PROGRESS,
            cleanable_bytes=1000,
        ),
        _status("orders", 1, dirty_ratio=0.25, state=CleaningState.PAUSED, paused_count=1),
        _status(
            "users",
            0,
            "/data/b",
            uncleanable=True,
            cleanable_bytes=4096,
            last_error="CorruptRecordError: bad crc",
        ),
        _status("users", 1, "/data/b", uncleanable=True, cleanable_bytes=100),
        _status("logs", 0, "/data/b", compacted=False),
    )
    workers = (
        WorkerStatus(
            0,
            last_buffer_utilization=0.5,
            last_bytes_read=1000,
            last_bytes_written=300,
            last_clean_seconds=2.5,
            last_max_compaction_delay_ms=7250,
            partition="orders-0",
        ),
        WorkerStatus(
            1,
            alive=False,
            last_buffer_utilization=0.875,
            last_bytes_read=3000,
            last_bytes_written=700,
            last_clean_seconds=1.25,
            last_max_compaction_delay_ms=1000,
        ),
    )
    totals = CleaningTotals(
        cleanings=7,
        failures=3,
        bytes_read=10_000,
        bytes_written=4_000,
        records_removed=55,
        tombstones_expired=3,
        tombstones_superseded=2,
        markers_removed=2,
        unkeyed_records_removed=1,
        txn_indexes_rebuilt=2,
        segments_rolled=4,
        segments_deleted=6,
        worker_restarts=1,
    )
    return DaemonStatus(
        now_ms=1_700_000_010_000,
        partitions=partitions,
        workers=workers,
        totals=totals,
        max_dirty_ratio=0.75,
        last_run_ms=1_700_000_007_500,
        logs_compacted_by_max_lag=2,
        dedupe_budget_bytes=128 << 20,
        dedupe_budget_in_use_bytes=16 << 20,
        throttle_sleep_seconds_total=1.5,
        last_success_ms=1_700_000_009_000,
        per_partition_metrics=per_partition,
        ready=True,
    )


def test_kafka_gauges_follow_kafkas_computations() -> None:
    samples, _ = _scrape(_busy_status())
    # max over workers (dead ones too, as Kafka iterates all its threads)
    assert _one(samples, "cleanerd_max_buffer_utilization_ratio") == 0.875
    # Σ written / Σ read over the last passes: 1000 / 4000
    assert _one(samples, "cleanerd_cleaner_recopy_ratio") == 0.25
    assert _one(samples, "cleanerd_max_clean_time_seconds") == 2.5
    # max of the workers' last-grab delays, in seconds and not truncated
    assert _one(samples, "cleanerd_max_compaction_delay_seconds") == 7.25
    assert _one(samples, "cleanerd_num_logs_compacted_by_max_compaction_lag") == 2
    assert _one(samples, "cleanerd_max_dirty_ratio") == 0.75
    assert _one(samples, "cleanerd_time_since_last_run_seconds") == 2.5
    assert _one(samples, "cleanerd_workers") == 2
    assert _one(samples, "cleanerd_dead_workers") == 1


def test_recopy_ratio_never_divides_by_zero() -> None:
    status = DaemonStatus(now_ms=0, partitions=(), workers=(WorkerStatus(0, last_bytes_written=0),))
    samples, _ = _scrape(status)
    assert _one(samples, "cleanerd_cleaner_recopy_ratio") == 0.0


def test_uncleanable_by_log_dir_with_their_cleanable_bytes() -> None:
    samples, _ = _scrape(_busy_status())
    assert _one(samples, "cleanerd_uncleanable_partitions", log_dir="/data/b") == 2
    assert _one(samples, "cleanerd_uncleanable_bytes", log_dir="/data/b") == 4196
    # a log dir with no uncleanable partition still has its series, at zero
    assert _one(samples, "cleanerd_uncleanable_partitions", log_dir="/data/a") == 0
    assert _one(samples, "cleanerd_uncleanable_bytes", log_dir="/data/a") == 0


def test_partitions_by_state_and_overdue() -> None:
    samples, _ = _scrape(_busy_status())
    by_state = {
        state: _one(samples, "cleanerd_partitions", state=state)
        for state in ("idle", "in_progress", "aborted", "paused", "uncleanable")
    }
    assert by_state == {"idle": 1, "in_progress": 1, "aborted": 0, "paused": 1, "uncleanable": 2}
    assert _one(samples, "cleanerd_overdue_partitions") == 1


def test_per_partition_gauges_on() -> None:
    samples, _ = _scrape(_busy_status(per_partition=True))
    assert _one(samples, "cleanerd_partition_dirty_ratio", topic="orders", partition="0") == 0.75
    assert _one(samples, "cleanerd_partition_dirty_ratio", topic="orders", partition="1") == 0.25
    assert (
        _one(samples, "cleanerd_partition_compaction_delay_seconds", topic="orders", partition="0")
        == 2.5
    )
    per_partition = {labels for name, labels in samples if name == "cleanerd_partition_dirty_ratio"}
    # the delete-only log has no dirty ratio series
    assert (("partition", "0"), ("topic", "logs")) not in per_partition
    assert len(per_partition) == 4


def test_per_partition_gauges_off() -> None:
    samples, _ = _scrape(_busy_status(per_partition=False))
    names = {name for name, _ in samples}
    assert "cleanerd_partition_dirty_ratio" not in names
    assert "cleanerd_partition_compaction_delay_seconds" not in names
    assert _one(samples, "cleanerd_max_dirty_ratio") == 0.75  # the rest is unaffected


def test_counters_budget_and_timestamps() -> None:
    samples, _ = _scrape(_busy_status())
    expected = {
        "cleanerd_cleanings_total": 7,
        "cleanerd_failures_total": 3,
        "cleanerd_bytes_read_total": 10_000,
        "cleanerd_bytes_written_total": 4_000,
        "cleanerd_records_removed_total": 55,
        "cleanerd_markers_removed_total": 2,
        "cleanerd_unkeyed_records_removed_total": 1,
        "cleanerd_txn_index_rebuilds_total": 2,
        "cleanerd_segments_rolled_total": 4,
        "cleanerd_segments_deleted_total": 6,
        "cleanerd_worker_restarts_total": 1,
        "cleanerd_throttle_sleep_seconds_total": 1.5,
        "cleanerd_dedupe_budget_bytes": 128 << 20,
        "cleanerd_dedupe_budget_in_use_bytes": 16 << 20,
        "cleanerd_last_success_timestamp_seconds": 1_700_000_009.0,
    }
    assert {name: _one(samples, name) for name in expected} == expected
    # the two kinds of tombstone apart, under one name
    tombstones = "cleanerd_tombstones_removed_total"
    assert _one(samples, tombstones, reason="expired") == 3
    assert _one(samples, tombstones, reason="superseded") == 2


def test_zero_gauges_without_workers() -> None:
    status = DaemonStatus(
        now_ms=50_000,
        partitions=(_status("t", 0, dirty_ratio=0.9),),
        max_dirty_ratio=0.9,
        last_run_ms=10_000,
        logs_compacted_by_max_lag=3,
    )
    samples, _ = _scrape(status)
    for name in (
        "cleanerd_max_compaction_delay_seconds",
        "cleanerd_num_logs_compacted_by_max_compaction_lag",
        "cleanerd_max_buffer_utilization_ratio",
        "cleanerd_cleaner_recopy_ratio",
        "cleanerd_max_clean_time_seconds",
        "cleanerd_max_dirty_ratio",
        "cleanerd_time_since_last_run_seconds",
        "cleanerd_dead_workers",
        "cleanerd_last_success_timestamp_seconds",
    ):
        assert _one(samples, name) == 0, name


def test_histogram_and_build_info() -> None:
    metrics = DaemonMetrics(_busy_status)
    metrics.observe_clean(0.3)
    metrics.observe_clean(42.0)
    samples, _ = _scrape(_busy_status(), metrics)
    assert _one(samples, "cleanerd_clean_duration_seconds_count") == 2
    assert _one(samples, "cleanerd_clean_duration_seconds_sum") == pytest.approx(42.3)
    assert _one(samples, "cleanerd_clean_duration_seconds_bucket", le="0.5") == 1
    assert _one(samples, "cleanerd_clean_duration_seconds_bucket", le="60.0") == 2
    info = [labels for name, labels in samples if name == "cleanerd_build_info"]
    assert len(info) == 1
    assert dict(info[0])["version"] == __version__
    assert not any(name.endswith("_created") for name, _ in samples)


def test_scrape_reads_a_fresh_status_each_time() -> None:
    current = {"status": DaemonStatus(now_ms=0, partitions=())}
    metrics = DaemonMetrics(lambda: current["status"])
    first, _ = _scrape(current["status"], metrics)
    current["status"] = _busy_status()
    second, _ = _scrape(current["status"], metrics)
    assert _one(first, "cleanerd_cleanings_total") == 0
    assert _one(second, "cleanerd_cleanings_total") == 7


def test_metrics_doc_matches_the_exposition() -> None:
    """docs/metrics.md's table is generated from METRICS_DOC: it must name exactly what is
    exposed."""
    metrics = DaemonMetrics(_busy_status)
    metrics.observe_clean(1.0)
    _, families = _scrape(_busy_status(), metrics)
    documented = set()
    for doc in METRICS_DOC:
        assert doc.name.startswith("cleanerd_")
        assert doc.type in {"gauge", "counter", "histogram", "info"}
        assert doc.help.strip()
        # the parser names counter families without _total (an Info is a plain gauge in text)
        suffix = "_total" if doc.type == "counter" else ""
        assert doc.name.endswith(suffix)
        documented.add(doc.name.removesuffix(suffix) if suffix else doc.name)
    assert len(documented) == len(METRICS_DOC)
    # the process collector's standard families are prometheus_client's, not cleanerd's
    assert documented == {f for f in families if not f.startswith("process_")}
    for required in (
        "cleanerd_max_compaction_delay_seconds",
        "cleanerd_num_logs_compacted_by_max_compaction_lag",
        "cleanerd_max_buffer_utilization_ratio",
        "cleanerd_cleaner_recopy_ratio",
        "cleanerd_max_clean_time_seconds",
        "cleanerd_max_dirty_ratio",
        "cleanerd_time_since_last_run_seconds",
        "cleanerd_dead_workers",
        "cleanerd_uncleanable_partitions",
        "cleanerd_uncleanable_bytes",
        "cleanerd_cleanings_total",
        "cleanerd_clean_duration_seconds",
        "cleanerd_bytes_read_total",
        "cleanerd_bytes_written_total",
        "cleanerd_records_removed_total",
        "cleanerd_tombstones_removed_total",
        "cleanerd_dedupe_budget_bytes",
        "cleanerd_dedupe_budget_in_use_bytes",
        "cleanerd_throttle_sleep_seconds_total",
        "cleanerd_last_success_timestamp_seconds",
        "cleanerd_partition_dirty_ratio",
        "cleanerd_partition_compaction_delay_seconds",
        "cleanerd_build_info",
        "cleanerd_compaction_delay_seconds",
        "cleanerd_logs_compacted_by_max_compaction_lag_total",
        "cleanerd_compaction_deadline_missed_total",
        "cleanerd_overdue_blocked_partitions",
        "cleanerd_partition_time_to_compaction_deadline_seconds",
    ):
        assert required in {d.name for d in METRICS_DOC}, required


def test_the_registry_has_the_process_s_memory_cpu_and_descriptors() -> None:
    """Standard process metrics, from the same scrape as cleanerd's own."""
    samples, _ = _scrape(_busy_status())
    assert _one(samples, "process_resident_memory_bytes") > 1 << 20
    assert _one(samples, "process_virtual_memory_bytes") >= _one(
        samples, "process_resident_memory_bytes"
    )
    assert _one(samples, "process_cpu_seconds_total") > 0
    assert _one(samples, "process_open_fds") >= 3  # stdin, stdout, stderr at least
    assert _one(samples, "process_max_fds") == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert _one(samples, "process_start_time_seconds") > 1_600_000_000


# --- compaction deadlines ------------------------------------------------------------------------
NOW_MS = 1_700_000_010_000


def _deadline_status(*, per_partition: bool = True) -> DaemonStatus:
    """Five partitions of ``gdpr`` with deadlines: one ahead, four past it (one being cleaned,
    one uncleanable, one paused, one backing off after a failure), and one without a deadline."""
    partitions = (
        _status("gdpr", 0),
        _status("gdpr", 1, state=CleaningState.IN_PROGRESS),
        _status("gdpr", 2, uncleanable=True, failures=3),
        _status("gdpr", 3, state=CleaningState.PAUSED, paused_count=1),
        _status("gdpr", 4, failures=1, retry_at_ms=NOW_MS + 1000),
        _status("gdpr", 5, uncleanable=True),  # nothing dirty: no deadline, not counted
    )
    next_ms = {TopicPartition("gdpr", 0): NOW_MS + 30_000}
    next_ms |= {TopicPartition("gdpr", n): NOW_MS - 1000 * n for n in (1, 2, 3, 4)}
    deadlines = DeadlineFigures(
        missed={("gdpr", "late"): 4, ("gdpr", "uncleanable"): 1, ("gdpr", "paused"): 0},
        by_max_lag={"gdpr": 7, "audit": 0},
        next_ms=next_ms,
    )
    return DaemonStatus(
        now_ms=NOW_MS,
        partitions=partitions,
        deadlines=deadlines,
        per_partition_metrics=per_partition,
    )


def test_compaction_delay_histogram_by_topic_with_negative_buckets() -> None:
    metrics = DaemonMetrics(_busy_status)
    for topic, seconds in (("gdpr", -4000.0), ("gdpr", -30.0), ("gdpr", 5.0), ("audit", 7200.0)):
        metrics.observe_compaction_delay(topic, seconds)
    samples, _ = _scrape(_busy_status(), metrics)
    name = "cleanerd_compaction_delay_seconds"
    assert _one(samples, name + "_count", topic="gdpr") == 3
    # with negative buckets there is no _sum (OpenMetrics): the buckets say it all
    assert (name + "_sum", (("topic", "gdpr"),)) not in samples
    gdpr = {
        le: _one(samples, name + "_bucket", topic="gdpr", le=le)
        for le in ("-604800.0", "-3600.0", "-60.0", "-10.0", "0.0", "10.0", "+Inf")
    }
    assert gdpr == {
        "-604800.0": 0,
        "-3600.0": 1,  # over an hour ahead of the deadline
        "-60.0": 1,
        "-10.0": 2,  # half a minute ahead
        "0.0": 2,
        "10.0": 3,  # five seconds late
        "+Inf": 3,
    }
    assert _one(samples, name + "_bucket", topic="audit", le="3600.0") == 0
    assert _one(samples, name + "_bucket", topic="audit", le="21600.0") == 1


def test_deadline_counters_by_topic_and_reason() -> None:
    samples, _ = _scrape(_deadline_status())
    missed = "cleanerd_compaction_deadline_missed_total"
    assert _one(samples, missed, topic="gdpr", reason="late") == 4
    assert _one(samples, missed, topic="gdpr", reason="uncleanable") == 1
    assert _one(samples, missed, topic="gdpr", reason="paused") == 0
    by_lag = "cleanerd_logs_compacted_by_max_compaction_lag_total"
    assert _one(samples, by_lag, topic="gdpr") == 7
    assert _one(samples, by_lag, topic="audit") == 0
    # Kafka's gauge keeps its meaning: the last grab's count, not these
    assert _one(samples, "cleanerd_num_logs_compacted_by_max_compaction_lag") == 0


def test_overdue_blocked_partitions_by_reason() -> None:
    samples, _ = _scrape(_deadline_status())
    by_reason = {
        reason: _one(samples, "cleanerd_overdue_blocked_partitions", reason=reason)
        for reason in ("uncleanable", "paused", "failing")
    }
    # the one being cleaned is past its deadline but not blocked; gdpr-5 has no deadline
    assert by_reason == {"uncleanable": 1, "paused": 1, "failing": 1}


def test_time_to_each_partition_s_deadline() -> None:
    samples, _ = _scrape(_deadline_status())
    name = "cleanerd_partition_time_to_compaction_deadline_seconds"
    seconds = {
        dict(labels)["partition"]: value for (n, labels), value in samples.items() if n == name
    }
    assert seconds == {"0": 30.0, "1": -1.0, "2": -2.0, "3": -3.0, "4": -4.0}
    off, _ = _scrape(_deadline_status(per_partition=False))
    assert name not in {n for n, _ in off}
    assert (
        _one(off, "cleanerd_overdue_blocked_partitions", reason="paused") == 1
    )  # not per partition


def test_cleaning_processes_are_measured_from_proc_and_a_gone_one_is_left_out() -> None:
    """Two workers: one with a live process (a real child that holds 64 MiB, standing in for a
    cleaning process), one whose process is gone; the daemon's own process_* stay its own."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(64 << 20); print(1, flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        assert holder.stdout is not None
        holder.stdout.readline()  # its memory is touched
        workers = (WorkerStatus(0, pid=holder.pid), WorkerStatus(1, pid=gone.pid))
        status = DaemonStatus(now_ms=1, partitions=(), workers=workers)
        samples, _ = _scrape(status)
    finally:
        holder.kill()
        holder.wait()
    assert _one(samples, "cleanerd_cleaning_processes") == 1
    rss = _one(samples, "cleanerd_cleaning_process_resident_memory_bytes")
    assert 64 << 20 < rss < 256 << 20  # the child alone: Python and its 64 MiB
    # the reaped child's CPU counts too (``gone`` ran Python's start-up)
    assert _one(samples, "cleanerd_cleaning_process_cpu_seconds_total") > 0
    assert _one(samples, "process_resident_memory_bytes") > 0
