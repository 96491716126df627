"""``cleanerd run`` refusals, ``cleanerd ctl`` against a live daemon, ``cleanerd demo``, and the
README's metrics table kept in step with what the daemon exports."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cleanerd.config import client_context
from cleanerd.service._metrics_doc import METRICS_DOC
from cleanerd.storage import PAUSES_FILE, LogDir
from tests.support.e2e_support import REPO, DaemonProcess, free_port, write_config
from tests.support.logs import tree_hash
from tests.support.polling import poll_until
from tests.support.tls import issued, self_signed


def _cleanerd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    return subprocess.run(
        [sys.executable, "-m", "cleanerd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=False,
    )


def test_the_metrics_reference_documents_every_metric_with_its_kafka_name() -> None:
    text = (REPO / "docs" / "metrics.md").read_text()
    table = text.split("<!-- generated: metrics")[1].split("<!-- end generated")[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`cleanerd_"):
            rows[cells[0].strip("`")] = cells[3].strip("`")
    assert rows == {m.name: m.kafka for m in METRICS_DOC}
    required = """max_compaction_delay_seconds num_logs_compacted_by_max_compaction_lag
        max_buffer_utilization_ratio cleaner_recopy_ratio max_clean_time_seconds max_dirty_ratio
        time_since_last_run_seconds dead_workers uncleanable_partitions uncleanable_bytes
        cleanings_total clean_duration_seconds bytes_read_total bytes_written_total
        records_removed_total tombstones_removed_total dedupe_budget_bytes
        dedupe_budget_in_use_bytes throttle_sleep_seconds_total last_success_timestamp_seconds
        partition_dirty_ratio partition_compaction_delay_seconds"""
    assert {f"cleanerd_{n}" for n in required.split()} <= set(rows)


def test_run_refuses_a_missing_log_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = _cleanerd("run", "--set", f"log.dirs={missing}", "--set", "cleanerd.http.listen=off")
    assert result.returncode == 1
    assert f"log dir {missing} does not exist (log.dirs from command line)" in result.stderr


def test_run_refuses_an_invalid_config_with_one_line_per_problem(tmp_path: Path) -> None:
    result = _cleanerd(
        "run",
        "--set",
        "log.cleaner.threads=-1",
        "--set",
        "log.cleaner.min.compaction.lag.ms=10",
        "--set",
        "log.cleaner.max.compaction.lag.ms=5",
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, result.stderr
    assert any("log.cleaner.threads = '-1' (command line)" in e for e in errors)
    assert any("min.compaction.lag.ms" in e and "max.compaction.lag.ms" in e for e in errors)


def test_run_refuses_a_log_dir_another_process_holds(tmp_path: Path) -> None:
    with LogDir(tmp_path).locked():
        result = _cleanerd(
            "run", "--set", f"log.dirs={tmp_path}", "--set", "cleanerd.http.listen=off"
        )
    assert result.returncode == 1
    assert str(os.getpid()) in result.stderr
    assert ".lock" in result.stderr


def test_ctl_pauses_resumes_and_requests_a_clean(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    gen = _cleanerd("gen", str(logdir), "--records", "3000")
    assert gen.returncode == 0, gen.stderr
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 200,
            "log.cleaner.min.cleanable.ratio": 1.0,  # nothing is dirty enough by itself
        },
    )
    with DaemonProcess(config, tmp_path) as d:
        url = ("--url", d.base_url)
        paused = _cleanerd("ctl", "pause", "demo", "0", *url)
        assert paused.returncode == 0, paused.stderr
        assert json.loads(paused.stdout) == {"partition": "demo-0", "state": "paused"}
        clean = _cleanerd("ctl", "clean", "demo", "0", *url)
        assert json.loads(clean.stdout)["state"] == "paused"  # a paused log is not cleaned
        resumed = _cleanerd("ctl", "resume", "demo", "0", *url)
        assert json.loads(resumed.stdout)["state"] == "idle"
        # the clean request is still pending: it runs now, below the ratio
        poll_until(
            lambda: d.status()["partitions"][0]["cleanings"] >= 1 or None,
            timeout=30,
            what="the requested clean",
        )
        status = _cleanerd("ctl", "status", *url)
        assert json.loads(status.stdout)["partitions"][0]["cleanings"] >= 1
        unknown = _cleanerd("ctl", "pause", "nosuch", "3", *url)
        assert unknown.returncode == 1
        assert "HTTP 404" in unknown.stderr
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    down = _cleanerd("ctl", "status", "--url", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 1
    assert "is cleanerd running?" in down.stderr


def test_a_ctl_pause_outlives_a_restart(tmp_path: Path) -> None:
    """Paused with ``ctl``, stopped, started again: the partition is still paused, and not one
    byte of it changed while the daemon cleaned its neighbour."""
    logdir = tmp_path / "logs"
    gen = _cleanerd("gen", str(logdir), "--records", "3000", "--partitions", "2")
    assert gen.returncode == 0, gen.stderr
    config = write_config(
        tmp_path,
        {"log.dirs": str(logdir), "log.cleanup.policy": "compact", "log.cleaner.threads": 0},
    )
    with DaemonProcess(config, tmp_path) as d:
        paused = _cleanerd("ctl", "pause", "demo", "0", "--config", str(config))
        assert paused.returncode == 0, paused.stderr
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    assert json.loads((logdir / PAUSES_FILE).read_text())["paused"] == [
        {"topic": "demo", "partition": 0, "pauses": 1}
    ]
    before = tree_hash(logdir / "demo-0")
    config = write_config(
        tmp_path,
        {"log.dirs": str(logdir), "log.cleanup.policy": "compact", "log.cleaner.threads": 1},
    )
    with DaemonProcess(config, tmp_path) as d:
        by_tp = poll_until(
            lambda: (
                (p := {x["tp"]: x for x in d.status()["partitions"]})["demo-1"]["cleanings"] and p
            ),
            timeout=60,
            what="the unpaused partition's cleaning",
        )
        assert (by_tp["demo-0"]["state"], by_tp["demo-0"]["paused_count"]) == ("paused", 1)
        assert by_tp["demo-0"]["cleanings"] == 0
        assert any(x.get("event") == "pauses restored" for x in d.logs())
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    assert tree_hash(logdir / "demo-0") == before


def test_run_refuses_a_damaged_pause_record_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / PAUSES_FILE).write_text("{not json\n")
    result = _cleanerd("run", "--set", f"log.dirs={tmp_path}", "--set", "cleanerd.http.listen=off")
    assert result.returncode == 2, result.stderr
    assert f"error: {tmp_path / PAUSES_FILE}: not JSON" in result.stderr
    assert "fix or remove it" in result.stderr


def test_ctl_talks_https_to_a_daemon_serving_tls(tmp_path: Path) -> None:
    """A daemon with a certificate serves https only; ``ctl --config`` trusts that certificate
    (it names no 127.0.0.1), ``--cacert`` of another CA is refused, ``ctl ready`` says ready."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    cert, key = self_signed(tmp_path, hosts=("cleanerd.example",))
    port = free_port()
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "cleanerd.http.listen": f"127.0.0.1:{port}",
            "cleanerd.http.tls.cert.file": str(cert),
            "cleanerd.http.tls.key.file": str(key),
        },
    )
    command = [sys.executable, "-m", "cleanerd", "run", "--config", str(config)]
    trust = client_context(pinned=cert)
    with DaemonProcess(config, tmp_path, command=command, port=port, tls=trust) as d:
        assert d.base_url == f"https://127.0.0.1:{port}"
        record_file = logdir / ".cleanerd-http.json"
        poll_until(lambda: record_file.exists() or None, timeout=30, what="the address record")
        assert json.loads(record_file.read_text())["url"] == f"https://127.0.0.1:{port}"
        status = _cleanerd("ctl", "status", "--config", str(config))
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["ready"] is True
        ready = _cleanerd("ctl", "ready", "--config", str(config))
        assert ready.returncode == 0, ready.stderr
        assert json.loads(ready.stdout)["ready"] is True
        other_ca, _, _ = issued(tmp_path, "other")
        refused = _cleanerd("ctl", "status", "--config", str(config), "--cacert", str(other_ca))
        assert refused.returncode == 1
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr
        with pytest.raises(http.client.RemoteDisconnected):  # plain HTTP on it: no answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0


