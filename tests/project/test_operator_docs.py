"""What the operator documentation lists agrees with what the daemon exposes: docs/metrics.md's
table with ``METRICS_DOC`` (name, type, help, Kafka JMX name), docs/operations.md's alert list
with the Prometheus rules, and the ``/status`` fields in docs/operations.md with the JSON the
daemon serves. Each check is a parse of the document, so an added metric, alert or field that
is not documented fails here."""

from __future__ import annotations

import re
from pathlib import Path

from cleanerd.scheduling import PartitionStatus
from cleanerd.service._metrics_doc import METRICS_DOC, MetricDoc
from cleanerd.service._status import DaemonStatus, WorkerStatus
from cleanerd.storage import TopicPartition
from tests.support.reference import regions

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
METRICS = REPO / "docs" / "metrics.md"
OPERATIONS = REPO / "docs" / "operations.md"
RULES = REPO / "deploy" / "prometheus" / "cleanerd.rules.yml"


def section(text: str, marker: str) -> str:
    """The text between ``<!-- marker ...-->`` and ``<!-- end marker -->`` (the metrics table:
    its generated part)."""
    if marker == "metrics-table":
        return dict(regions(text))["metrics"]
    start, end = f"<!-- {marker}", f"<!-- end {marker} -->"
    assert start in text, f"marker {start} not found"
    assert end in text, f"marker {end} not found"
    return text.split(start, 1)[1].split(end, 1)[0]


def table_rows(block: str) -> list[list[str]]:
    """The body rows of the one Markdown table in ``block``, cells stripped."""
    rows = []
    for line in block.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the separator row
        rows.append(cells)
    return rows[1:]  # without the header


def _code(cell: str) -> str:
    return cell.strip().strip("`")


def render_table(docs: tuple[MetricDoc, ...] = METRICS_DOC) -> str:
    """The README's metrics table as ``METRICS_DOC`` says it, to paste when this test fails."""
    lines = ["| metric | type | meaning | Kafka JMX name |", "|---|---|---|---|"]
    for d in docs:
        kafka = f"`{d.kafka}`" if d.kafka else ""
        lines.append(f"| `{d.name}` | {d.type} | {d.help} | {kafka} |")
    return "\n".join(lines)


def table_problems(readme: str, docs: tuple[MetricDoc, ...] = METRICS_DOC) -> list[str]:
    """Every way the metrics table differs from ``docs``, one line each."""
    rows = table_rows(section(readme, "metrics-table"))
    problems = [f"row with {len(r)} cells: {r}" for r in rows if len(r) != 4]
    table: dict[str, list[str]] = {}
    for row in (r for r in rows if len(r) == 4):
        name = _code(row[0])
        if name in table:
            problems.append(f"{name}: listed twice")
        table[name] = row
    for d in docs:
        if d.name not in table:
            problems.append(f"{d.name}: missing from the table")
            continue
        row = table.pop(d.name)
        if _code(row[3]) != d.kafka:
            problems.append(f"{d.name}: Kafka JMX name {_code(row[3])!r}, should be {d.kafka!r}")
        if row[1] != d.type:
            problems.append(f"{d.name}: type {row[1]!r}, should be {d.type!r}")
        if row[2] != d.help:
            problems.append(f"{d.name}: meaning {row[2]!r}, should be {d.help!r}")
    problems.extend(f"{name}: in the table but not exposed" for name in table)
    return problems


def test_metrics_table_matches_metrics_doc() -> None:
    problems = table_problems(METRICS.read_text())
    assert problems == [], "\n".join(
        [*problems, "", "the table, from METRICS_DOC:", render_table()]
    )


def test_the_table_lists_the_metrics_in_metrics_doc_order() -> None:
    rows = table_rows(section(METRICS.read_text(), "metrics-table"))
    assert [_code(r[0]) for r in rows] == [d.name for d in METRICS_DOC]


