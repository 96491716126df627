"""Which partitions a command works on, and with which topic settings: what ``cleanerd plan``,
``compact``, ``snapshot`` and ``spark`` share (``target_options``, then ``find_targets``,
``load_selection`` and ``select``).

Topic settings come from the daemon's config, read as ``cleanerd run`` reads it
(``config.load_config``: defaults < ``--config`` TOML < ``--kafka-properties`` < ``CLEANERD_*``
environment < ``--set``): the broker defaults of topic settings (``log.cleanup.policy``, ...),
then each matching ``[topics."glob"]`` table; the command's own options (``--strategy``,
``--min-cleanable-ratio``, ...) beat them all. An invalid config: one line per problem, exit 2.

A LOGDIR means all its partitions (narrowed by ``--topic`` and ``--partition``); with a config
file (``--config`` or ``--kafka-properties``) only topics whose ``cleanup.policy`` contains
``compact``. A PARTITION_DIR named is always included.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from cleanerd.cli._config import config_options, fail_invalid, load_from_options
from cleanerd.config import ConfigError, LoadedConfig
from cleanerd.inspect import looks_like_partition_dir
from cleanerd.storage import LogDir, TopicPartition, parse_partition_dir_name
from cleanerd.topics import TopicSettings

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Target:
    """One partition dir to work on; ``named`` when given on the command line itself."""

    directory: Path
    tp: TopicPartition
    named: bool


def find_targets(paths: tuple[Path, ...], topic: str | None, partition: int | None) -> list[Target]:
    """Partition dirs of the paths (a log dir: all of its partitions), filtered; usage errors
    (exit 2) for a dir that is not a partition dir by name or a filter matching nothing."""
    found: list[Target] = []
    for given in paths:
        path = given.absolute()
        if looks_like_partition_dir(path):
            tp = parse_partition_dir_name(path.name)
            if tp is None:
                raise click.BadParameter(
                    f"{path} holds segments but is not named <topic>-<partition>",
                    param_hint="LOGDIR|PARTITION_DIR",
                )
            found.append(Target(path, tp, named=True))
        else:
            found.extend(Target(path / t.dir_name, t, False) for t in LogDir(path).partitions())
    chosen = [
        t
        for t in dict.fromkeys(found)
        if (topic is None or fnmatch.fnmatchcase(t.tp.topic, topic))
        and (partition is None or t.tp.partition == partition)
    ]
    if found and not chosen and (topic is not None or partition is not None):
        raise click.BadParameter("no partition matches", param_hint="--topic/--partition")
    return chosen


Job = tuple[Target, TopicSettings]


@dataclass(frozen=True)
class Selection:
    """The topic settings to apply: the daemon's layered config (``config.load_config``) and
    whether it may leave partitions out (a config file was given: ``--config`` or
    ``--kafka-properties``; without one every topic has Kafka's default ``cleanup.policy``)."""

    loaded: LoadedConfig
    by_policy: bool


def load_selection(
    config_file: Path | None, kafka_properties: Path | None, sets: tuple[str, ...]
) -> Selection:
    """The config as ``cleanerd run`` reads it (defaults < ``--config`` < ``--kafka-properties``
    < ``CLEANERD_*`` < ``--set``); an invalid one prints one line per problem and exits 2.
    Notes (settings the cleaner does not use, ...) go to stderr."""
    loaded = load_from_options(config_file, kafka_properties, sets)
    for note in loaded.notes:
        click.echo(f"note: {note}", err=True)
    return Selection(loaded, config_file is not None or kafka_properties is not None)


def select(
    targets: list[Target], selection: Selection, overrides: Mapping[str, object | None]
) -> list[Job]:
    """Each target's settings: its topic's in the config (broker defaults, then the matching
    ``[topics."glob"]`` tables), then the command line's ``overrides`` not None. With a config
    file, partitions of a log dir whose cleanup.policy lacks ``compact`` are left out (a note on
    stderr says so); a partition dir named on the command line is always kept."""
    jobs: list[Job] = []
    config = selection.loaded.config
    given = {name: value for name, value in overrides.items() if value is not None}
    for target in targets:
        topic = target.tp.topic
        try:
            settings = config.topic_settings(topic)  # the matching tables may conflict
        except ConfigError as e:
            fail_invalid(e)
        if given:
            try:
                settings = TopicSettings.from_kafka({**config.topic_kafka_settings(topic), **given})
            except ValueError as e:
                raise click.UsageError(f"{target.directory.name}: {e}") from None
        if selection.by_policy and not target.named and not settings.cleaner.compact:
            policy = settings.cleaner.cleanup_policy or "(empty)"
            click.echo(f"skipped {target.directory.name}: cleanup.policy={policy}", err=True)
        else:
            jobs.append((target, settings))
    return jobs


def target_options(func: F) -> F:
    """The arguments and options choosing partitions and their settings, shared by the
    commands that take partitions; the config options are ``cleanerd run``'s
    (``config_options``). An unreadable path is not a usage error (exit 2) but left to the
    command, which fails on it with a line naming it (exit 1)."""
    func = config_options(func)
    for option in [
        click.argument(
            "paths",
            nargs=-1,
            required=True,
            metavar="LOGDIR|PARTITION_DIR...",
            # an unreadable dir is the data's or the system's problem (exit 1), not usage
            type=click.Path(exists=True, file_okay=False, readable=False, path_type=Path),
        ),
        click.option("--topic", help="Only this topic (a glob is accepted)."),
        click.option("--partition", type=click.IntRange(min=0), help="Only this partition."),
        click.option(
            "--now", "now_ms", type=int, help="Clock in ms since the epoch [default: now]."
        ),
    ][::-1]:
        func = option(func)
    return func
