"""Prometheus metrics, computed from a ``DaemonStatus`` at scrape time.

A custom collector reads one frozen status per scrape instead of keeping gauges updated from
every code path: the figures then always agree with each other and with ``/status``, and a scrape
never touches asyncio objects or half-updated manager records. Only the two histograms (clean
durations, and how far from its deadline each cleaning landed) are live prometheus objects,
because a distribution cannot be rebuilt from a status.

The process's own figures come from prometheus_client's process collector, under the names every
exporter uses (``process_resident_memory_bytes``, ``process_cpu_seconds_total``,
``process_open_fds``, ...), so the usual dashboards and alerts work unchanged. They are not in
``METRICS_DOC``, which lists cleanerd's own metrics; the descriptor figures have that one home
(``process_open_fds``, ``process_max_fds``) beside cleanerd's segment maps. Python's platform and GC
collectors are left out: the build info says the Python version already.

The Kafka gauges keep Kafka's computations (docs/kafka-format.md §4.15) but report ratios (0..1) and
seconds (floats) instead of Kafka's truncated integer percents and seconds. Like Kafka's, they
read 0 when there are no workers. They describe the last grab only; what every cleaning did
against its deadline is in ``cleanerd_compaction_delay_seconds`` and the deadline counters
(``service._lateness`` defines the deadline).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

import cleanerd
from cleanerd.scheduling import CleaningState
from cleanerd.service._lateness import BLOCKED_REASONS, blocked_reason
from cleanerd.service._metrics_doc import METRICS_DOC
from cleanerd.service._status import DaemonStatus
from cleanerd.storage import MAPS

_HELP = {d.name: d.help for d in METRICS_DOC}

CLEAN_DURATION_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
)
"""Cleanings range from milliseconds (small logs) to an hour (a full dedupe buffer, throttled)."""

COMPACTION_DELAY_BUCKETS = (
    -604800,
    -86400,
    -21600,
    -3600,
    -900,
    -300,
    -60,
    -10,
    0,
    10,
    30,
    60,
    300,
    900,
    3600,
    21600,
    86400,
    604800,
)
"""Seconds from the deadline to the removal: negative (ahead of it) down to a week, a cleaning
triggered by the dirty ratio long before the lag; positive from a roll's few seconds to days."""

PARTITION_STATES = (*(s.value for s in CleaningState), "uncleanable")
_WAITING_OR_RUNNING = (CleaningState.IDLE, CleaningState.IN_PROGRESS)


def _gauge(name: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, _HELP[name], value=value)


def _counter(name: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, _HELP[name], value=value)


def _tombstones(expired: int, superseded: int) -> CounterMetricFamily:
    """One counter, a ``reason`` per kind: ``sum`` gives all tombstones removed."""
    name = "cleanerd_tombstones_removed_total"
    family = CounterMetricFamily(name, _HELP[name], labels=["reason"])
    family.add_metric(["expired"], expired)
    family.add_metric(["superseded"], superseded)
    return family


def _kafka_gauges(s: DaemonStatus) -> list[Metric]:
    """Kafka's LogCleaner and LogCleanerManager gauges (docs/kafka-format.md §4.15)."""
    workers = s.workers
    has_workers = bool(workers)  # Kafka: every gauge reads 0 without cleaner threads
    read = sum(w.last_bytes_read for w in workers)
    written = sum(w.last_bytes_written for w in workers)
    since_run = 0.0
    if has_workers and s.last_run_ms is not None:
        since_run = max(0, s.now_ms - s.last_run_ms) / 1000
    return [
        _gauge("cleanerd_max_compaction_delay_seconds", s.max_compaction_delay_ms / 1000),
        _gauge(
            "cleanerd_num_logs_compacted_by_max_compaction_lag",
            s.logs_compacted_by_max_lag if has_workers else 0,
        ),
        _gauge(
            "cleanerd_max_buffer_utilization_ratio",
            max((w.last_buffer_utilization for w in workers), default=0.0),
        ),
        _gauge("cleanerd_cleaner_recopy_ratio", written / max(read, 1)),
        _gauge(
            "cleanerd_max_clean_time_seconds",
            max((w.last_clean_seconds for w in workers), default=0.0),
        ),
        _gauge("cleanerd_max_dirty_ratio", s.max_dirty_ratio if has_workers else 0.0),
        _gauge("cleanerd_time_since_last_run_seconds", since_run),
        _gauge("cleanerd_workers", len(workers)),
        _gauge("cleanerd_dead_workers", s.dead_workers),
    ]


