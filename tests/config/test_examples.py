"""The example configurations in ``config/``: each passes ``cleanerd config check``, the topic
examples resolve as their comments say, and ``config/cleanerd.toml`` stays a complete list of
the settings the code knows, each with its default, when a setting is added."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.cli._config import config_group
from cleanerd.config import FIELDS, LISTEN, load_config
from cleanerd.config._sources import ALIASES, DAEMON_DEFAULTS, TIME_SYNONYMS
from cleanerd.topics._catalog import BROKER_TOPIC_DEFAULTS, TOPIC_SETTINGS
from cleanerd.workload import WorkloadSpec, generate

CONFIG = Path(__file__).resolve().parents[2] / "config"
TOML = CONFIG / "cleanerd.toml"
PROPERTIES = CONFIG / "cleanerd.properties"
TOPIC_EXAMPLES = sorted((CONFIG / "topics").glob("*.toml"))
# `name = value` or `# name = value`, bare or quoted, at the start of a line
START_MS = 1_700_000_000_000  # the generated records' first timestamp
HOUR_MS = 3_600_000
ASSIGNMENT = re.compile(r'^\s*(#\s*)?"?([a-z][a-z0-9_.-]*)"?\s*=\s*(\S.*)$')


def check(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(config_group, ["check", *args])
    return result.exit_code, result.stdout, result.stderr


def show_topic(topic: str, *args: str) -> dict[str, str]:
    result = CliRunner().invoke(config_group, ["show", *args, "--topic", topic, "--format", "json"])
    assert result.exit_code == 0, result.output
    return {row["name"]: row["value"] for row in json.loads(result.stdout)["topics"][topic]}


def daemon_assignments(text: str) -> dict[str, tuple[bool, str]]:
    """Top-level settings written in a TOML example: name -> (commented out, the whole line).

    An uncommented line wins over a commented one; [topics] tables are not looked at.
    """
    found: dict[str, tuple[bool, str]] = {}
    for line in text.split("\n[topics.", maxsplit=1)[0].splitlines():
        match = ASSIGNMENT.match(line)
        if match is None:
            continue
        commented, name = match.group(1) is not None, match.group(2)
        if name not in found or found[name][0]:
            found[name] = (commented, line)
    return found


def missing_or_undefaulted(text: str, names: set[str]) -> list[str]:
    """Names the example does not write, or writes only in a comment that names no default."""
    found = daemon_assignments(text)
    problems = []
    for name in sorted(names):
        if name not in found:
            problems.append(f"{name}: not in the file")
        elif found[name][0] and "default" not in found[name][1]:
            problems.append(f"{name}: commented out without its default")
    return problems


def top_level_names() -> set[str]:
    """Every top-level setting, from the code: the daemon's names map and the topic catalogue."""
    return {*DAEMON_DEFAULTS, *FIELDS, LISTEN, *BROKER_TOPIC_DEFAULTS}


@pytest.mark.parametrize("example", [TOML, *TOPIC_EXAMPLES], ids=lambda p: p.name)
def test_each_toml_example_passes_config_check(example: Path, tmp_path: Path) -> None:
    code, out, err = check("--config", str(example), "--set", f"log.dirs={tmp_path}")
    assert (code, err) == (0, ""), out + err
    assert out.splitlines() == ["config ok"]  # no note: every name in it is read


def test_the_properties_example_passes_and_every_key_in_it_is_read(tmp_path: Path) -> None:
    code, out, err = check("--kafka-properties", str(PROPERTIES), "--set", f"log.dirs={tmp_path}")
    assert (code, err) == (0, ""), out + err
    # unknown keys in a properties file are notes, not errors: a misspelt one shows only here
    assert out.splitlines() == ["config ok"]


def test_a_misspelt_properties_key_would_be_noted(tmp_path: Path) -> None:
    """What the test above relies on: a key cleanerd does not read is reported as a note."""
    typo = tmp_path / "typo.properties"
    typo.write_text(PROPERTIES.read_text().replace("log.cleaner.threads=", "log.cleaner.thread="))
    code, out, _ = check("--kafka-properties", str(typo), "--set", f"log.dirs={tmp_path}")
    assert code == 0
    assert any(line.startswith("note: log.cleaner.thread ") for line in out.splitlines()), out


