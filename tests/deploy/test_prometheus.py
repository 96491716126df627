"""deploy/prometheus: the gauges its alerts need, promtool on the config and rules, and a live
Prometheus scraping a running ``cleanerd run`` (values read back through its query API).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cleanerd.scheduling import CleaningState, PartitionStatus
from cleanerd.service import DaemonStatus
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.storage import TopicPartition
from tests.support.dashboard import concrete_queries, documented_samples, metric_names
from tests.support.e2e_support import HOST, DaemonProcess, free_port, sample_value, write_config
from tests.support.polling import poll_until
from tests.support.tools import require

REPO = Path(__file__).resolve().parents[2]
PROM = REPO / "deploy" / "prometheus"
RULES = PROM / "cleanerd.rules.yml"
RULE_TESTS = PROM / "cleanerd.rules.test.yml"


def _status(partition: int, **kw: Any) -> PartitionStatus:
    tp = TopicPartition("t", partition)
    kw.setdefault("compacted", True)
    return PartitionStatus(tp=tp, log_dir=Path("/d"), directory=Path("/d") / tp.dir_name, **kw)


def _gauges(status: DaemonStatus) -> dict[str, float]:
    body, _ = DaemonMetrics(lambda: status).render()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if not s.labels
    }


def test_cleanable_partitions_counts_only_work_that_waits_or_runs() -> None:
    """The stall alert's "dirty partitions wait": paused, uncleanable and delete-only logs and
    logs below their ratio are not waiting work."""
    status = DaemonStatus(
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
    assert _gauges(status)["cleanerd_cleanable_partitions"] == 2


def test_start_time_is_when_the_metrics_were_set_up() -> None:
    before = time.time()
    started = _gauges(DaemonStatus(now_ms=0, partitions=()))["cleanerd_start_time_seconds"]
    assert before <= started <= time.time()


# --- promtool ------------------------------------------------------------------------------------
def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("promtool"), *args],
        capture_output=True,
        text=True,
        cwd=PROM,
        timeout=120,
        check=False,
    )


def _alerts() -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)\s*$", RULES.read_text(), re.MULTILINE)


def test_promtool_checks_the_config_and_the_rules() -> None:
    config = _promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS: 1 rule files found" in config.stdout + config.stderr
    rules = _promtool("check", "rules", RULES.name)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in rules.stdout


def test_promtool_unit_tests_pass_and_cover_every_alert_firing_and_not() -> None:
    result = _promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = re.findall(
        r"alertname: (\w+)\s*\n\s*exp_alerts:\s*(\[\])?", RULE_TESTS.read_text(), re.MULTILINE
    )
    firing = {name for name, empty in cases if not empty}
    quiet = {name for name, empty in cases if empty}
    assert set(_alerts()) == firing == quiet


def test_the_unit_tests_would_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The promtool tests bind the rules: a rule file with another threshold fails them."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("> 3600", "> 7200"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = subprocess.run(
        [require("promtool"), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "CleanerdNotCleaning" in result.stdout + result.stderr


def test_every_alert_has_a_summary_and_a_runbook_section() -> None:
    readme = (REPO / "deploy" / "README.md").read_text()
    text = RULES.read_text()
    for name in _alerts():
        block = text.split(f"- alert: {name}", 1)[1].split("- alert:", 1)[0]
        assert re.search(r"^\s+summary: \S", block, re.MULTILINE), name
        assert f'runbook: "deploy/README.md#{name.lower()}"' in block, name
        section = re.search(rf"^### {name}\n(.+?)(?=^#|\Z)", readme, re.MULTILINE | re.DOTALL)
        assert section, f"deploy/README.md has no '### {name}' section"
        assert "**Runbook.**" in section[1], name


def test_the_rules_name_only_metrics_the_daemon_exports() -> None:
    names = set(re.findall(r"\bcleanerd_[a-z_]+\b", RULES.read_text()))
    assert names <= documented_samples(), names - documented_samples()


# --- a live Prometheus scraping a live daemon ----------------------------------------------------
class Prometheus:
    """Debian's prometheus on loopback, its TSDB in a temp dir, stopped on exit."""

    def __init__(self, config: Path, tmp_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = tmp_path / "prometheus.log"
        self.args = [
            require("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={HOST}:{self.port}",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=out, cwd=self.log.parent)
        try:
            poll_until(self._ready, timeout=120, what=f"prometheus ready ({self.log})")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful answer; an error answer raises with Prometheus's text."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            with e:
                body = json.loads(e.read())
        if body.get("status") != "success":
            raise PromQLError(f"{params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query, None while it has no series."""
        result = self.api("query", query=expr)["result"]
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])


class PromQLError(AssertionError):
    pass


def _scrape_config(tmp_path: Path, target: str) -> Path:
    """The shipped prometheus.yml, pointed at the test daemon, scraping every second."""
    text = (PROM / "prometheus.yml").read_text()
    for old, new in (
        ('["127.0.0.1:9404"]', f'["{target}"]'),
        ("scrape_interval: 15s", "scrape_interval: 1s"),
        ("scrape_timeout: 10s", "scrape_timeout: 1s"),
        ("scrape_interval: 30s", "scrape_interval: 1s"),
        ("evaluation_interval: 30s", "evaluation_interval: 1s"),
        (f"- {RULES.name}", f"- {RULES}"),
    ):
        assert text.count(old) == 1, f"{PROM / 'prometheus.yml'}: expected one {old!r}"
        text = text.replace(old, new)
    path = tmp_path / "prometheus.yml"
    path.write_text(text)
    return path


def _gen(logdir: Path, topic: str, partitions: int, *more: str) -> None:
    """Records timestamped in 2023 (gen's default: far past any max.compaction.lag.ms now),
    unless ``more`` says ``--start-timestamp``."""
    cmd = [sys.executable, "-m", "cleanerd", "gen", str(logdir), "--topic", topic]
    cmd += ["--partitions", str(partitions), "--records", "3000", "--segment-bytes", "65536"]
    cmd += more
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, Prometheus]]:
    """``cleanerd run`` on a generated log dir (a topic with max.compaction.lag.ms whose
    records are years old: the KIP-354 gauges get large values; and one of recent records, due
    in a day), scraped by Prometheus."""
    tmp = tmp_path_factory.mktemp("live")
    logdir = tmp / "logs"
    # one topic cleaned: every grab then takes an overdue log, so the last grab's gauges (what
    # the daemon serves once all is clean) are the KIP-354 figures, never a plain log's zeros;
    # "recent" is all in its active segment (nothing cleanable, never taken), due in a day
    _gen(logdir, "overdue", 2)
    now_ms = str(int(time.time() * 1000))
    _gen(logdir, "recent", 1, "--start-timestamp", now_ms, "--segment-bytes", str(1 << 20))
    config = write_config(
        tmp,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 300,
        },
        topics={
            "overdue": {"max.compaction.lag.ms": 60_000},
            "recent": {"max.compaction.lag.ms": 86_400_000},
        },
    )
    with DaemonProcess(config, tmp, name="cleanerd") as daemon:
        target = daemon.base_url.removeprefix("http://")
        with Prometheus(_scrape_config(tmp, target), tmp) as prom:
            yield daemon, prom