def _partition_gauges(s: DaemonStatus) -> list[Metric]:
    """Per-log-dir uncleanable figures, partitions by state, and the optional per-partition set."""
    count: dict[str, int] = {}
    unclean_bytes: dict[str, int] = {}
    states = dict.fromkeys(PARTITION_STATES, 0)
    overdue = cleanable = 0
    for p in s.partitions:
        log_dir = str(p.log_dir.absolute())  # Kafka tags with the absolute path
        count.setdefault(log_dir, 0)
        unclean_bytes.setdefault(log_dir, 0)
        if p.uncleanable:
            count[log_dir] += 1
            unclean_bytes[log_dir] += p.cleanable_bytes
        states["uncleanable" if p.uncleanable else p.state.value] += 1
        if p.compacted and p.overdue:
            overdue += 1
        if p.compacted and p.cleanable and not p.uncleanable and p.state in _WAITING_OR_RUNNING:
            cleanable += 1
    unclean = GaugeMetricFamily(
        "cleanerd_uncleanable_partitions",
        _HELP["cleanerd_uncleanable_partitions"],
        labels=["log_dir"],
    )
    ubytes = GaugeMetricFamily(
        "cleanerd_uncleanable_bytes", _HELP["cleanerd_uncleanable_bytes"], labels=["log_dir"]
    )
    for log_dir in sorted(count):
        unclean.add_metric([log_dir], count[log_dir])
        ubytes.add_metric([log_dir], unclean_bytes[log_dir])
    by_state = GaugeMetricFamily(
        "cleanerd_partitions", _HELP["cleanerd_partitions"], labels=["state"]
    )
    for state, n in states.items():
        by_state.add_metric([state], n)
    out: list[Metric] = [
        unclean,
        ubytes,
        by_state,
        _gauge("cleanerd_overdue_partitions", overdue),
        _overdue_blocked(s),
        _gauge("cleanerd_cleanable_partitions", cleanable),
    ]
    if s.per_partition_metrics:
        dirty = _per_partition("cleanerd_partition_dirty_ratio")
        delay = _per_partition("cleanerd_partition_compaction_delay_seconds")
        deadline = _per_partition("cleanerd_partition_time_to_compaction_deadline_seconds")
        for p in s.partitions:
            if p.compacted:  # a delete-only log has no dirty ratio
                labels = [p.tp.topic, str(p.tp.partition)]
                dirty.add_metric(labels, p.dirty_ratio)
                delay.add_metric(labels, p.compaction_delay_ms / 1000)
                if (next_ms := s.deadlines.next_ms.get(p.tp)) is not None:
                    deadline.add_metric(labels, (next_ms - s.now_ms) / 1000)
        out += [dirty, delay, deadline, *_snapshot_gauges(s)]
    return out


def _overdue_blocked(s: DaemonStatus) -> GaugeMetricFamily:
    """Partitions past their compaction deadline that the daemon cannot clean, by why."""
    name = "cleanerd_overdue_blocked_partitions"
    count = dict.fromkeys(BLOCKED_REASONS, 0)
    for p in s.partitions:
        next_ms = s.deadlines.next_ms.get(p.tp)
        why = blocked_reason(p)
        if why is not None and next_ms is not None and next_ms < s.now_ms:
            count[why] += 1
    family = GaugeMetricFamily(name, _HELP[name], labels=["reason"])
    for why, n in count.items():
        family.add_metric([why], n)
    return family