@pytest.mark.parametrize("example", TOPIC_EXAMPLES, ids=lambda p: p.name)
def test_each_topic_example_passes_beside_the_properties_example(
    example: Path, tmp_path: Path
) -> None:
    code, out, err = check(
        "--kafka-properties",
        str(PROPERTIES),
        "--config",
        str(example),
        "--set",
        f"log.dirs={tmp_path}",
    )
    assert (code, err) == (0, ""), out + err
    assert out.splitlines() == ["config ok"]


@pytest.mark.slow
def test_the_installed_command_checks_the_examples_as_the_readme_says(tmp_path: Path) -> None:
    """The same check through the ``cleanerd`` entry point, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    for example in TOPIC_EXAMPLES:
        args = ["config", "check", "--kafka-properties", str(PROPERTIES), "--config", str(example)]
        result = subprocess.run(
            [sys.executable, "-m", "cleanerd", *args, "--set", f"log.dirs={tmp_path}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, "config ok\n", "")


def test_there_are_the_three_topic_examples() -> None:
    assert [p.name for p in TOPIC_EXAMPLES] == ["cdc.toml", "gdpr.toml", "versioned.toml"]


def _documented_topic(example: Path) -> str:
    """The topic the example's own `config show ... --topic NAME` line names."""
    match = re.search(r"config show\s+--config \S+ --topic (\S+)", example.read_text())
    assert match is not None, f"{example.name}: no `config show ... --topic NAME` line"
    return match.group(1)


def test_the_gdpr_example_bounds_the_compaction_lag() -> None:
    example = CONFIG / "topics" / "gdpr.toml"
    topic = _documented_topic(example)
    settings = show_topic(topic, "--config", str(example))
    assert settings["cleanup.policy"] == "compact"
    lag = int(settings["max.compaction.lag.ms"])
    assert lag <= 7 * 86_400_000  # a deadline, not Kafka's "never" (Long.MAX_VALUE)
    assert int(settings["min.compaction.lag.ms"]) <= lag
    # segments roll within the deadline, so a tombstone does not wait in the active segment
    assert int(settings["segment.ms"]) <= lag
    # another topic keeps Kafka's defaults: not compacted, no deadline
    other = show_topic("unrelated", "--config", str(example))
    assert other["cleanup.policy"] == "delete"
    assert int(other["max.compaction.lag.ms"]) == 2**63 - 1


def test_the_cdc_example_keeps_the_latest_timestamp() -> None:
    example = CONFIG / "topics" / "cdc.toml"
    settings = show_topic(_documented_topic(example), "--config", str(example))
    assert settings["cleanup.policy"] == "compact"
    assert settings["compaction.strategy"] == "timestamp"


def test_the_versioned_example_keeps_the_highest_version_header() -> None:
    example = CONFIG / "topics" / "versioned.toml"
    settings = show_topic(_documented_topic(example), "--config", str(example))
    assert settings["cleanup.policy"] == "compact"
    assert settings["compaction.strategy"] == "header"
    assert settings["compaction.strategy.header"] == "version"  # blank would mean "offset"


@pytest.fixture(scope="module")
def example_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir with a partition of each example's topic and one of a topic none names."""
    logdir = tmp_path_factory.mktemp("logs")
    for topic in [*map(_documented_topic, TOPIC_EXAMPLES), "unrelated"]:
        spec = WorkloadSpec(topic=topic, records=400, keys=40, records_per_batch=20)
        generate(logdir, dataclasses.replace(spec, segment_bytes=8000, start_timestamp=START_MS))
    return logdir


def plan(logdir: Path, example: Path, now_ms: int) -> tuple[dict[str, dict[str, Any]], str]:
    """``cleanerd plan --config example``: the plan of each partition, and stderr."""
    args = ["plan", str(logdir), "--config", str(example), "--now", str(now_ms)]
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = (json.loads(line) for line in result.stdout.splitlines())
    return {row["partition"]: row for row in rows}, result.stderr


