"""The daemon takes KIP-630 snapshots of the topics that enable them, while a writer appends.

``cleanerd run`` on two topics, one with ``snapshot.enable``: snapshots are taken when more than
``snapshot.minimum.records`` offsets lie past the newest one, at most ``snapshot.retention.count``
are kept, ``snapshot.truncate.log`` deletes the segments they replace, the metrics and ``/status``
say so, and the state a reader loads afterwards (snapshot + log) is the writer's model: nothing a
reader can load is lost. The other topic gets no snapshot.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from cleanerd.compaction import open_log
from cleanerd.snapshot import load_state
from cleanerd.storage import TopicPartition, list_snapshots
from cleanerd.topics import StrategyConfig
from cleanerd.workload import LiveWriter
from tests.support.e2e_support import DaemonProcess, Samples, sample_value, write_config
from tests.support.polling import poll_until

SNAP = TopicPartition("snap", 0)
PLAIN = TopicPartition("plain", 0)


def test_snapshots_retention_and_truncation_while_a_writer_appends(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    # 2000 keys: the compacted log still spans several 20 kB segments, so some lie wholly below
    # the snapshots and truncation has whole segments to delete
    writer = LiveWriter(
        logdir, ("snap", "plain"), keys=2000, rate=20000, segment_bytes=20_000, seed=11
    )
    writer.step(60)
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 300,
            "log.cleaner.min.cleanable.ratio": 0.1,
            "log.cleaner.threads": 2,
        },
        topics={
            "snap": {
                "snapshot.enable": True,
                "snapshot.minimum.records": 400,
                "snapshot.retention.count": 2,
                "snapshot.truncate.log": True,
            }
        },
    )
    with writer, DaemonProcess(config, tmp_path) as d:
        writer.start(duration_s=4.0)
        poll_until(
            lambda: sample_value(d.scrape(), "cleanerd_snapshots_total") >= 3 or None,
            timeout=90,
            what="three snapshots",
        )
        writer.stop()
        assert writer.error is None
        labels = {"topic": "snap", "partition": "0"}

        def agreeing() -> tuple[dict[str, Any], Samples] | None:
            """/status and the metrics read with no snapshot taken in between: the daemon may
            still be snapshotting what the writer appended last."""
            first = {p["tp"]: p for p in d.status()["partitions"]}
            metrics = d.scrape()
            then = {p["tp"]: p for p in d.status()["partitions"]}
            end = first[str(SNAP)]["latest_snapshot_end_offset"]
            if end != then[str(SNAP)]["latest_snapshot_end_offset"]:
                return None
            seen = sample_value(metrics, "cleanerd_partition_snapshot_end_offset", **labels)
            return (first, metrics) if seen == end else None

        status, metrics = poll_until(agreeing, timeout=60, what="/status and metrics agreeing")
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0

    snap = status[str(SNAP)]
    assert snap["latest_snapshot_end_offset"] is not None
    assert status[str(PLAIN)]["latest_snapshot_end_offset"] is None
    assert sample_value(metrics, "cleanerd_snapshot_failures_total") == 0
    assert sample_value(metrics, "cleanerd_snapshot_bytes_total") > 0

    files = list_snapshots(logdir / SNAP.dir_name)
    assert 1 <= len(files) <= 2  # snapshot.retention.count
    assert list_snapshots(logdir / PLAIN.dir_name) == []
    assert not list(logdir.rglob("*.checkpoint.part"))
    with open_log(logdir / SNAP.dir_name) as log:
        # truncated: the snapshots replace the prefix, never past the oldest one kept
        assert 0 < log.log_start_offset <= files[0][0].end_offset
        state = {r.key: r.value for r in load_state(log, StrategyConfig())}
    assert state == writer.expected(SNAP)
