"""``cleanerd config check|show``: validate the layered configuration, or print it with sources.

``config_options`` and ``load_from_options`` are shared with ``cleanerd run``, so every command
reads the same sources the same way and reports an invalid config identically: one
``error: <setting> = <value> (<source>): <rule>`` line per problem on stderr, exit code 2.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich import box
from rich.table import Table
from rich.text import Text

from cleanerd.cli._errors import print_error
from cleanerd.cli._options import format_option
from cleanerd.cli._tables import table_console
from cleanerd.config import (
    ConfigError,
    ConfigProblem,
    LoadedConfig,
    config_warnings,
    load_config,
    topic_key,
)
from cleanerd.spark import SparkMissingError, require_pyspark
from cleanerd.topics import BROKER_TOPIC_DEFAULTS

F = TypeVar("F", bound=Callable[..., Any])
EXIT_INVALID = 2


def config_options(func: F) -> F:
    """``--config FILE``, ``--kafka-properties FILE`` and repeatable ``--set NAME=VALUE``."""
    file = click.Path(exists=True, dir_okay=False, path_type=Path)
    for option in (
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="NAME=VALUE",
            help="Set one setting (beats every file and the environment); repeatable.",
        ),
        click.option(
            "--kafka-properties",
            type=file,
            help="A Kafka server.properties file (beats --config; other keys are ignored).",
        ),
        click.option(
            "--config",
            "config_file",
            type=file,
            help='TOML config: settings at the top, per-topic ones in [topics."<glob>"] tables.',
        ),
    ):
        func = option(func)
    return func


def parse_sets(sets: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs (split at the first ``=``, blanks around the name trimmed)."""
    out: dict[str, str] = {}
    for item in sets:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--set")
        out[name.strip()] = value
    return out


def load_from_options(
    config_file: Path | None, kafka_properties: Path | None, sets: Sequence[str]
) -> LoadedConfig:
    """The loaded config; on problems prints each as ``error: ...`` on stderr and exits 2."""
    try:
        return load_config(
            config_file=config_file, kafka_properties=kafka_properties, overrides=parse_sets(sets)
        )
    except ConfigError as e:
        fail_invalid(e)


def check_engine(loaded: LoadedConfig) -> None:
    """With ``cleanerd.engine.spark.master`` set, the spark extra must be installed: found at
    start (exit 2, as any invalid config), not at the first big partition."""
    master = loaded.config.spark_master
    if master is None:
        return
    try:
        require_pyspark()
    except SparkMissingError as e:
        name = "cleanerd.engine.spark.master"
        fail_invalid(ConfigError((ConfigProblem(name, master, loaded.origins[name], str(e)),)))


def fail_invalid(error: ConfigError) -> NoReturn:
    """Report an invalid config (also errors found after loading, such as conflicting topic
    tables): one ``error:`` line per problem on stderr, exit 2."""
    for problem in error.problems:
        print_error(f"{problem.line()}")
    raise SystemExit(EXIT_INVALID)


@click.group("config")
def config_group() -> None:
    """Check or show cleanerd's configuration.

    Sources, later wins: defaults, --config (TOML), --kafka-properties, CLEANERD_* environment
    variables, --set. Exit status: 0 valid (warnings, if any, on stderr); 2 invalid (one error
    line per problem).
    """


@config_group.command("check")
@config_options
def check(config_file: Path | None, kafka_properties: Path | None, sets: tuple[str, ...]) -> None:
    """Validate the configuration: prints ``config ok`` and notes, or every problem (exit 2).

    Also warns (on stderr; the exit status stays 0) about what is valid but will not work or is
    unsafe: log dirs that do not exist or are not directories, an HTTP port reachable from the
    network without cleanerd.admin.token.
    """
    loaded = load_from_options(config_file, kafka_properties, sets)
    check_engine(loaded)
    click.echo("config ok")
    for note in loaded.notes:
        click.echo(f"note: {note}")
    for warning in config_warnings(loaded.config, loaded.origins.get("log.dirs", "default")):
        click.echo(f"warning: {warning}", err=True)


@config_group.command("show")
@config_options
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="Also show the settings this topic resolves to (which table or default gave each).",
)
@format_option("text: a table; json: one object with settings, topics and notes.")
def show(
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    topics: tuple[str, ...],
    fmt: str,
) -> None:
    """Print the effective configuration: every setting, its value and the source that gave it.

    Per-topic tables appear as ``topics."<glob>".<setting>`` rows, in the order they apply.
    """
    loaded = load_from_options(config_file, kafka_properties, sets)
    try:
        resolved = {topic: resolve_topic(loaded, topic) for topic in topics}
    except ConfigError as e:
        fail_invalid(e)
    rows = loaded.show()
    if fmt == "json":
        doc = {
            "settings": [{"name": n, "value": v, "source": s} for n, v, s in rows],
            "topics": {
                topic: [{"name": n, "value": v, "source": s} for n, v, s in found]
                for topic, found in resolved.items()
            },
            "notes": list(loaded.notes),
        }
        click.echo(json.dumps(doc, indent=2))
        return
    tables = [_table("cleanerd config", rows)]
    tables += [_table(f"topic {topic}", found) for topic, found in resolved.items()]
    console = table_console(tables)
    for table in tables:
        console.print(table)
    for note in loaded.notes:
        click.echo(f"note: {note}")


def resolve_topic(loaded: LoadedConfig, topic: str) -> list[tuple[str, str, str]]:
    """(Kafka topic setting, value, where it came from) for ``topic``; ConfigError if invalid."""
    config = loaded.config
    config.topic_settings(topic)  # raises when the matching tables conflict
    where = {
        topic_name: f"{broker} ({loaded.origins.get(broker, 'default')})"
        for broker, (topic_name, _default) in BROKER_TOPIC_DEFAULTS.items()
    }
    for glob, table in config.topics:
        if fnmatch.fnmatchcase(topic, glob):
            for name in table:
                origin = loaded.origins.get(topic_key(glob, name), "default")
                where[name] = f'[topics."{glob}"] ({origin})'
    merged = config.topic_kafka_settings(topic)
    return [(name, _text(value), where.get(name, "default")) for name, value in merged.items()]


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _table(title: str, rows: list[tuple[str, str, str]]) -> Table:
    """Cells are plain ``Text``: rich would read ``[topics."orders-*"]`` (a source) or a
    bracketed path or value as markup and drop it."""
    table = Table(title=Text(title), box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("setting", overflow="fold")
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table