@pytest.mark.parametrize(
    ("name", "strategy"),
    [("gdpr.toml", "offset"), ("cdc.toml", "timestamp"), ("versioned.toml", "header")],
)
def test_each_topic_example_plans_its_topic_and_leaves_the_others(
    example_logs: Path, name: str, strategy: str
) -> None:
    """What the daemon would do with the example: its topic compacted with its strategy, a
    topic it does not name left alone (Kafka's default policy, delete)."""
    example = CONFIG / "topics" / name
    partition = f"{_documented_topic(example)}-0"
    plans, err = plan(example_logs, example, START_MS + 2 * 24 * HOUR_MS)
    assert set(plans) == {partition}
    assert plans[partition]["strategy"] == strategy
    assert "skipped unrelated-0: cleanup.policy=delete" in err


def test_the_gdpr_example_makes_a_log_overdue_after_its_lag(example_logs: Path) -> None:
    """A day after the records were written the log must be cleaned first (KIP-354), not
    before: the deadline the example promises is the scheduler's."""
    example = CONFIG / "topics" / "gdpr.toml"
    partition = f"{_documented_topic(example)}-0"
    lag = int(
        show_topic(_documented_topic(example), "--config", str(example))["max.compaction.lag.ms"]
    )
    early, _ = plan(example_logs, example, START_MS + lag // 2)
    assert early[partition]["must_clean_ratio"] == 0.0
    assert early[partition]["compaction_delay_ms"] == 0
    late, _ = plan(example_logs, example, START_MS + lag + HOUR_MS)
    assert late[partition]["must_clean_ratio"] == 1.0  # every cleanable byte is overdue
    assert late[partition]["compaction_delay_ms"] > HOUR_MS // 2


def test_the_names_map_and_the_defaults_cover_the_same_daemon_settings() -> None:
    """So enumerating either finds every daemon setting (the listen address has no field)."""
    assert {*FIELDS, LISTEN} == set(DAEMON_DEFAULTS)


def test_config_show_lists_exactly_the_enumerated_settings() -> None:
    result = CliRunner().invoke(config_group, ["show", "--format", "json"])
    assert result.exit_code == 0, result.output
    shown = {row["name"] for row in json.loads(result.stdout)["settings"]}
    assert shown == top_level_names()


def test_cleanerd_toml_writes_every_setting() -> None:
    assert missing_or_undefaulted(TOML.read_text(), top_level_names()) == []


def test_cleanerd_toml_sets_only_defaults() -> None:
    """Every top-level value in the file is the default: loading it changes nothing but the
    per-topic tables (``log.dirs`` resolves against the same current directory both times)."""
    defaults = load_config(env={}).values()
    loaded = load_config(config_file=TOML, env={}).values()
    differing = {
        name: (loaded[name], defaults[name])
        for name in top_level_names()
        if loaded[name] != defaults[name]
    }
    assert differing == {}


def test_cleanerd_toml_names_every_spelling_and_topic_setting() -> None:
    """The coarse time spellings, ``log.dir`` and each topic setting's own name are mentioned,
    so a reader finds a name from a broker's file or from ``kafka-configs.sh`` in it."""
    text = TOML.read_text()
    names = [*TIME_SYNONYMS, *ALIASES, *(s.name for s in TOPIC_SETTINGS)]
    unnamed = [n for n in names if not re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", text)]
    assert unnamed == []


def test_the_completeness_check_finds_a_missing_or_undefaulted_setting() -> None:
    """The check above can fail: drop a line, or comment one out without naming its default."""
    text = TOML.read_text()
    lines = text.splitlines()
    dropped = "\n".join(x for x in lines if not x.startswith("log.cleaner.backoff.ms"))
    assert missing_or_undefaulted(dropped, top_level_names()) == [
        "log.cleaner.backoff.ms: not in the file"
    ]
    commented = text.replace("cleanerd.log.level = ", "# cleanerd.log.level = ")
    assert missing_or_undefaulted(commented, {"cleanerd.log.level"}) == [
        "cleanerd.log.level: commented out without its default"
    ]
    assert "cleanerd.log.level" in daemon_assignments(text)  # uncommented there
