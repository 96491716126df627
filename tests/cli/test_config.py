"""``cleanerd config check|show`` through click, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cleanerd.cli._config import config_group, config_options, load_from_options
from cleanerd.spark import SparkMissingError
from tests.support.tls import self_signed

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "cleanerd.toml"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(config_group, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_check_example_is_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()  # the example's log.dirs, relative to the current dir
    code, out, err = run("check", "--config", str(EXAMPLE))
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "config ok"


def test_check_warns_about_log_dirs_it_cannot_use(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    missing = tmp_path / "missing"
    fine = tmp_path / "fine"
    fine.mkdir()
    code, out, err = run("check", "--set", f"log.dirs={a_file},{missing},{fine}")
    assert code == 0
    assert out.splitlines() == ["config ok"]
    assert err.splitlines() == [
        f"warning: log dir {a_file} is not a directory (log.dirs from command line); "
        "cleanerd run would refuse to start",
        f"warning: log dir {missing} does not exist (log.dirs from command line); "
        "cleanerd run would refuse to start",
    ]


@pytest.mark.parametrize(
    ("listen", "token", "warned"),
    [
        ("0.0.0.0:9404", "", True),
        ("[::]:9404", "", True),
        ("192.0.2.7:9404", "", True),
        ("db.example.com:9404", "", True),
        ("0.0.0.0:9404", "s3cret", False),
        ("127.0.0.1:9404", "", False),
        ("127.0.0.2:0", "", False),
        ("[::1]:9404", "", False),
        ("localhost:9404", "", False),
        ("off", "", False),
    ],
)
def test_check_warns_about_an_open_port_without_a_token(
    tmp_path: Path, listen: str, token: str, warned: bool
) -> None:
    sets = ["--set", f"log.dirs={tmp_path}", "--set", f"cleanerd.http.listen={listen}"]
    code, out, err = run("check", *sets, "--set", f"cleanerd.admin.token={token}")
    assert (code, out.splitlines()) == (0, ["config ok"])
    exposed = [line for line in err.splitlines() if "in clear" not in line]
    if not warned:
        assert exposed == []
        return
    (line,) = exposed
    assert line.startswith(f"warning: cleanerd.http.listen = {listen.rsplit(':', 1)[0]}")
    assert "no cleanerd.admin.token" in line
    assert "/status and admin actions answer loopback clients only" in line


def test_check_bad_file_exits_2_with_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'log.cleaner.threads = -1\nlog.cleaner.thread = 2\n[topics."o*"]\nsegment.ms = 0\n'
    )
    code, out, err = run("check", "--config", str(bad), env={"CLEANERD_LOG_LEVEL": "loud"})
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert f"error: log.cleaner.threads = -1 (file {bad}): must be at least 0" in lines
    assert any(line.startswith("error: log.cleaner.thread = 2 (file") for line in lines)
    assert f'error: topics."o*".segment.ms = 0 (file {bad}): must be at least 1' in lines
    assert any(line.startswith("error: cleanerd.log.level = 'loud' (env") for line in lines)
    assert len(lines) == 4


def test_check_prints_notes(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("broker.id=0\nlog.cleaner.threads=2\n")
    code, out, _ = run("check", "--kafka-properties", str(props))
    assert code == 0
    assert "note: broker.id" in out


def test_set_beats_everything_and_must_be_name_value(tmp_path: Path) -> None:
    code, out, _ = run(
        "show",
        "--config",
        str(EXAMPLE),
        "--set",
        "log.cleaner.threads=3",
        "--format",
        "json",
        env={"CLEANERD_LOG_CLEANER_THREADS": "2"},
    )
    assert code == 0
    doc = json.loads(out)
    row = next(r for r in doc["settings"] if r["name"] == "log.cleaner.threads")
    assert row == {"name": "log.cleaner.threads", "value": "3", "source": "command line"}
    code, _, err = run("check", "--set", "log.cleaner.threads")
    assert code == 2
    assert "NAME=VALUE" in err


def test_show_text_table_with_sources_and_topics(tmp_path: Path) -> None:
    # A long config path (as CI checkouts have) must not fold setting names in piped output.
    deep = tmp_path / ("very-long-directory-name-" * 4) / "etc" / "cleanerd"
    deep.mkdir(parents=True)
    config = deep / "cleanerd.toml"
    config.write_text(
        EXAMPLE.read_text() + '[topics."orders"]\ncompaction.strategy = "timestamp"\n'
    )
    code, out, _ = run("show", "--config", str(config), "--topic", "orders")
    assert code == 0
    assert f"file {config}" in out
    assert "log.cleaner.threads" in out
    assert "default" in out
    assert "file " in out
    assert 'topics."orders".compaction.strategy' in out
    assert "topic orders" in out


def test_show_json_resolves_topics(tmp_path: Path) -> None:
    config = tmp_path / "cleanerd.toml"
    config.write_text(EXAMPLE.read_text() + '[topics."*"]\ncleanup.policy = "compact"\n')
    code, out, _ = run("show", "--config", str(config), "--format", "json", "--topic", "users")
    assert code == 0
    doc = json.loads(out)
    names = [r["name"] for r in doc["settings"]]
    assert names[0] == "log.dirs"
    assert 'topics."*".cleanup.policy' in names
    users = {r["name"]: r for r in doc["topics"]["users"]}
    assert users["cleanup.policy"]["value"] == "compact"
    assert users["cleanup.policy"]["source"].startswith('[topics."*"]')
    assert users["segment.ms"]["source"].startswith("log.roll.ms")


def test_show_topic_with_conflicting_tables_exits_2(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        '[topics."a*"]\nmin.compaction.lag.ms = 50\n[topics."*b"]\nmax.compaction.lag.ms = 5\n'
    )
    code, _, err = run("show", "--config", str(conf), "--topic", "ab")
    assert code == 2
    assert err.startswith("error: topic ab")


def test_config_options_and_load_from_options_for_other_commands(tmp_path: Path) -> None:
    @click.command()
    @config_options
    def fake(
        config_file: Path | None, kafka_properties: Path | None, sets: tuple[str, ...]
    ) -> None:
        click.echo(load_from_options(config_file, kafka_properties, sets).config.threads)

    result = CliRunner().invoke(fake, ["--config", str(EXAMPLE), "--set", "log.cleaner.threads=2"])
    assert (result.exit_code, result.stdout) == (0, "2\n")
    result = CliRunner().invoke(fake, ["--set", "log.cleaner.threads=-2"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: log.cleaner.threads = '-2' (command line)")


def test_missing_config_file_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run("check", "--config", str(tmp_path / "nope.toml"))
    assert code == 2
    assert "does not exist" in err


@pytest.mark.parametrize("command", ["check", "show"])
def test_help(command: str) -> None:
    code, out, _ = run(command, "--help")
    assert code == 0
    assert "--kafka-properties" in out


def test_show_text_keeps_bracketed_sources_and_values(tmp_path: Path) -> None:
    """Rich read ``[topics."orders-*"]`` in the source column as markup and dropped it."""
    conf = tmp_path / "c.toml"
    logs = tmp_path / "[odd]-logs"
    conf.write_text(f'"log.dirs" = "{logs}"\n[topics."orders-*"]\n"min.compaction.lag.ms" = 50\n')
    code, out, _ = run("show", "--config", str(conf), "--topic", "orders-1")
    assert code == 0
    line = next(x for x in out.splitlines() if x.split()[:1] == ["min.compaction.lag.ms"])
    assert line.split()[1:3] == ["50", '[topics."orders-*"]']
    assert f"(file {conf})" in line
    assert str(logs) in out


def test_check_refuses_a_spark_master_without_the_spark_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cleanerd.engine.spark.master`` needs pyspark: found by ``config check`` (and ``run``,
    which calls the same check) at once, exit 2, not at the first big partition."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run("check", "--set", "cleanerd.engine.spark.master=local[2]")
    assert (code, out.splitlines()[0]) == (0, "config ok")  # pyspark is installed here

    def missing() -> None:
        raise SparkMissingError("the Spark engine needs the spark extra: pip install ...")

    monkeypatch.setattr("cleanerd.cli._config.require_pyspark", missing)
    code, out, err = run("check", "--set", "cleanerd.engine.spark.master=local[2]")
    assert code == 2
    assert "config ok" not in out
    assert "cleanerd.engine.spark.master" in err
    assert "command line" in err
    assert "pip install" in err
    assert run("check")[0] == 0  # no master: no Spark needed


def test_check_refuses_more_cleaner_threads_than_the_bound(tmp_path: Path) -> None:
    """``log.cleaner.threads`` sizes the daemon's cleaning thread pool: 64 at most."""
    config = tmp_path / "c.toml"
    config.write_text(f'log.dirs = "{tmp_path}"\n"log.cleaner.threads" = 65\n')
    code, out, err = run("check", "--config", str(config))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: log.cleaner.threads = 65 (file {config}): must be at most 64"
    ]
    config.write_text(f'log.dirs = "{tmp_path}"\n"log.cleaner.threads" = 64\n')
    code, out, err = run("check", "--config", str(config))
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    ("listen", "token", "tls", "warned"),
    [
        ("0.0.0.0:9404", "s3cret", False, True),
        ("db.example.com:9404", "s3cret", False, True),
        ("0.0.0.0:9404", "s3cret", True, False),
        ("127.0.0.1:9404", "s3cret", False, False),
        ("0.0.0.0:9404", "", False, False),
    ],
)
def test_check_warns_about_a_token_sent_in_clear(
    tmp_path: Path, listen: str, token: str, tls: bool, warned: bool
) -> None:
    """A token on a plain HTTP port beyond loopback crosses the network in clear: whoever reads
    it can pause, resume and clean. TLS on the port, or loopback only, is what keeps it."""
    sets = ["--set", f"log.dirs={tmp_path}", "--set", f"cleanerd.http.listen={listen}"]
    sets += ["--set", f"cleanerd.admin.token={token}"]
    if tls:
        cert, key = self_signed(tmp_path)
        sets += ["--set", f"cleanerd.http.tls.cert.file={cert}"]
        sets += ["--set", f"cleanerd.http.tls.key.file={key}"]
    code, out, err = run("check", *sets)
    assert (code, out.splitlines()) == (0, ["config ok"])
    clear = [line for line in err.splitlines() if "in clear" in line]
    if not warned:
        assert clear == []
        return
    (line,) = clear
    assert line.startswith(f"warning: cleanerd.http.listen = {listen.rsplit(':', 1)[0]}")
    assert "cleanerd.http.tls.cert.file" in line