def _quiet(daemon: DaemonProcess) -> bool:
    """Every overdue partition cleaned and idle, nothing left to clean: the gauges stay put."""
    status = daemon.status()
    return status["logs_compacted_by_max_lag"] > 0 and all(
        p["state"] == "idle"
        and not p["cleanable"]
        and (p["cleanings"] > 0) == (p["topic"] == "overdue")
        for p in status["partitions"]
    )


def test_prometheus_reads_back_the_kip354_gauges_the_daemon_serves(
    live: tuple[DaemonProcess, Prometheus],
) -> None:
    daemon, prom = live
    poll_until(lambda: _quiet(daemon), timeout=300, interval=0.5, what="every log compacted")
    names = (
        "cleanerd_max_compaction_delay_seconds",
        "cleanerd_num_logs_compacted_by_max_compaction_lag",
    )

    def agreed() -> dict[str, float] | None:
        """A Prometheus sample scraped between two equal daemon readings, or None (retry)."""
        before = time.time()
        served = {n: sample_value(daemon.scrape(), n) for n in names}
        scraped_at = poll_until(
            lambda: (prom.value(f"timestamp({names[0]})") or 0) > before or None,
            timeout=120,
            interval=0.5,
            what="a Prometheus scrape after the daemon's reading",
        )
        assert scraped_at
        through_prometheus = {n: prom.value(f"{n}{{job='cleanerd'}}") for n in names}
        if {n: sample_value(daemon.scrape(), n) for n in names} != served:
            return None  # the gauges moved meanwhile: read again
        assert through_prometheus == served
        return served

    served = poll_until(agreed, timeout=300, interval=0.5, what="stable gauges")
    # non-trivial values: years of delay past the lag, every overdue log counted
    assert served["cleanerd_max_compaction_delay_seconds"] > 365 * 86400
    assert served["cleanerd_num_logs_compacted_by_max_compaction_lag"] >= 1
    # the delay gauge is the last grab's and stays up once every log is compacted: the overdue
    # alert must not hold on it alone
    assert sample_value(daemon.scrape(), "cleanerd_overdue_partitions") == 0
    overdue = next(r for r in _evaluated_rules(prom) if r["name"] == "CleanerdCompactionOverdue")
    assert prom.api("query", query=overdue["query"])["result"] == []


def _evaluated_rules(prom: Prometheus) -> list[dict[str, Any]]:
    """The alerting rules as Prometheus loaded them, once each has been evaluated."""

    def evaluated() -> list[dict[str, Any]] | None:
        groups = prom.api("rules", type="alert")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    found: list[dict[str, Any]] = poll_until(
        evaluated, timeout=120, interval=0.5, what="every rule evaluated"
    )
    return found


def test_the_rules_load_and_evaluate_in_prometheus(live: tuple[DaemonProcess, Prometheus]) -> None:
    _, prom = live
    rules = _evaluated_rules(prom)
    assert sorted(r["name"] for r in rules) == sorted(_alerts())
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        assert rule["annotations"]["summary"], rule["name"]