def test_ctl_config_talks_to_the_port_the_daemon_listens_on(tmp_path: Path) -> None:
    """The listen address is restart-only: after the file changes it and a SIGHUP, ``ctl
    --config`` still reaches the running daemon (on the address it recorded) and says so."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    bound, other = free_port(), free_port()
    settings = {"log.dirs": str(logdir), "log.cleaner.backoff.ms": 200}
    config = write_config(tmp_path, {**settings, "cleanerd.http.listen": f"127.0.0.1:{bound}"})
    command = [sys.executable, "-m", "cleanerd", "run", "--config", str(config)]
    with DaemonProcess(config, tmp_path, command=command, port=bound) as d:
        # written once the port is bound, which may be a moment after /healthz first answers
        record_file = logdir / ".cleanerd-http.json"
        poll_until(lambda: record_file.exists() or None, timeout=30, what="the address record")
        record = json.loads(record_file.read_text())
        assert record == {"pid": d.pid, "url": f"http://127.0.0.1:{bound}"}
        write_config(tmp_path, {**settings, "cleanerd.http.listen": f"127.0.0.1:{other}"})
        d.signal(signal.SIGHUP)
        poll_until(
            lambda: any(x.get("event") == "config reloaded" for x in d.logs()) or None,
            timeout=30,
            what="the reload",
        )
        status = _cleanerd("ctl", "status", "--config", str(config))
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["ready"] is True
        assert f"listens on http://127.0.0.1:{bound}, not on http://127.0.0.1:{other}" in (
            status.stderr
        )
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    assert not (logdir / ".cleanerd-http.json").exists()  # removed when the daemon stops
    # no daemon: the config's address, and the usual error
    down = _cleanerd("ctl", "status", "--config", str(config))
    assert down.returncode == 1
    assert f"127.0.0.1:{other}" in down.stderr
    assert "note:" not in down.stderr


def test_demo_runs_the_daemon_and_checks_every_partition(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    result = _cleanerd("demo", str(directory), "--duration", "4", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    # by default the demo takes a free port (never the daemon's 9404) and shows the one it took
    shown = re.search(r"metrics: http://127\.0\.0\.1:(\d+)/metrics", result.stdout)
    assert shown is not None, result.stdout
    port = int(shown.group(1))
    assert port not in (0, 9404)
    checked = re.findall(r"^(\S+-\d+): \d+ records, \d+ keys: (.*)$", result.stdout, re.M)
    assert {tp for tp, _ in checked} == {"orders-0", "orders-1", "users-0", "users-1", "sessions-0"}
    assert all(verdict == "survivors match the writer's model" for _, verdict in checked)
    assert f"http://127.0.0.1:{port}/metrics" in result.stdout
    assert (directory / "cleanerd-demo.toml").is_file()
    # stdout is a pipe: the kernels line comes first, then progress lines, not silence
    out = result.stdout.splitlines()
    preparing = out.index(
        "preparing kernels (the first run after an install compiles them for ~30 s) ..."
    )
    ready = next(i for i, x in enumerate(out) if re.match(r"kernels ready in \d+ s \(", x))
    progress = [i for i, x in enumerate(out) if re.match(r"\d+s  writer: \d+ records \(", x)]
    assert preparing < ready < progress[0]
    assert "cleaner: " in out[progress[0]]
    assert " KiB " in result.stdout  # sizes for people in IEC units
    assert " kB " not in result.stdout
    # the JSON log the demo points at holds the daemon's info lines
    lines = [json.loads(x) for x in (directory / "cleanerd-demo.log").read_text().splitlines()]
    assert any(line["event"] == "cleanerd ready" and line["level"] == "info" for line in lines)
    assert f"daemon log (JSON lines, info level): {directory / 'cleanerd-demo.log'}" in out
    # a second run wipes the demo dir it made, but never a dir it did not make
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    refused = _cleanerd("demo", str(other), "--duration", "1")
    assert refused.returncode == 2
    assert "is not a demo dir" in refused.stderr
    assert (other / "keep.txt").exists()


def test_run_says_a_log_dir_that_is_a_file_is_not_a_directory(tmp_path: Path) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a log dir")
    result = _cleanerd("run", "--set", f"log.dirs={a_file}", "--set", "cleanerd.http.listen=off")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: log dir {a_file} is not a directory (log.dirs from command line); "
        "set log.dirs to a directory"
    ]
    assert a_file.read_text() == "not a log dir"


def test_run_warns_when_listening_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    port = free_port("0.0.0.0")
    config = write_config(tmp_path, {"log.dirs": str(logdir)})
    listen = ("--set", f"cleanerd.http.listen=0.0.0.0:{port}")  # after the harness's own --set
    with DaemonProcess(config, tmp_path, port=port, extra_args=listen) as d:
        status, body = d.get("/status")  # from 127.0.0.1: loopback, allowed
        assert status == 200, body
        big = urllib.request.Request(
            f"{d.base_url}/partitions/t/0/pause", data=b"x" * (65 << 10), method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(big, timeout=10)
        assert refused.value.code == 413
        refused.value.close()
        warned = [line for line in d.logs() if line.get("level") == "warning"]
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    assert any(
        f"cleanerd.http.listen = 0.0.0.0:{port}" in line["event"]
        and "no cleanerd.admin.token" in line["event"]
        for line in warned
    ), warned


DEMO = (sys.executable, "-m", "cleanerd", "demo")


def test_a_second_demo_on_a_running_demos_dir_touches_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    first = subprocess.Popen(
        [*DEMO, str(directory), "--duration", "120", "--listen", f"127.0.0.1:{port}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        config = directory / "cleanerd-demo.toml"

        def running() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        poll_until(running, timeout=120, what="the first demo's daemon")
        before = {p.name: (p.stat().st_ino, p.read_bytes()) for p in (config, directory / ".lock")}
        dirs = {p.name: p.stat().st_ino for p in directory.iterdir() if p.is_dir()}
        second = _cleanerd("demo", str(directory), "--duration", "1", "--listen", "127.0.0.1:0")
        assert second.returncode == 1
        (line,) = second.stderr.splitlines()
        assert line.startswith(f"error: log dir {directory} is locked by process {first.pid}")
        assert {
            p.name: (p.stat().st_ino, p.read_bytes()) for p in (config, directory / ".lock")
        } == (before)
        assert {p.name: p.stat().st_ino for p in directory.iterdir() if p.is_dir()} == dirs
        first.send_signal(signal.SIGINT)  # Ctrl-C: the first demo stops and checks its logs
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    assert first.returncode == 0, out + err
    assert "survivors match the writer's model" in out
