"""cleanerd.config: layering of the sources, Kafka's defaults and rules, per-topic tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cleanerd.config import (
    RESTART_SETTINGS,
    CleanerdConfig,
    ConfigError,
    ConfigProblem,
    LoadedConfig,
    changed_settings,
    load_config,
    restart_only,
)
from cleanerd.config._sources import (
    DAEMON_DEFAULTS,
    DAEMON_SETTINGS,
    env_name,
    parse_listen,
    parse_properties,
)
from cleanerd.topics import BROKER_TOPIC_DEFAULTS, Strategy, TopicSettings
from cleanerd.topics._catalog import TOPIC_SETTINGS

MIB = 1 << 20

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "cleanerd.toml"


def load(
    tmp_path: Path,
    toml: str | None = None,
    props: str | None = None,
    env: dict[str, str] | None = None,
    sets: dict[str, str] | None = None,
) -> LoadedConfig:
    """Load with only the given sources (never the real environment)."""
    config_file = kafka_properties = None
    if toml is not None:
        config_file = tmp_path / "cleanerd.toml"
        config_file.write_text(toml)
    if props is not None:
        kafka_properties = tmp_path / "server.properties"
        kafka_properties.write_text(props)
    return load_config(
        config_file=config_file, kafka_properties=kafka_properties, env=env or {}, overrides=sets
    )


def problems_of(tmp_path: Path, **sources: object) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, **sources)  # type: ignore[arg-type]
    assert str(info.value) == "\n".join(p.line() for p in info.value.problems)
    return info.value.problems


# --- defaults and layering ------------------------------------------------------------------------
def test_defaults_are_kafkas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load(tmp_path)
    c = loaded.config
    assert c.log_dirs == (tmp_path / "data",)
    assert (c.cleaner_enable, c.threads, c.dedupe_buffer_size) == (True, 1, 134217728)
    assert (c.load_factor, c.io_buffer_size, c.io_max_bytes_per_second) == (0.9, 524288, None)
    assert (c.backoff_ms, c.retry_attempts, c.retry_backoff_ms) == (15000, 3, 1000)
    assert (c.retry_backoff_max_ms, c.shutdown_timeout_ms) == (60000, 20000)
    assert (c.http_host, c.http_port, c.admin_token) == ("127.0.0.1", 9404, None)
    assert (c.per_partition_metrics, c.log_format, c.log_level) == (True, "auto", "info")
    assert set(loaded.origins.values()) == {"default"}
    settings = c.topic_settings("anything")
    assert settings == TopicSettings.from_kafka({})  # Kafka's topic defaults
    assert settings.cleaner.cleanup_policy == "delete"


def test_each_source_beats_the_previous_one_per_setting(tmp_path: Path) -> None:
    toml = """
    log.cleaner.threads = 2
    log.cleaner.backoff.ms = 1
    cleanerd.retry.attempts = 1
    cleanerd.shutdown.timeout.ms = 1
    """
    props = "log.cleaner.backoff.ms=2\ncleanerd.retry.attempts=2\ncleanerd.shutdown.timeout.ms=2\n"
    env = {"CLEANERD_RETRY_ATTEMPTS": "3", "CLEANERD_SHUTDOWN_TIMEOUT_MS": "3"}
    sets = {"cleanerd.shutdown.timeout.ms": "4"}
    loaded = load(tmp_path, toml, props, env, sets)
    c = loaded.config
    assert (c.threads, c.backoff_ms, c.retry_attempts, c.shutdown_timeout_ms) == (2, 2, 3, 4)
    assert c.load_factor == 0.9
    o = loaded.origins
    assert o["log.cleaner.threads"] == f"file {tmp_path / 'cleanerd.toml'}"
    assert o["log.cleaner.backoff.ms"] == f"kafka-properties {tmp_path / 'server.properties'}"
    assert o["cleanerd.retry.attempts"] == "env CLEANERD_RETRY_ATTEMPTS"
    assert o["cleanerd.shutdown.timeout.ms"] == "command line"
    assert o["log.cleaner.io.buffer.load.factor"] == "default"


def test_layering_of_broker_topic_defaults(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        toml='log.cleanup.policy = "compact"\nlog.cleaner.min.cleanable.ratio = 0.1',
        env={"CLEANERD_LOG_CLEANER_MIN_CLEANABLE_RATIO": "0.3"},
    )
    settings = loaded.config.topic_settings("t")
    assert settings.cleaner.compact
    assert settings.cleaner.min_cleanable_dirty_ratio == 0.3
    assert loaded.origins["log.cleaner.min.cleanable.ratio"].startswith("env ")


def test_quoted_and_bare_dotted_keys(tmp_path: Path) -> None:
    loaded = load(tmp_path, '"log.cleaner.threads" = 3\nlog.cleaner.backoff.ms = 5')
    assert (loaded.config.threads, loaded.config.backoff_ms) == (3, 5)


def test_env_names() -> None:
    assert env_name("log.cleaner.threads") == "CLEANERD_LOG_CLEANER_THREADS"
    assert env_name("cleanerd.http.listen") == "CLEANERD_HTTP_LISTEN"
    assert env_name("cleanerd.retry.backoff.max.ms") == "CLEANERD_RETRY_BACKOFF_MAX_MS"


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLEANERD_LOG_CLEANER_THREADS", "4")
    monkeypatch.setenv("CLEANERD_FIXTURES", "/elsewhere")  # the test suite's own variable
    assert load_config().config.threads == 4


# --- validation -------------------------------------------------------------------------------
BAD = [
    ("log.dirs", " , ", "needs at least one directory"),
    ("log.cleaner.enable", "maybe", "must be true or false"),
    ("log.cleaner.threads", "-1", "must be at least 0"),
    ("log.cleaner.threads", "two", "must be an integer"),
    ("log.cleaner.threads", "65", "must be at most 64"),
    ("log.cleaner.dedupe.buffer.size", "1048576", "1 MiB per cleaner thread"),
    ("log.cleaner.dedupe.buffer.size", "-5", "must be at least 0"),
    ("log.cleaner.io.buffer.load.factor", "0", "must be greater than 0"),
    ("log.cleaner.io.buffer.load.factor", "1.5", "must be at most 1"),
    ("log.cleaner.io.buffer.size", "-1", "must be at least 0"),
    ("log.cleaner.io.max.bytes.per.second", "0", "must be greater than 0"),
    ("log.cleaner.io.max.bytes.per.second", "fast", "must be a number"),
    ("log.cleaner.backoff.ms", "-1", "must be at least 0"),
    ("cleanerd.retry.attempts", "-1", "must be at least 0"),
    ("cleanerd.retry.backoff.ms", "-1", "must be at least 0"),
    ("cleanerd.retry.backoff.max.ms", "10", "must be at least cleanerd.retry.backoff.ms (1000)"),
    ("cleanerd.http.listen", "localhost", "must be host:port"),
    ("cleanerd.http.listen", "localhost:70000", "port between 0 and 65535"),
    ("cleanerd.metrics.per.partition", "sometimes", "must be true or false"),
    ("cleanerd.log.format", "xml", "must be one of 'auto', 'json' or 'console'"),
    ("cleanerd.log.level", "loud", "must be one of"),
    ("cleanerd.shutdown.timeout.ms", "0", "must be greater than 0"),
    ("log.cleanup.policy", "shrink", "'shrink' is not one of 'compact', 'delete'"),
    ("log.cleaner.min.cleanable.ratio", "1.5", "must be between 0 and 1"),
    ("log.cleaner.min.cleanable.ratio", "half", "must be a number"),
    ("log.cleaner.delete.retention.ms", "-1", "must be at least 0"),
    ("log.cleaner.min.compaction.lag.ms", "-1", "must be at least 0"),
    ("log.cleaner.max.compaction.lag.ms", "0", "must be at least 1"),
    ("log.cleaner.max.compaction.lag.ms", "9223372036854775808", "does not fit a Java long"),
    ("log.segment.bytes", "13", "must be at least 14"),
    ("log.segment.bytes", "1g", "must be an integer"),
    ("log.roll.ms", "0", "must be at least 1"),
    ("log.roll.jitter.ms", "-1", "must be at least 0"),
    ("log.index.size.max.bytes", "3", "must be at least 4"),
    ("log.index.interval.bytes", "-1", "must be at least 0"),
    ("message.max.bytes", "-1", "must be at least 0"),
    ("log.retention.ms", "-2", "must be -1 (unlimited) or at least 0"),
    ("log.retention.bytes", "-2", "must be -1 (unlimited) or at least 0"),
    ("log.cleaner.compaction.strategy", "newest", "unknown strategy 'newest'"),
]


@pytest.mark.parametrize(("name", "value", "rule"), BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_every_rule_names_setting_value_source_and_rule(
    tmp_path: Path, name: str, value: str, rule: str
) -> None:
    (problem,) = problems_of(tmp_path, sets={name: value})
    assert (problem.setting, problem.value, problem.source) == (name, value, "command line")
    assert rule in problem.rule
    assert problem.line() == f"{name} = {value!r} (command line): {problem.rule}"


def test_min_lag_above_max_lag(tmp_path: Path) -> None:
    (problem,) = problems_of(
        tmp_path,
        toml="log.cleaner.max.compaction.lag.ms = 1000",
        env={"CLEANERD_LOG_CLEANER_MIN_COMPACTION_LAG_MS": "5000"},
    )
    assert problem.setting == "log.cleaner.min.compaction.lag.ms"
    assert problem.source == "env CLEANERD_LOG_CLEANER_MIN_COMPACTION_LAG_MS"
    assert "must not exceed max.compaction.lag.ms" in problem.rule


def test_dedupe_buffer_is_per_thread(tmp_path: Path) -> None:
    (problem,) = problems_of(
        tmp_path,
        toml="log.cleaner.threads = 4",
        sets={"log.cleaner.dedupe.buffer.size": str(4 << 20)},
    )
    assert "divided by log.cleaner.threads (4)" in problem.rule
    ok = load(tmp_path, sets={"log.cleaner.threads": "0", "log.cleaner.dedupe.buffer.size": "1"})
    assert ok.config.threads == 0  # no threads: no per-thread rule


def test_sources_are_named_in_problems(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        toml="log.cleaner.threads = -1",
        props="log.cleaner.backoff.ms = soon",
        env={"CLEANERD_LOG_LEVEL": "chatty"},
    )
    lines = sorted(p.line() for p in problems)
    assert lines == [
        "cleanerd.log.level = 'chatty' (env CLEANERD_LOG_LEVEL): must be one of "
        "'debug', 'info', 'warning' or 'error'",
        f"log.cleaner.backoff.ms = 'soon' (kafka-properties {tmp_path / 'server.properties'}): "
        "must be an integer",
        f"log.cleaner.threads = -1 (file {tmp_path / 'cleanerd.toml'}): must be at least 0",
    ]


def test_all_problems_reported_together(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        toml='log.cleaner.threads = -1\n[topics."a*"]\nsegment.bytes = 1\n',
        env={"CLEANERD_HTTP_LISTEN": "nowhere", "CLEANERD_LOG_SEGMENT_BYTES": "x"},
        sets={"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"},
    )
    assert {p.setting for p in problems} == {
        "log.cleaner.threads",
        'topics."a*".segment.bytes',
        "cleanerd.http.listen",
        "log.segment.bytes",
        "log.cleaner.min.compaction.lag.ms",
    }


@pytest.mark.parametrize(
    ("sources", "setting", "source"),
    [
        ({"toml": "log.cleaner.thread = 2"}, "log.cleaner.thread", "file"),
        ({"env": {"CLEANERD_LOG_CLEANER_THREAD": "2"}}, "CLEANERD_LOG_CLEANER_THREAD", "env"),
        ({"sets": {"log.cleaner.thread": "2"}}, "log.cleaner.thread", "command line"),
        ({"toml": '[topics."x"]\nsegment.byte = 2'}, 'topics."x".segment.byte', "file"),
    ],
)
def test_unknown_settings_are_errors(
    tmp_path: Path, sources: dict[str, object], setting: str, source: str
) -> None:
    (problem,) = problems_of(tmp_path, **sources)
    assert problem.setting == setting
    assert problem.source.startswith(source)
    assert problem.rule.startswith("unknown")
    assert "did you mean" in problem.rule


def test_unknown_properties_are_notes(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        props="broker.id=1\nlog.cleaner.threads=2\n",
        toml='[topics."*"]\nflush.messages = 100',
    )
    assert loaded.config.threads == 2
    assert any("broker.id" in n and "ignored" in n for n in loaded.notes)
    assert any('topics."*".flush.messages' in n for n in loaded.notes)


def test_unreadable_toml_is_a_problem(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, toml="log.cleaner.threads = = 2")
    assert problem.source == f"file {tmp_path / 'cleanerd.toml'}"


def test_config_is_frozen() -> None:
    config = CleanerdConfig()
    with pytest.raises(ValidationError):
        config.threads = 3


# --- value forms ------------------------------------------------------------------------------
def test_log_dirs_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load(tmp_path, 'log.dirs = ["a", "/abs"]').config.log_dirs == (
        tmp_path / "a",
        Path("/abs"),
    )
    assert load(tmp_path, sets={"log.dirs": "a, b"}).config.log_dirs == (
        tmp_path / "a",
        tmp_path / "b",
    )
    alias = load(tmp_path, props="log.dir=/x\n")
    assert alias.config.log_dirs == (Path("/x"),)
    both = load(tmp_path, props="log.dir=/x\nlog.dirs=/y\n")
    assert both.config.log_dirs == (Path("/y"),)


def test_throttle_and_listen_forms(tmp_path: Path) -> None:
    c = load(tmp_path, sets={"log.cleaner.io.max.bytes.per.second": "1e6"}).config
    assert c.io_max_bytes_per_second == 1e6
    big = load(tmp_path, sets={"log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308"})
    assert big.config.io_max_bytes_per_second is None
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(" OFF ") == (None, 0)
    c = load(tmp_path, sets={"cleanerd.http.listen": "off"}).config
    assert c.http_host is None
    c = load(tmp_path, sets={"cleanerd.http.listen": "0.0.0.0:0"}).config
    assert (c.http_host, c.http_port) == ("0.0.0.0", 0)


def test_admin_token_is_masked_in_show(tmp_path: Path) -> None:
    loaded = load(tmp_path, env={"CLEANERD_ADMIN_TOKEN": "s3cret"})
    assert loaded.config.admin_token == "s3cret"
    row = next(r for r in loaded.show() if r[0] == "cleanerd.admin.token")
    assert row == ("cleanerd.admin.token", "(set)", "env CLEANERD_ADMIN_TOKEN")
    assert all("s3cret" not in value for _, value, _ in loaded.show())


def test_properties_parsing_corner_cases() -> None:
    text = (
        "# comment\n"
        "   ! also a comment\n"
        "\n"
        "a=1\n"
        "  b : 2  \n"
        "c 3\n"
        "d=one,\\\n"
        "     two,\\\n"
        "  three\n"
        "e\\=f=4\n"
        "g=\n"
        "h=ends\\\\\n"
        "i=x=y\n"
        "j=#not a comment\n"
    )
    got = {key: value for key, value, _line in parse_properties(text)}
    assert got == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "one,two,three",
        "e=f": "4",
        "g": "",
        "h": "ends\\",
        "i": "x=y",
        "j": "#not a comment",
    }
    assert [line for _k, _v, line in parse_properties(text)][:4] == [4, 5, 6, 7]
    assert parse_properties("k=v\\") == [("k", "v", 1)]  # continuation at the end of the file


def test_properties_file_values(tmp_path: Path) -> None:
    props = (
        "log.cleaner.enable = false\n"
        "log.cleaner.threads: 2\n"
        "log.cleaner.dedupe.buffer.size \\\n  = 8388608\n"
    )
    c = load(tmp_path, props=props).config
    assert (c.cleaner_enable, c.threads, c.dedupe_buffer_size) == (False, 2, 8388608)


# --- hours and minutes ------------------------------------------------------------------------
def test_hours_become_ms(tmp_path: Path) -> None:
    loaded = load(
        tmp_path, props="log.roll.hours=2\nlog.roll.jitter.hours=1\nlog.retention.hours=3\n"
    )
    settings = loaded.config.topic_settings("t")
    assert settings.log.segment_ms == 2 * 3_600_000
    assert settings.log.segment_jitter_ms == 3_600_000
    assert settings.retention.retention_ms == 3 * 3_600_000
    assert loaded.origins["log.roll.ms"].endswith("as log.roll.hours")


def test_negative_retention_hours_mean_unlimited_as_in_kafka(tmp_path: Path) -> None:
    """``log.retention.hours=-1`` is a common broker setting: Kafka maps any negative derived
    retention to -1 (unlimited) rather than refusing it."""
    for props in ("log.retention.hours=-1\n", "log.retention.minutes=-1\n"):
        loaded = load(tmp_path, props=props)
        assert loaded.config.topic_settings("t").retention.retention_ms == -1


def test_ms_wins_over_minutes_over_hours(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        toml="log.roll.ms = 1000\nlog.retention.hours = 1",
        env={"CLEANERD_LOG_ROLL_HOURS": "5", "CLEANERD_LOG_RETENTION_MINUTES": "2"},
    )
    settings = loaded.config.topic_settings("t")
    assert settings.log.segment_ms == 1000  # the ms setting wins whatever its source
    assert settings.retention.retention_ms == 2 * 60_000
    assert any("log.roll.hours" in n and "ignored" in n for n in loaded.notes)
    assert any("log.retention.hours" in n and "ignored" in n for n in loaded.notes)


def test_bad_hours(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, sets={"log.roll.hours": "two"})
    assert (problem.setting, problem.rule) == ("log.roll.hours", "must be an integer")


# --- per-topic tables -------------------------------------------------------------------------
TOPICS = """
log.cleaner.min.cleanable.ratio = 0.4
[topics."*"]
cleanup.policy = "compact"
min.cleanable.dirty.ratio = 0.3
[topics."orders-*"]
min.cleanable.dirty.ratio = 0.2
segment.ms = 1000
[topics."orders-eu"]
min.cleanable.dirty.ratio = 0.1
cleanup.policy = ["compact", "delete"]
"""


def test_later_table_wins(tmp_path: Path) -> None:
    c = load(tmp_path, TOPICS).config
    assert c.topic_settings("orders-eu").cleaner.min_cleanable_dirty_ratio == 0.1
    assert c.topic_settings("orders-eu").cleaner.compact_and_delete
    assert c.topic_settings("orders-eu").log.segment_ms == 1000
    assert c.topic_settings("orders-us").cleaner.min_cleanable_dirty_ratio == 0.2
    assert c.topic_settings("users").cleaner.min_cleanable_dirty_ratio == 0.3
    assert c.topic_kafka_settings("users")["cleanup.policy"] == "compact"


def test_unmatched_topic_gets_the_defaults(tmp_path: Path) -> None:
    c = load(
        tmp_path, 'log.cleaner.min.cleanable.ratio = 0.4\n[topics."orders-*"]\nsegment.ms = 5'
    ).config
    settings = c.topic_settings("users")
    assert settings.cleaner.min_cleanable_dirty_ratio == 0.4
    assert settings.log.segment_ms == 604_800_000
    assert settings == TopicSettings.from_kafka({"min.cleanable.dirty.ratio": 0.4})
    assert c.topic_settings("users") is settings  # cached


def test_table_problem_names_the_glob(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, toml='[topics."orders-*"]\ncompaction.strategy = "latest"')
    assert problem.setting == 'topics."orders-*".compaction.strategy'
    assert problem.value == "latest"
    assert "unknown strategy" in problem.rule


def test_table_conflicting_with_defaults(tmp_path: Path) -> None:
    (problem,) = problems_of(
        tmp_path,
        toml='log.cleaner.min.compaction.lag.ms = 5000\n[topics."t*"]\nmax.compaction.lag.ms = 10',
    )
    assert problem.setting == 'topics."t*".min.compaction.lag.ms'
    assert "must not exceed" in problem.rule


def test_tables_conflicting_for_one_topic(tmp_path: Path) -> None:
    toml = '[topics."a*"]\nmin.compaction.lag.ms = 5000\n[topics."*b"]\nmax.compaction.lag.ms = 10'
    c = load(tmp_path, toml).config
    with pytest.raises(ConfigError) as info:
        c.topic_settings("ab")
    assert '[topics."a*"] + [topics."*b"]' in str(info.value)
    assert c.topic_settings("ax").cleaner.min_compaction_lag_ms == 5000


def test_topic_value_from_the_command_line(tmp_path: Path) -> None:
    loaded = load(tmp_path, TOPICS, sets={'topics."orders-*".segment.ms': "2000"})
    assert loaded.config.topic_settings("orders-us").log.segment_ms == 2000
    assert loaded.origins['topics."orders-*".segment.ms'] == "command line"


def test_strategy_header_in_a_table(tmp_path: Path) -> None:
    toml = '[topics."t"]\ncompaction.strategy = "header"\n"compaction.strategy.header" = "v"'
    strategy = load(tmp_path, toml).config.topic_settings("t").strategy
    assert (strategy.strategy, strategy.header_name) == (Strategy.HEADER, "v")


# --- reload support ---------------------------------------------------------------------------
def test_changed_settings(tmp_path: Path) -> None:
    old = load(tmp_path, TOPICS)
    assert changed_settings(old, load(tmp_path, TOPICS)) == []
    respelled = load(tmp_path, TOPICS, env={"CLEANERD_LOG_CLEANER_THREADS": "1"})
    assert changed_settings(old, respelled) == []  # same value from another source
    new = load(
        tmp_path,
        TOPICS.replace("segment.ms = 1000", "segment.ms = 2000") + '[topics."new"]\nsegment.ms=5\n',
        env={"CLEANERD_LOG_CLEANER_THREADS": "2", "CLEANERD_HTTP_LISTEN": "127.0.0.1:1"},
    )
    assert changed_settings(old, new) == [
        "log.cleaner.threads",
        "cleanerd.http.listen",
        'topics."orders-*".segment.ms',
        'topics."new".segment.ms',
    ]
    assert sorted(RESTART_SETTINGS) == [
        "cleanerd.engine.spark.master",
        "cleanerd.http.listen",
        "cleanerd.http.tls.cert.file",
        "cleanerd.http.tls.key.file",
        "cleanerd.log.format",
        "log.dirs",
    ]


def test_show_lists_every_setting_with_its_source(tmp_path: Path) -> None:
    rows = load(tmp_path, TOPICS, sets={"log.cleaner.threads": "2"}).show()
    by_name = {name: (value, source) for name, value, source in rows}
    assert by_name["log.cleaner.threads"] == ("2", "command line")
    assert by_name["log.cleaner.enable"] == ("true", "default")
    assert by_name['topics."orders-eu".cleanup.policy'][0] == "compact,delete"
    assert by_name["log.cleaner.io.max.bytes.per.second"] == ("unlimited", "default")
    names = [name for name, _, _ in rows]
    assert names.index('topics."*".cleanup.policy') < names.index(
        'topics."orders-eu".cleanup.policy'
    )


def test_example_config_loads() -> None:
    loaded = load_config(config_file=EXAMPLE, env={})
    c = loaded.config
    # the production default: no topic compacted until a table names it (its examples are
    # tried in tests/config/test_shipped_selection.py)
    assert c.topics == ()
    assert not c.topic_settings("users").cleaner.compact
    shown = {name for name, _, _ in loaded.show()}
    # every setting is written in the example (the throttle and the token commented out)
    text = EXAMPLE.read_text()
    for name in (*DAEMON_DEFAULTS, *BROKER_TOPIC_DEFAULTS):
        assert name in shown
        assert name in text


def test_spark_engine_settings_and_conf_passthrough(tmp_path: Path) -> None:
    """``cleanerd.engine.spark.conf.<key>`` passes ``<key>`` on, from a TOML table (values as
    Spark's strings), a properties file or ``--set``; the master's empty default means off."""
    assert load(tmp_path).config.spark_master is None
    toml = (
        '[cleanerd.engine.spark]\nmaster = "local[2]"\nmin.partition.bytes = 5000\n'
        '[cleanerd.engine.spark.conf]\n"spark.executor.memory" = "4g"\n'
        '"spark.sql.shuffle.partitions" = 4\n"spark.ui.enabled" = false\n'
    )
    props = "cleanerd.engine.spark.conf.spark.executor.cores=2\n"
    sets = {"cleanerd.engine.spark.conf.spark.executor.memory": "8g"}
    loaded = load(tmp_path, toml, props=props, sets=sets)
    c = loaded.config
    assert (c.spark_master, c.spark_min_partition_bytes) == ("local[2]", 5000)
    assert c.spark_task_budget_bytes == 128 * MIB
    assert c.spark_conf == {
        "spark.executor.memory": "8g",  # the command line wins
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.executor.cores": "2",
    }
    shown = {name: (value, source) for name, value, source in loaded.show()}
    assert shown["cleanerd.engine.spark.conf.spark.executor.memory"] == ("8g", "command line")
    assert shown["cleanerd.engine.spark.conf.spark.executor.cores"][1].startswith("kafka-prop")
    assert restart_only("cleanerd.engine.spark.conf.spark.executor.memory")
    assert not restart_only("cleanerd.engine.spark.min.partition.bytes")


def test_spark_engine_problems(tmp_path: Path) -> None:
    env = {"CLEANERD_ENGINE_SPARK_CONF_SPARK_EXECUTOR_MEMORY": "4g"}
    with pytest.raises(ConfigError) as e:
        load(tmp_path, env=env, sets={"cleanerd.engine.spark.task.budget.bytes": "1000"})
    lines = [p.line() for p in e.value.problems]
    assert any(
        "CLEANERD_ENGINE_SPARK_CONF_SPARK_EXECUTOR_MEMORY" in x and "--set" in x for x in lines
    )
    assert any("cleanerd.engine.spark.task.budget.bytes" in x and "1048576" in x for x in lines)
    with pytest.raises(ConfigError) as e:
        load(tmp_path, sets={"cleanerd.engine.spark.conf.": "x"})  # no Spark key after the prefix
    assert "unknown setting" in e.value.problems[0].line()


def test_every_setting_says_what_it_does() -> None:
    """The reference tables' "what it does" column comes from these: a setting added without
    one would be a blank cell an operator reads as nothing."""
    for s in (*DAEMON_SETTINGS, *TOPIC_SETTINGS):
        assert s.meaning.strip().endswith("."), s.name
        assert "|" not in s.meaning, s.name  # a table cell
