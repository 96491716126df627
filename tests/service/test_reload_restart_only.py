"""SIGHUP compares restart-only settings with what the daemon runs, not the last file read.

The daemon is built but not started: ``reload`` is what the SIGHUP handler calls, and it needs
neither the HTTP server nor the workers to decide what changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from cleanerd.config import LoadedConfig, load_config
from cleanerd.service import Daemon
from cleanerd.service._reload import compare_reload


def _write(path: Path, logdir: Path, port: int, threads: int = 1) -> None:
    path.write_text(
        f'"log.dirs" = "{logdir}"\n"cleanerd.http.listen" = "127.0.0.1:{port}"\n'
        f'"log.cleaner.threads" = {threads}\n"cleanerd.log.format" = "json"\n'
    )


def _reloaded(logs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    (event,) = [e for e in logs if e["event"] == "config reloaded"]
    return event


def test_a_port_put_back_needs_no_restart(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    config = tmp_path / "c.toml"
    _write(config, logdir, 9501)

    def reload() -> LoadedConfig:
        return load_config(config_file=config, env={})

    daemon = Daemon(reload(), reload)
    _write(config, logdir, 9502, threads=2)
    with capture_logs() as logs:
        daemon.reload()
    event = _reloaded(logs)
    assert event["needs_restart"] == ["cleanerd.http.listen"]
    assert event["changed"] == ["log.cleaner.threads"]
    # the daemon still listens where it started, and says so
    assert daemon.loaded.config.http_port == 9501
    assert daemon.loaded.config.threads == 2  # a run-time setting applies
    assert daemon.loaded.origins["cleanerd.http.listen"] == f"file {config}"

    _write(config, logdir, 9501, threads=2)  # the port put back as it was
    with capture_logs() as logs:
        daemon.reload()
    event = _reloaded(logs)
    assert event["needs_restart"] == []
    assert event["changed"] == []


def test_compare_reload_keeps_every_restart_only_setting(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    _write(config, tmp_path / "a", 9501)
    running = load_config(config_file=config, env={})
    config.write_text(
        f'"log.dirs" = "{tmp_path / "b"}"\n"cleanerd.http.listen" = "off"\n'
        '"cleanerd.log.format" = "console"\n"log.cleaner.backoff.ms" = 5\n'
    )
    new = load_config(config_file=config, env={})
    live, changed, restart = compare_reload(running, new)
    assert restart == ["cleanerd.http.listen", "cleanerd.log.format", "log.dirs"]
    assert changed == ["log.cleaner.backoff.ms"]
    c = live.config
    assert (c.log_dirs, c.http_host, c.http_port, c.log_format) == (
        (tmp_path / "a",),
        "127.0.0.1",
        9501,
        "json",
    )
    assert c.backoff_ms == 5
    # nothing left to restart for: comparing the live config with itself finds no change
    assert compare_reload(live, live)[1:] == ([], [])


def test_spark_master_and_conf_need_a_restart_thresholds_do_not(tmp_path: Path) -> None:
    """The daemon's Spark session is built once: a new master or conf waits for a restart,
    ``min.partition.bytes`` applies at the next grab."""
    config = tmp_path / "c.toml"
    base = f'"log.dirs" = "{tmp_path / "a"}"\n"cleanerd.engine.spark.master" = "local[1]"\n'
    config.write_text(base + '"cleanerd.engine.spark.conf.spark.executor.memory" = "1g"\n')
    running = load_config(config_file=config, env={})
    config.write_text(
        base.replace("local[1]", "local[2]")
        + '"cleanerd.engine.spark.conf.spark.executor.memory" = "2g"\n'
        + '"cleanerd.engine.spark.min.partition.bytes" = 77\n'
    )
    live, changed, restart = compare_reload(running, load_config(config_file=config, env={}))
    assert restart == [
        "cleanerd.engine.spark.conf.spark.executor.memory",
        "cleanerd.engine.spark.master",
    ]
    assert changed == ["cleanerd.engine.spark.min.partition.bytes"]
    c = live.config
    assert (c.spark_master, c.spark_conf) == ("local[1]", {"spark.executor.memory": "1g"})
    assert c.spark_min_partition_bytes == 77
    assert compare_reload(live, live)[1:] == ([], [])