def test_every_dashboard_query_runs_on_metrics_a_live_scrape_exports(
    live: tuple[DaemonProcess, Prometheus],
) -> None:
    daemon, prom = live
    poll_until(lambda: prom.value("count(cleanerd_workers)"), timeout=120, what="a scrape")
    exported = set(daemon.scrape())
    for where, query in concrete_queries():
        unknown = metric_names(query) - exported
        assert not unknown, f"{where}: {sorted(unknown)} not in a live scrape: {query}"
        prom.api("query", query=query)  # raises on a query Prometheus refuses


# --- a partition past its deadline that cannot be cleaned ----------------------------------------
DEADLINE_LAG_MS = 8000
MISSED = "cleanerd_compaction_deadline_missed_total"
DEADLINE_ALERTS = (
    "CleanerdCompactionOverdue",
    "CleanerdCompactionDeadlineMissed",
    "CleanerdOverdueBlocked",
)


def _firing(prom: Prometheus, query: str) -> list[dict[str, Any]] | None:
    """The series an alert's expression gives now, None while it gives none."""
    result: list[dict[str, Any]] = prom.api("query", query=query)["result"]
    return result or None


@pytest.mark.slow
def test_a_partition_past_its_deadline_that_cannot_be_cleaned_alerts_and_a_reload_keeps_it(
    tmp_path: Path,
) -> None:
    """The issue's case, made short: ``gdpr-0`` is corrupt (uncleanable at its first failure),
    its records reach ``max.compaction.lag.ms`` while the daemon runs, ``gdpr-1`` is cleaned.
    A real Prometheus finds the overdue, missed and blocked alerts' expressions true, the miss is
    counted, and after a SIGHUP the count and the alerts are still there, with no counter reset."""
    logdir = tmp_path / "logs"
    _gen(logdir, "gdpr", 2, "--start-timestamp", str(int(time.time() * 1000)))
    segment = sorted((logdir / "gdpr-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[5000] ^= 0xFF  # inside a record: the batch's CRC no longer matches
    segment.write_bytes(bytes(data))
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 300,
            "cleanerd.retry.attempts": 0,
        },
        topics={"gdpr": {"max.compaction.lag.ms": DEADLINE_LAG_MS}},
    )
    with DaemonProcess(config, tmp_path, name="cleanerd") as daemon:
        target = daemon.base_url.removeprefix("http://")
        with Prometheus(_scrape_config(tmp_path, target), tmp_path) as prom:
            # what main already had: uncleanable, and overdue by Kafka's rule
            poll_until(
                lambda: sample_value(daemon.scrape(), "cleanerd_overdue_partitions") >= 1,
                timeout=60,
                interval=0.2,
                what="gdpr-0 overdue",
            )
            status = daemon.status()
            corrupt = next(p for p in status["partitions"] if p["tp"] == "gdpr-0")
            assert corrupt["state"] == "uncleanable"
            metrics = daemon.scrape()
            assert sample_value(metrics, MISSED, topic="gdpr", reason="uncleanable") == 1
            blocked = sample_value(
                metrics, "cleanerd_overdue_blocked_partitions", reason="uncleanable"
            )
            assert blocked == 1
            time_left = "cleanerd_partition_time_to_compaction_deadline_seconds"
            assert sample_value(metrics, time_left, topic="gdpr", partition="0") < 0
            assert status["deadlines"]["missed"]["gdpr"]["uncleanable"] == 1
            # gdpr-1 was cleaned: its cleanings are in the histogram
            poll_until(
                lambda: sample_value(
                    daemon.scrape(), "cleanerd_compaction_delay_seconds_count", topic="gdpr"
                ),
                timeout=60,
                what="gdpr-1 cleaned",
            )
            # the shipped alerts' expressions, as Prometheus evaluates them on its scrapes
            rules = {r["name"]: r["query"] for r in _evaluated_rules(prom)}
            for name in DEADLINE_ALERTS:
                poll_until(functools.partial(_firing, prom, rules[name]), timeout=60, what=name)

            reloads = len([x for x in daemon.logs() if x.get("event") == "config reloaded"])
            daemon.signal(signal.SIGHUP)
            poll_until(
                lambda: (
                    len([x for x in daemon.logs() if x.get("event") == "config reloaded"]) > reloads
                ),
                timeout=30,
                what="the reload",
            )
            reloaded = time.time()
            after = daemon.scrape()
            assert sample_value(after, MISSED, topic="gdpr", reason="uncleanable") == 1
            selector = f'{MISSED}{{topic="gdpr", reason="uncleanable"}}'
            poll_until(
                lambda: (prom.value(f"timestamp({selector})") or 0) > reloaded + 1,
                timeout=60,
                what="a scrape after the reload",
            )
            assert prom.value(selector) == 1
            assert prom.value(f"resets({selector}[5m])") == 0
            for name in DEADLINE_ALERTS:
                assert _firing(prom, rules[name]), f"{name} after the reload"
