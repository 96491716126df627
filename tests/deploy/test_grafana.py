"""deploy/grafana/cleanerd.json: importable as is, every query valid PromQL on cleanerd's metrics.

The queries are checked here against promtool's parser and the metric names the daemon
documents; ``test_prometheus`` runs the same queries on a live Prometheus scraping a
running daemon (both read them through ``tests/support/dashboard.py``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.dashboard import (
    DATASOURCE,
    concrete_queries,
    documented_samples,
    load_dashboard,
    metric_names,
    panels,
)
from tests.support.tools import require


def test_metric_names_reads_selectors_only() -> None:
    expr = (
        'histogram_quantile(0.5, sum by (le, instance) (rate(a_bucket{job=~"x"}[1m])))'
        " / on (instance) b offset 5m and c > bool 0"
    )
    assert metric_names(expr) == {"a_bucket", "b", "c"}


def test_the_dashboard_is_importable_as_is() -> None:
    """Grafana imports a dashboard with no __inputs when every panel and target takes its
    data source from a datasource variable."""
    doc = load_dashboard()
    assert doc["uid"]
    assert doc["title"]
    assert doc.get("id") is None
    assert "__inputs" not in doc
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = []
    for panel in panels(doc):
        ids.append(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"]["uid"] == DATASOURCE, var["name"]
    assert len(ids) == len(set(ids))


def test_the_dashboard_shows_what_the_issue_lists() -> None:
    used = set().union(*(metric_names(q) for _, q in concrete_queries()))
    wanted = {
        "cleanerd_max_compaction_delay_seconds",  # compaction delay against the lag
        "cleanerd_partition_compaction_delay_seconds",
        "cleanerd_overdue_partitions",
        "cleanerd_uncleanable_partitions",
        "cleanerd_max_dirty_ratio",  # dirty ratios
        "cleanerd_partition_dirty_ratio",
        "cleanerd_records_removed_total",  # records and bytes cleaned per second
        "cleanerd_bytes_read_total",
        "cleanerd_bytes_written_total",  # with bytes read: bytes reclaimed
        "cleanerd_dedupe_budget_in_use_bytes",  # budget use
        "cleanerd_dedupe_budget_bytes",
        "cleanerd_clean_duration_seconds_bucket",  # clean durations
        "cleanerd_workers",  # worker state
        "cleanerd_dead_workers",
        "cleanerd_compaction_delay_seconds_bucket",  # each removal against its deadline
        "cleanerd_compaction_deadline_missed_total",
        "cleanerd_overdue_blocked_partitions",
        "cleanerd_logs_compacted_by_max_compaction_lag_total",
        "cleanerd_partition_time_to_compaction_deadline_seconds",
    }
    assert wanted <= used, wanted - used


def test_every_query_names_only_metrics_the_daemon_exports() -> None:
    exported = documented_samples()
    for where, query in concrete_queries():
        unknown = metric_names(query) - exported
        assert not unknown, f"{where}: {sorted(unknown)} not exported by cleanerd: {query}"


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """promtool has no "check expression": one throwaway recording rule per query, and
    ``promtool check rules`` parses them all (it names the rule of a query that fails)."""
    queries = concrete_queries()
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (_, query) in enumerate(queries):
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(query)}"]
    rules = tmp_path / "dashboard.rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [require("promtool"), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    """The parse check above can fail: promtool rejects a malformed expression."""
    rules = tmp_path / "bad.rules.yml"
    rules.write_text(
        'groups:\n  - name: bad\n    rules:\n      - record: bad\n        expr: "rate(x[5m]"\n'
    )
    result = subprocess.run(
        [require("promtool"), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