def _deadline_counters(s: DaemonStatus) -> list[Metric]:
    """Per topic: cleanings of logs past their max lag, and missed deadlines by reason."""
    d = s.deadlines
    name = "cleanerd_logs_compacted_by_max_compaction_lag_total"
    by_lag = CounterMetricFamily(name, _HELP[name], labels=["topic"])
    for topic, n in sorted(d.by_max_lag.items()):
        by_lag.add_metric([topic], n)
    name = "cleanerd_compaction_deadline_missed_total"
    missed = CounterMetricFamily(name, _HELP[name], labels=["topic", "reason"])
    for (topic, reason), n in sorted(d.missed.items()):
        missed.add_metric([topic, reason], n)
    return [by_lag, missed]


def _per_partition(name: str) -> GaugeMetricFamily:
    """A gauge family labelled by topic and partition, with its documented help."""
    return GaugeMetricFamily(name, _HELP[name], labels=["topic", "partition"])


def _snapshot_gauges(s: DaemonStatus) -> list[Metric]:
    """Each partition's newest snapshot the daemon took: end offset and age."""
    end = _per_partition("cleanerd_partition_snapshot_end_offset")
    age = _per_partition("cleanerd_partition_snapshot_age_seconds")
    for p in s.partitions:
        if p.latest_snapshot_end_offset is not None and p.latest_snapshot_ms is not None:
            labels = [p.tp.topic, str(p.tp.partition)]
            end.add_metric(labels, p.latest_snapshot_end_offset)
            age.add_metric(labels, max(0, s.now_ms - p.latest_snapshot_ms) / 1000)
    return [end, age]


def _budget_and_counters(s: DaemonStatus) -> list[Metric]:
    t = s.totals
    return [
        _gauge("cleanerd_dedupe_budget_bytes", s.dedupe_budget_bytes),
        _gauge("cleanerd_dedupe_budget_in_use_bytes", s.dedupe_budget_in_use_bytes),
        _gauge(
            "cleanerd_last_success_timestamp_seconds",
            0.0 if s.last_success_ms is None else s.last_success_ms / 1000,
        ),
        _counter("cleanerd_cleanings_total", t.cleanings),
        _counter("cleanerd_failures_total", t.failures),
        _counter("cleanerd_spark_cleanings_total", t.spark_cleanings),
        _counter("cleanerd_spark_failures_total", t.spark_failures),
        _gauge("cleanerd_spark_jobs_running", sum(w.engine == "spark" for w in s.workers)),
        _counter("cleanerd_bytes_read_total", t.bytes_read),
        _counter("cleanerd_bytes_written_total", t.bytes_written),
        _counter("cleanerd_records_removed_total", t.records_removed),
        _tombstones(t.tombstones_expired, t.tombstones_superseded),
        _counter("cleanerd_markers_removed_total", t.markers_removed),
        _counter("cleanerd_unkeyed_records_removed_total", t.unkeyed_records_removed),
        _counter("cleanerd_txn_index_rebuilds_total", t.txn_indexes_rebuilt),
        _counter("cleanerd_segments_rolled_total", t.segments_rolled),
        _counter("cleanerd_segments_deleted_total", t.segments_deleted),
        _counter("cleanerd_worker_restarts_total", t.worker_restarts),
        _counter("cleanerd_snapshots_total", t.snapshots),
        _counter("cleanerd_snapshot_failures_total", t.snapshot_failures),
        _counter("cleanerd_snapshot_bytes_total", t.snapshot_bytes),
        _counter("cleanerd_snapshot_seconds_total", t.snapshot_seconds),
        _counter("cleanerd_throttle_sleep_seconds_total", s.throttle_sleep_seconds_total),
    ]


