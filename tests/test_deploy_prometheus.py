"""deploy/prometheus: the gauges its alerts need, promtool on the config and rules, and a live
Prometheus scraping a running ``cleanerd run`` (values read back through its query API).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cleanerd.scheduling.state import CleaningState, PartitionStatus
from cleanerd.service.metrics import DaemonMetrics
from cleanerd.service.snapshot import DaemonSnapshot
from cleanerd.storage.topic_partition import TopicPartition

REPO = Path(__file__).resolve().parents[1]
PROM = REPO / "deploy" / "prometheus"


def _status(partition: int, **kw: Any) -> PartitionStatus:
    tp = TopicPartition("t", partition)
    kw.setdefault("compacted", True)
    return PartitionStatus(tp=tp, log_dir=Path("/d"), directory=Path("/d") / tp.dir_name, **kw)


def _gauges(snapshot: DaemonSnapshot) -> dict[str, float]:
    body, _ = DaemonMetrics(lambda: snapshot).render()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if not s.labels
    }


def test_cleanable_partitions_counts_only_work_that_waits_or_runs() -> None:
    """The stall alert's "dirty partitions wait": paused, uncleanable and delete-only logs and
    logs below their ratio are not waiting work."""
    snapshot = DaemonSnapshot(
        now_ms=0,
        partitions=(
            _status(0, cleanable=True),
            _status(1, cleanable=True, state=CleaningState.IN_PROGRESS),
            _status(2, cleanable=True, state=CleaningState.PAUSED, paused_count=1),
            _status(3, cleanable=True, uncleanable=True),
            _status(4, cleanable=True, compacted=False),
            _status(5, cleanable=False, dirty_ratio=0.1),
        ),
    )
    assert _gauges(snapshot)["cleanerd_cleanable_partitions"] == 2


def test_start_time_is_when_the_metrics_were_set_up() -> None:
    before = time.time()
    started = _gauges(DaemonSnapshot(now_ms=0, partitions=()))["cleanerd_start_time_seconds"]
    assert before <= started <= time.time()
