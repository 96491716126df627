"""deploy/grafana/cleanerd.json's queries as plain PromQL (Grafana's variables filled in), the
metric names a query selects, and the sample names the daemon documents (``METRICS_DOC``).
Shared by ``tests/deploy/test_grafana.py`` (promtool's parser) and
``tests/deploy/test_prometheus.py`` (a live Prometheus scraping a running daemon).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import ProcessCollector

from cleanerd.service._metrics_doc import METRICS_DOC

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "cleanerd.json"
DATASOURCE = "${datasource}"

# Grafana's variables as a query would see them: a rate window, the dashboard's range, "all"
GRAFANA_VALUES = {
    "$__rate_interval": "1m",
    "$__interval": "30s",
    "$__range": "1h",
    "$job": ".+",
    "$instance": ".+",
}
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
_MODIFIERS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_TOKENS = re.compile(r"(?P<num>\d[\w.]*)|(?P<id>[A-Za-z_:][\w:]*)")


def load_dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in doc["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return out


def concretize(expr: str) -> str:
    """Replace Grafana's variables with values a plain Prometheus query accepts."""
    for name, value in sorted(GRAFANA_VALUES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name[1:] + "}", value).replace(name, value)
    if "$" in expr:
        raise AssertionError(f"{DASHBOARD}: unknown Grafana variable in {expr!r}")
    return expr


def concrete_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's series selector."""
    doc = load_dashboard()
    out = []
    for panel in panels(doc):
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", concretize(target["expr"])))
    for var in doc["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
        assert found, f"{DASHBOARD}: variable {var['name']}: not label_values(...): {query!r}"
        out.append((f"variable {var['name']!r}", concretize(found[1])))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels and
    durations left out)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    bare = _MODIFIERS.sub(" ", bare)
    names = set()
    for m in _TOKENS.finditer(bare):
        token = m["id"]
        if token is None or token in _KEYWORDS:
            continue
        if bare[m.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        names.add(token)
    return names


def documented_samples() -> set[str]:
    """Sample names the daemon's metrics produce: METRICS_DOC's, and the process collector's
    (``process_open_fds``, ...) that its registry carries too."""
    out = {s.name for m in ProcessCollector(registry=None).collect() for s in m.samples}
    for doc in METRICS_DOC:
        if doc.type == "histogram":
            out |= {f"{doc.name}_bucket", f"{doc.name}_sum", f"{doc.name}_count"}
        else:
            out.add(doc.name)
    return out