def status_metrics(s: DaemonStatus) -> list[Metric]:
    """Every status-derived metric family (pure: tests and the collector share it)."""
    return _kafka_gauges(s) + _partition_gauges(s) + _budget_and_counters(s) + _deadline_counters(s)


class StatusCollector:
    """Builds the families from one fresh status per scrape."""

    def __init__(self, status: Callable[[], DaemonStatus]) -> None:
        self._status = status

    def collect(self) -> Iterable[Metric]:
        s = self._status()
        pids = [w.pid for w in s.workers if w.pid is not None]
        return status_metrics(s) + descriptor_metrics() + cleaning_process_metrics(pids)


def descriptor_metrics() -> list[Metric]:
    """The kept segment maps, which hold most of the process's descriptors (the descriptors
    themselves: the process collector's ``process_open_fds`` and ``process_max_fds``)."""
    return [
        _gauge("cleanerd_segment_maps_open", len(MAPS)),
        _gauge("cleanerd_segment_maps_limit", MAPS.limit),
    ]


class DaemonMetrics:
    """The daemon's own registry: status collector, the two histograms, build info and the
    process's figures."""

    def __init__(self, status: Callable[[], DaemonStatus]) -> None:
        # _created series only add noise for a single long-lived process;
        # the switch is process-wide in prometheus_client.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatusCollector(status))
        ProcessCollector(registry=self.registry)  # reads /proc; nothing where there is none
        self._durations = Histogram(
            "cleanerd_clean_duration_seconds",
            _HELP["cleanerd_clean_duration_seconds"],
            buckets=CLEAN_DURATION_BUCKETS,
            registry=self.registry,
        )
        self._delays = Histogram(
            "cleanerd_compaction_delay_seconds",
            _HELP["cleanerd_compaction_delay_seconds"],
            ["topic"],
            buckets=COMPACTION_DELAY_BUCKETS,
            registry=self.registry,
        )
        # an alert on "no success for an hour" must not fire in the daemon's first hour
        started = Gauge(
            "cleanerd_start_time_seconds",
            _HELP["cleanerd_start_time_seconds"],
            registry=self.registry,
        )
        started.set(time.time())
        build = Info("cleanerd_build", _HELP["cleanerd_build_info"], registry=self.registry)
        build.info(
            {
                "version": cleanerd.__version__,
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
            }
        )

    def observe_clean(self, seconds: float) -> None:
        """Record one successful cleaning's duration (thread-safe)."""
        self._durations.observe(seconds)

    def observe_compaction_delay(self, topic: str, seconds: float) -> None:
        """Record how far past its deadline (negative: ahead of it) a cleaning of ``topic``
        landed (``DeadlineWatch.cleaned``)."""
        self._delays.labels(topic).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def cleaning_process_metrics(pids: Iterable[int]) -> list[Metric]:
    """The workers' cleaning processes from ``/proc`` (the ``process_*`` metrics are the
    daemon's own): how many run, their resident memory, and their CPU with the ended ones'
    (which the kernel adds to the daemon's children's time when it reaps them)."""
    running, rss, cpu = 0, 0, _reaped_children_cpu()
    for pid in pids:
        figures = _process_figures(pid)
        if figures is not None:
            running += 1
            rss += figures[0]
            cpu += figures[1]
    return [
        _gauge("cleanerd_cleaning_processes", running),
        _gauge("cleanerd_cleaning_process_resident_memory_bytes", rss),
        _counter("cleanerd_cleaning_process_cpu_seconds_total", cpu),
    ]


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (field 3 on), or None (no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_figures(pid: int) -> tuple[int, float] | None:
    """(resident bytes, user + system CPU seconds) of ``pid``, or None when it is gone."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[21]) * _PAGE, (int(fields[11]) + int(fields[12])) / _TICKS


def _reaped_children_cpu() -> float:
    fields = _stat_fields("self")
    return 0.0 if fields is None else (int(fields[13]) + int(fields[14])) / _TICKS
