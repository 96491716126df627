"""The end-to-end harness's own pieces that do not need a running daemon."""

from __future__ import annotations

import signal
import socket
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.e2e_support import (
    DaemonProcess,
    free_port,
    parse_log_lines,
    parse_metrics,
    sample_value,
    write_config,
)
from tests.support.polling import poll_until

SAMPLE_METRICS = """\
# HELP cleanerd_max_dirty_ratio Highest dirty ratio of the last grab.
# TYPE cleanerd_max_dirty_ratio gauge
cleanerd_max_dirty_ratio 0.75
# HELP cleanerd_cleanings_total Cleanings finished.
# TYPE cleanerd_cleanings_total counter
cleanerd_cleanings_total 3.0
# HELP cleanerd_partition_dirty_ratio Dirty ratio per partition.
# TYPE cleanerd_partition_dirty_ratio gauge
cleanerd_partition_dirty_ratio{partition="0",topic="live-a"} 0.5
cleanerd_partition_dirty_ratio{partition="1",topic="live-a"} 0.25
# HELP cleanerd_clean_duration_seconds Duration of one cleaning.
# TYPE cleanerd_clean_duration_seconds histogram
cleanerd_clean_duration_seconds_bucket{le="0.1"} 1.0
cleanerd_clean_duration_seconds_bucket{le="+Inf"} 3.0
cleanerd_clean_duration_seconds_count 3.0
cleanerd_clean_duration_seconds_sum 0.9
"""


def test_free_port_can_be_bound() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_write_config_is_flat_toml_with_topic_tables(tmp_path: Path) -> None:
    logs = tmp_path / "data dir"
    path = write_config(
        tmp_path,
        {"log.dirs": [logs, "other"], "cleanerd.admin.token": 'q"u\\ote é'},
        topics={
            "live-*": {"cleanup.policy": "compact", "delete.retention.ms": 0},
            "x.y": {"a.b": 1.5},
        },
        log_cleaner_threads=2,
        log_cleaner_enable=True,
    )
    assert path == tmp_path / "cleanerd.toml"
    doc = tomllib.loads(path.read_text())
    assert doc == {
        "log.dirs": [str(logs), "other"],
        "cleanerd.admin.token": 'q"u\\ote é',
        "log.cleaner.threads": 2,
        "log.cleaner.enable": True,
        "topics": {
            "live-*": {"cleanup.policy": "compact", "delete.retention.ms": 0},
            "x.y": {"a.b": 1.5},
        },
    }


def test_write_config_special_floats_and_bad_values(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"a.b": float("inf"), "c.d": 0.9}, filename="f.toml")
    assert tomllib.loads(path.read_text()) == {"a.b": float("inf"), "c.d": 0.9}
    with pytest.raises(TypeError):
        write_config(tmp_path, {"a.b": {"nested": 1}})


def test_parse_metrics_by_sample_name() -> None:
    samples = parse_metrics(SAMPLE_METRICS)
    assert samples["cleanerd_max_dirty_ratio"] == [({}, 0.75)]
    assert samples["cleanerd_cleanings_total"] == [({}, 3.0)]
    ratio = sample_value(samples, "cleanerd_partition_dirty_ratio", topic="live-a", partition="1")
    assert ratio == 0.25
    assert sample_value(samples, "cleanerd_clean_duration_seconds_bucket", le="+Inf") == 3.0
    assert sample_value(samples, "cleanerd_clean_duration_seconds_count") == 3.0
    with pytest.raises(KeyError):
        sample_value(samples, "cleanerd_partition_dirty_ratio")  # two match
    with pytest.raises(KeyError):
        sample_value(samples, "cleanerd_nope")


def test_parse_log_lines_keeps_json_objects_only() -> None:
    text = '{"event": "started", "level": "info"}\nTraceback (most recent call last):\n{bad\n[1]\n'
    assert parse_log_lines(text) == [{"event": "started", "level": "info"}]


def test_poll_until_returns_the_value_or_fails() -> None:
    calls = iter([0, None, 7])
    assert poll_until(lambda: next(calls), interval=0.001) == 7
    with pytest.raises(AssertionError, match="waiting for nothing"):
        poll_until(lambda: None, timeout=0.05, interval=0.01, what="nothing")


def test_daemon_command_line_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEANERD_FIXTURES", "/somewhere")
    config = tmp_path / "c.toml"
    d = DaemonProcess(
        config, tmp_path, extra_args=["--set", "log.cleaner.threads=2"], env={"X": "1"}
    )
    assert d.args == [
        sys.executable,
        "-m",
        "cleanerd",
        "run",
        "--config",
        str(config),
        "--set",
        f"cleanerd.http.listen=127.0.0.1:{d.port}",
        "--set",
        "log.cleaner.threads=2",
    ]
    assert d.base_url == f"http://127.0.0.1:{d.port}"
    assert "CLEANERD_FIXTURES" not in d.env
    assert d.env["X"] == "1"
    assert d.env["PYTHONUNBUFFERED"] == "1"


def test_process_exiting_early_fails_readiness_with_its_stderr(tmp_path: Path) -> None:
    script = 'import sys; print(\'{"event": "bad config"}\', file=sys.stderr); sys.exit(2)'
    daemon = DaemonProcess(None, tmp_path, command=[sys.executable, "-c", script])
    with pytest.raises(AssertionError, match=r"exited with 2 before it was ready[\s\S]*bad config"):
        daemon.__enter__()
    assert daemon.logs() == [{"event": "bad config"}]


def test_process_is_killed_on_exit(tmp_path: Path) -> None:
    script = "import time; print('up', flush=True); time.sleep(600)"
    with DaemonProcess(None, tmp_path, command=[sys.executable, "-c", script], ready=False) as d:
        poll_until(lambda: d.stdout_text() == "up\n", timeout=30, what="the child to start")
        assert d.returncode is None
    assert d.returncode == -signal.SIGKILL
