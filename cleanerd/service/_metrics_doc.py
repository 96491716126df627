"""Every metric the daemon exposes, once: its name, type, help text and Kafka counterpart.

The HELP lines (``_metrics.py``) and the table of docs/metrics.md are both generated from
``METRICS_DOC``, so the documentation cannot drift from what a scrape shows.
"""

from __future__ import annotations

from typing import NamedTuple


class MetricDoc(NamedTuple):
    """One exposed metric: the docs/metrics.md table and the HELP text both come from here."""

    name: str  # as exposed (counters with ``_total``)
    type: str  # gauge / counter / histogram / info
    help: str
    kafka: str  # the Kafka JMX name it corresponds to, or ""


_LC = "kafka.log:type=LogCleaner,name="
_LCM = "kafka.log:type=LogCleanerManager,name="

METRICS_DOC: tuple[MetricDoc, ...] = (
    MetricDoc(
        "cleanerd_max_compaction_delay_seconds",
        "gauge",
        "Max over workers of the largest compaction delay past max.compaction.lag.ms seen"
        " by their last grab (KIP-354).",
        _LC + "max-compaction-delay-secs",
    ),
    MetricDoc(
        "cleanerd_num_logs_compacted_by_max_compaction_lag",
        "gauge",
        "Logs that needed compaction now because of max.compaction.lag.ms at the last grab"
        " (KIP-354; Kafka only logs this count).",
        "",
    ),
    MetricDoc(
        "cleanerd_compaction_delay_seconds",
        "histogram",
        "Per cleaning, by topic: seconds from the compaction deadline of the records it cleaned"
        " (their earliest write time + max.compaction.lag.ms) to its swap; negative: ahead of it"
        " (topics with a max.compaction.lag.ms).",
        "",
    ),
    MetricDoc(
        "cleanerd_logs_compacted_by_max_compaction_lag_total",
        "counter",
        "Cleanings of logs past max.compaction.lag.ms when taken (KIP-354's needCompactionNow),"
        " by topic.",
        "",
    ),
    MetricDoc(
        "cleanerd_compaction_deadline_missed_total",
        "counter",
        "Compaction deadlines missed, each once, by topic and reason: late (a cleaning landed"
        " after it), uncleanable, paused, failing (it passed while the partition could not be"
        " cleaned).",
        "",
    ),
    MetricDoc(
        "cleanerd_max_buffer_utilization_ratio",
        "gauge",
        "Max over workers of the last pass's offset map fill (entries / slots).",
        _LC + "max-buffer-utilization-percent",
    ),
    MetricDoc(
        "cleanerd_cleaner_recopy_ratio",
        "gauge",
        "Bytes written / bytes read, summed over the workers' last passes.",
        _LC + "cleaner-recopy-percent",
    ),
    MetricDoc(
        "cleanerd_max_clean_time_seconds",
        "gauge",
        "Max over workers of the last pass's duration.",
        _LC + "max-clean-time-secs",
    ),
    MetricDoc(
        "cleanerd_max_dirty_ratio",
        "gauge",
        "Highest dirty ratio among the candidates of the last grab.",
        _LCM + "max-dirty-percent",
    ),
    MetricDoc(
        "cleanerd_time_since_last_run_seconds",
        "gauge",
        "Time since the manager last looked for a log to clean.",
        _LCM + "time-since-last-run-ms",
    ),
    MetricDoc("cleanerd_workers", "gauge", "Worker coroutines (alive or dead).", ""),
    MetricDoc(
        "cleanerd_dead_workers",
        "gauge",
        "Workers that stopped without a shutdown request.",
        _LC + "DeadThreadCount",
    ),
    MetricDoc(
        "cleanerd_uncleanable_partitions",
        "gauge",
        "Partitions marked uncleanable after repeated failures, by log_dir.",
        _LCM + "uncleanable-partitions-count,logDirectory=<dir>",
    ),
    MetricDoc(
        "cleanerd_uncleanable_bytes",
        "gauge",
        "Cleanable bytes of the uncleanable partitions, by log_dir.",
        _LCM + "uncleanable-bytes,logDirectory=<dir>",
    ),
    MetricDoc(
        "cleanerd_partitions",
        "gauge",
        "Partitions by state (idle, in_progress, aborted, paused, uncleanable).",
        "",
    ),
    MetricDoc(
        "cleanerd_overdue_partitions",
        "gauge",
        "Compacted partitions whose dirty records are older than max.compaction.lag.ms now.",
        "",
    ),
    MetricDoc(
        "cleanerd_overdue_blocked_partitions",
        "gauge",
        "Compacted partitions past their compaction deadline that cannot be cleaned now, by"
        " reason (uncleanable, paused, failing: backing off after a failure).",
        "",
    ),
    MetricDoc(
        "cleanerd_cleanable_partitions",
        "gauge",
        "Compacted partitions cleanable now (past max.compaction.lag.ms or dirtier than"
        " min.cleanable.dirty.ratio), neither paused nor uncleanable.",
        "",
    ),
    MetricDoc(
        "cleanerd_partition_dirty_ratio",
        "gauge",
        "Dirty ratio of each compacted partition (labels topic, partition; off with"
        " cleanerd.metrics.per.partition=false).",
        "",
    ),
    MetricDoc(
        "cleanerd_partition_compaction_delay_seconds",
        "gauge",
        "How far each compacted partition is past max.compaction.lag.ms (labels topic,"
        " partition; off with cleanerd.metrics.per.partition=false).",
        "",
    ),
    MetricDoc(
        "cleanerd_partition_time_to_compaction_deadline_seconds",
        "gauge",
        "Seconds to each compacted partition's next compaction deadline, negative past it"
        " (labels topic, partition; per-partition switch as above; none without a dirty record"
        " or a max.compaction.lag.ms).",
        "",
    ),
    MetricDoc(
        "cleanerd_partition_snapshot_end_offset",
        "gauge",
        "End offset of the newest snapshot the daemon took of each partition (labels topic,"
        " partition; per-partition switch as above).",
        "",
    ),
    MetricDoc(
        "cleanerd_partition_snapshot_age_seconds",
        "gauge",
        "Seconds since the daemon took each partition's newest snapshot (labels topic,"
        " partition; per-partition switch as above).",
        "",
    ),
    MetricDoc(
        "cleanerd_dedupe_budget_bytes",
        "gauge",
        "Dedupe buffer budget shared by the workers (log.cleaner.dedupe.buffer.size).",
        "",
    ),
    MetricDoc(
        "cleanerd_dedupe_budget_in_use_bytes",
        "gauge",
        "Part of the dedupe budget lent to workers now.",
        "",
    ),
    MetricDoc(
        "cleanerd_last_success_timestamp_seconds",
        "gauge",
        "Unix time of the last successful cleaning (0 before the first).",
        "",
    ),
    MetricDoc("cleanerd_cleanings_total", "counter", "Successful cleanings.", ""),
    MetricDoc(
        "cleanerd_failures_total",
        "counter",
        "Failed attempts on a partition: cleanings, and surveys that could not read it (each "
        "logged).",
        "",
    ),
    MetricDoc(
        "cleanerd_spark_cleanings_total",
        "counter",
        "Successful cleanings done by Spark (cleanerd.engine.spark.*); also counted in"
        " cleanerd_cleanings_total.",
        "",
    ),
    MetricDoc(
        "cleanerd_spark_failures_total",
        "counter",
        "Failed Spark cleanings (retried like local ones); also counted in"
        " cleanerd_failures_total.",
        "",
    ),
    MetricDoc(
        "cleanerd_spark_jobs_running",
        "gauge",
        "Workers running a Spark cleaning now (its progress is in /status).",
        "",
    ),
    MetricDoc(
        "cleanerd_bytes_read_total",
        "counter",
        "Bytes read by cleanings (including the recopied clean prefix).",
        "",
    ),
    MetricDoc("cleanerd_bytes_written_total", "counter", "Bytes written by cleanings.", ""),
    MetricDoc("cleanerd_records_removed_total", "counter", "Records dropped by cleanings.", ""),
    MetricDoc(
        "cleanerd_tombstones_removed_total",
        "counter",
        "Tombstones dropped by cleanings; reason=expired: delete.retention.ms had passed since"
        " the first cleaning that kept them (their delete horizon); reason=superseded: a newer"
        " record of their key won.",
        "",
    ),
    MetricDoc(
        "cleanerd_markers_removed_total", "counter", "Transaction markers dropped by cleanings.", ""
    ),
    MetricDoc(
        "cleanerd_txn_index_rebuilds_total",
        "counter",
        ".txnindex files rebuilt because they disagreed with the log's ABORT markers.",
        "",
    ),
    MetricDoc(
        "cleanerd_unkeyed_records_removed_total",
        "counter",
        "Records without a key dropped by cleanings.",
        "",
    ),
    MetricDoc(
        "cleanerd_segments_rolled_total",
        "counter",
        "Active segments rolled before their max.compaction.lag.ms deadline.",
        "",
    ),
    MetricDoc(
        "cleanerd_segments_deleted_total",
        "counter",
        "Segments deleted by retention (cleanup.policy=compact,delete).",
        "",
    ),
    MetricDoc("cleanerd_worker_restarts_total", "counter", "Crashed workers restarted.", ""),
    MetricDoc(
        "cleanerd_cleaning_processes",
        "gauge",
        "Workers' cleaning processes running (cleanerd.cleaner.processes); the process_* metrics"
        " cover the daemon's own process only.",
        "",
    ),
    MetricDoc(
        "cleanerd_cleaning_process_resident_memory_bytes",
        "gauge",
        "Resident memory of the workers' cleaning processes, summed (their offset maps and"
        " chunks are there).",
        "",
    ),
    MetricDoc(
        "cleanerd_cleaning_process_cpu_seconds_total",
        "counter",
        "CPU time (user and system) of the workers' cleaning processes, the ended ones included.",
        "",
    ),
    MetricDoc("cleanerd_snapshots_total", "counter", "KIP-630 snapshots taken.", ""),
    MetricDoc(
        "cleanerd_snapshot_failures_total", "counter", "Snapshot jobs that failed (logged).", ""
    ),
    MetricDoc("cleanerd_snapshot_bytes_total", "counter", "Bytes of snapshot files written.", ""),
    MetricDoc("cleanerd_snapshot_seconds_total", "counter", "Time spent taking snapshots.", ""),
    MetricDoc(
        "cleanerd_segment_maps_open",
        "gauge",
        "Segment maps kept open (each holds a descriptor); bounded by the next one.",
        "",
    ),
    MetricDoc("cleanerd_segment_maps_limit", "gauge", "Most segment maps kept open at once.", ""),
    MetricDoc(
        "cleanerd_throttle_sleep_seconds_total",
        "counter",
        "Time workers slept in the I/O throttler (log.cleaner.io.max.bytes.per.second).",
        "",
    ),
    MetricDoc(
        "cleanerd_clean_duration_seconds", "histogram", "Duration of successful cleanings.", ""
    ),
    MetricDoc(
        "cleanerd_start_time_seconds",
        "gauge",
        "Unix time the daemon started (alerts on long silences wait this long after a start).",
        "",
    ),
    MetricDoc("cleanerd_build_info", "info", "cleanerd version and Python runtime.", ""),
)