def _with_fresh_table() -> str:
    """docs/metrics.md with its table as ``render_table`` makes it."""
    readme = METRICS.read_text()
    return readme.replace(section(readme, "metrics-table"), "\n" + render_table() + "\n", 1)


def test_the_rendered_table_passes_the_check() -> None:
    """``render_table`` (printed when the table is out of date) is what the check accepts."""
    assert table_problems(_with_fresh_table()) == []


def test_the_table_check_catches_a_missing_metric_and_a_wrong_jmx_name() -> None:
    """The check can fail: a row dropped, a JMX name changed, a row left over."""
    readme = _with_fresh_table()
    table = section(readme, "metrics-table")
    dropped = "\n".join(x for x in table.splitlines() if "`cleanerd_dead_workers`" not in x)
    assert table_problems(readme.replace(table, dropped)) == [
        "cleanerd_dead_workers: missing from the table"
    ]
    wrong = readme.replace("name=DeadThreadCount`", "name=dead-thread-count`")
    assert table_problems(wrong) == [
        "cleanerd_dead_workers: Kafka JMX name "
        "'kafka.log:type=LogCleaner,name=dead-thread-count', should be "
        "'kafka.log:type=LogCleaner,name=DeadThreadCount'"
    ]
    fewer = tuple(d for d in METRICS_DOC if d.name != "cleanerd_workers")
    assert table_problems(readme, fewer) == ["cleanerd_workers: in the table but not exposed"]


def test_operations_guide_summarises_every_alert_of_the_rules() -> None:
    rules = re.findall(r"^\s*- alert:\s*(\S+)", RULES.read_text(), re.MULTILINE)
    assert rules, f"no alert found in {RULES}"
    listed = re.findall(
        r"^- \*\*(\w+)\*\*:", section(OPERATIONS.read_text(), "alerts"), re.MULTILINE
    )
    assert listed == rules  # the rules file's order, each once


def _documented_fields(marker: str) -> set[str]:
    rows = table_rows(section(OPERATIONS.read_text(), marker))
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row[0])}


def test_operations_guide_documents_every_status_field() -> None:
    served = DaemonStatus(now_ms=0, partitions=()).to_json()
    assert _documented_fields("status-fields") == set(served)


def _documented_subfields(marker: str, field: str) -> set[str]:
    """The names listed in the meaning cell of ``field``'s row."""
    rows = table_rows(section(OPERATIONS.read_text(), marker))
    (row,) = (r for r in rows if re.findall(r"`([^`]+)`", r[0]) == [field])
    return set(re.findall(r"`(\w+)`", row[1]))


def test_operations_guide_documents_every_total_and_worker_field() -> None:
    served = DaemonStatus(now_ms=0, partitions=(), workers=(WorkerStatus(0),)).to_json()
    # dotted setting names in the cell (`delete.retention.ms`) are not field names
    assert _documented_subfields("status-fields", "totals") == set(served["totals"])
    assert _documented_subfields("status-fields", "workers") == set(served["workers"][0])


def test_operations_guide_documents_every_partition_field() -> None:
    status = PartitionStatus(TopicPartition("orders", 3), Path("/logs"), Path("/logs/orders-3"))
    assert _documented_fields("partition-fields") == set(status.to_json())


DOCUMENTS = (
    README,
    REPO / "CHANGELOG.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "config" / "README.md",
    *sorted((REPO / "deploy").rglob("*.md")),
)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def broken_links(document: Path) -> list[str]:
    """Relative links of ``document`` to a missing file, or to a missing heading."""
    broken = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading in {resolved.name}")
    return broken


def test_operator_documents_link_to_files_and_headings_that_exist() -> None:
    broken = {str(d.relative_to(REPO)): broken_links(d) for d in DOCUMENTS}
    assert broken == {str(d.relative_to(REPO)): [] for d in DOCUMENTS}


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Where it can run\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[a](other.md#where-it-can-run) [b](missing.md) [c](other.md#nowhere) [d](https://x.y/z)"
    )
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#nowhere: no such heading in other.md",
    ]
