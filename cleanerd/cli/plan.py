"""``cleanerd plan``: each partition's cleaning plan, read-only; and what both ``plan`` and
``compact`` share: which partitions a command works on, and with which topic settings.

No topic config store yet: a LOGDIR means all its partitions (narrowed by ``--topic`` and
``--partition``); with ``--config FILE`` (TOML, Kafka topic settings per topic glob) only topics
whose ``cleanup.policy`` contains ``compact``. A PARTITION_DIR named is always included.

``plan`` writes nothing: opening a ``PartitionLog`` would finish an interrupted swap and rebuild
bad indexes, so segment metadata comes from a plain walk of the batch headers here.

Exit codes: 0 every partition planned; 1 some partition could not be read; 2 usage error.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich import box
from rich.filesize import decimal
from rich.table import Table

from cleanerd.cli.options import format_option
from cleanerd.cli.tables import table_console
from cleanerd.compaction.log_meta import walk_segment
from cleanerd.compaction.plan import LogMeta, SegmentMeta, plan
from cleanerd.compaction.topic_settings import KNOWN_SETTINGS, TopicSettings
from cleanerd.config_sources import flatten
from cleanerd.format.reader import I64, U8
from cleanerd.inspect.files import segment_logs
from cleanerd.inspect.verify import looks_like_partition_dir
from cleanerd.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
)
from cleanerd.storage.errors import StorageError
from cleanerd.storage.logdir import LogDir, parse_partition_dir_name
from cleanerd.storage.partition import wall_clock_ms
from cleanerd.storage.producer_state import scan_producer_state
from cleanerd.storage.swap import leftover_temp_files
from cleanerd.storage.topic_partition import TopicPartition

F = TypeVar("F", bound=Callable[..., Any])


def _flatten(table: Mapping[str, Any]) -> dict[str, object]:
    """The table's settings with dotted names joined back (``flatten``), scalars only."""
    out = flatten(table)
    for name, value in out.items():
        if not isinstance(value, str | int | float | bool):
            raise ValueError(f"{name}: expected a string or a number, got {value!r}")
    return out


@dataclass(frozen=True)
class TopicConfigFile:
    """``[topics."glob"]`` tables of Kafka topic settings; a topic gets every matching table,
    later tables overriding earlier ones (so put ``"*"`` first)."""

    rules: tuple[tuple[str, dict[str, object]], ...]
    ignored: tuple[str, ...] = ()  # settings the cleaner does not use

    @classmethod
    def load(cls, path: Path) -> TopicConfigFile:
        """Read and validate every table (ValueError naming the file and the table)."""
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ValueError(f"{path}: {e}") from None
        extra = sorted(set(doc) - {"topics"})
        topics = doc.get("topics", {})
        if extra or not isinstance(topics, dict):
            raise ValueError(f'{path}: expected only [topics."<glob>"] tables, found {extra}')
        rules, ignored = [], set[str]()
        for glob, table in topics.items():
            where = f'{path}: [topics."{glob}"]'
            if not isinstance(table, dict):
                raise ValueError(f"{where}: expected a table of Kafka topic settings")
            try:
                settings = _flatten(table)
                TopicSettings.from_kafka(settings)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            ignored.update(f"{glob}: {name}" for name in settings if name not in KNOWN_SETTINGS)
            rules.append((glob, settings))
        return cls(tuple(rules), tuple(sorted(ignored)))

    def lookup(self, topic: str) -> dict[str, object] | None:
        """Merged settings of the tables matching ``topic``; None when none matches."""
        found: dict[str, object] | None = None
        for glob, settings in self.rules:
            if fnmatch.fnmatchcase(topic, glob):
                found = {**(found or {}), **settings}
        return found


# --- which partitions ------------------------------------------------------------------------
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


def select(
    targets: list[Target], config: TopicConfigFile | None, overrides: Mapping[str, object | None]
) -> list[Job]:
    """Each target's settings (file, then the command line's ``overrides`` not None). With a
    config file, partitions of a log dir whose cleanup.policy lacks ``compact`` are left out
    (a note on stderr says so)."""
    jobs: list[Job] = []
    given = {name: value for name, value in overrides.items() if value is not None}
    for target in targets:
        base = config.lookup(target.tp.topic) if config is not None else None
        try:
            settings = TopicSettings.from_kafka({**(base or {}), **given})
        except ValueError as e:
            raise click.UsageError(f"{target.directory.name}: {e}") from None
        if config is not None and not target.named and not settings.cleaner.compact:
            policy = settings.cleaner.cleanup_policy or "(empty)"
            click.echo(f"skipped {target.directory.name}: cleanup.policy={policy}", err=True)
        else:
            jobs.append((target, settings))
    return jobs


def _load_config(_ctx: click.Context, _param: click.Parameter, path: Path | None) -> Any:
    """``--config``: the parsed file (a TopicConfigFile), or a usage error saying what is wrong."""
    if path is None:
        return None
    try:
        loaded = TopicConfigFile.load(path)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    for item in loaded.ignored:
        click.echo(f"Note: {path}: {item} is not a cleaner setting; ignored", err=True)
    return loaded


def target_options(func: F) -> F:
    """The arguments and options choosing partitions and their settings, shared by both commands."""
    for option in [
        click.argument(
            "paths",
            nargs=-1,
            required=True,
            metavar="LOGDIR|PARTITION_DIR...",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
        ),
        click.option("--topic", help="Only this topic (a glob is accepted)."),
        click.option("--partition", type=click.IntRange(min=0), help="Only this partition."),
        click.option(
            "--now", "now_ms", type=int, help="Clock in ms since the epoch [default: now]."
        ),
        click.option(
            "--config",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            callback=_load_config,
            help='TOML file of Kafka topic settings in [topics."<glob>"] tables.',
        ),
    ][::-1]:
        func = option(func)
    return func


# --- reading a partition's metadata without writing -------------------------------------------
def _checkpointed(logdir: Path, name: str, tp: TopicPartition) -> int | None:
    path = logdir / name
    return read_offset_checkpoint(path).get(tp) if path.exists() else None


def _segment(base: int, path: Path, notes: list[str]) -> tuple[SegmentMeta, U8, I64, Path]:
    """One segment's metadata from a header walk (no CRC check, index files not needed). The
    largest timestamp is the newest batch's, which a rolled segment's time index ends with."""
    result = walk_segment(base, path)
    if result.walk.error is not None:
        notes.append(str(result.walk.error))
    return result.walk.meta, result.arr, result.batches, path


def read_log_meta(directory: Path, tp: TopicPartition) -> tuple[LogMeta, list[str]]:
    """``LogMeta.from_log`` without opening the log (which may write), and notes on oddities:
    swap leftovers, a batch that does not decode (the segment is planned up to it)."""
    notes = [f"{p.name}: left by an interrupted swap" for p in leftover_temp_files(directory)]
    read = [_segment(base, path, notes) for base, path in segment_logs(directory)]
    segments = [meta for meta, _, _, _ in read]
    logdir = directory.parent
    start = _checkpointed(logdir, LOG_START_OFFSET_CHECKPOINT, tp)
    if not segments:  # opening it would create an empty active segment at the log start
        segments.append(SegmentMeta(start or 0, 0, 0, None, start or 0))
    leo = segments[-1].next_offset
    if start is None or not segments[0].base_offset <= start <= leo:
        start = segments[0].base_offset
    hw = _checkpointed(logdir, REPLICATION_OFFSET_CHECKPOINT, tp)
    state = scan_producer_state((arr, b, str(path)) for _, arr, b, path in read)
    meta = LogMeta(
        topic_partition=tp,
        segments=tuple(segments),
        log_start_offset=start,
        log_end_offset=leo,
        last_stable_offset=min(state.last_stable_offset(leo if hw is None else min(hw, leo)), leo),
        checkpoint=_checkpointed(logdir, CLEANER_OFFSET_CHECKPOINT, tp),
    )
    return meta, notes


def plan_fields(target: Target, settings: TopicSettings, now_ms: int) -> dict[str, Any]:
    """A partition's plan as JSON-ready fields: ``CleaningPlan.summary`` and the log's offsets."""
    directory = target.directory
    meta, notes = read_log_meta(directory, target.tp)
    p = plan(meta, settings.cleaner, now_ms)
    high = max(p.first_dirty_offset, p.first_uncleanable_offset)
    return {
        **p.summary(),
        "directory": str(directory),
        "strategy": str(settings.strategy.strategy),
        "log_start_offset": meta.log_start_offset,
        "log_end_offset": meta.log_end_offset,
        "last_stable_offset": meta.last_stable_offset,
        "checkpoint": meta.checkpoint,
        "cleanable_range": [p.first_dirty_offset, high],
        "must_clean_bytes": p.must_clean_bytes,
        "min_cleanable_dirty_ratio": p.min_cleanable_dirty_ratio,
        "now_ms": now_ms,
        "notes": notes,
    }


@click.command("plan")
@target_options
@click.option(
    "--min-cleanable-ratio",
    type=click.FloatRange(0.0, 1.0),
    help="min.cleanable.dirty.ratio [default: the topic's, else 0.5].",
)
@click.option("--min-compaction-lag-ms", type=click.IntRange(min=0), help="min.compaction.lag.ms.")
@click.option("--max-compaction-lag-ms", type=click.IntRange(min=1), help="max.compaction.lag.ms.")
@format_option("text: a table; json: one JSON object per partition per line.")
def plan_command(
    paths: tuple[Path, ...],
    topic: str | None,
    partition: int | None,
    now_ms: int | None,
    config: TopicConfigFile | None,
    min_cleanable_ratio: float | None,
    min_compaction_lag_ms: int | None,
    max_compaction_lag_ms: int | None,
    fmt: str,
) -> None:
    """Print each partition's cleaning plan at --now, as the cleaner would make it.

    Dirty ratio, must-clean ratio (KIP-354: overdue bytes past max.compaction.lag.ms), compaction
    delay, the cleanable range [first dirty, first uncleanable), clean and cleanable bytes, and
    whether Kafka would clean it now. Read-only: writes nothing and takes no lock.

    Exit status: 0 done; 1 some partition could not be read; 2 usage error.
    """
    overrides = {
        "min.cleanable.dirty.ratio": min_cleanable_ratio,
        "min.compaction.lag.ms": min_compaction_lag_ms,
        "max.compaction.lag.ms": max_compaction_lag_ms,
    }
    jobs = select(find_targets(paths, topic, partition), config, overrides)
    now = wall_clock_ms() if now_ms is None else now_ms
    rows: list[dict[str, Any]] = []
    failed = False
    for target, settings in jobs:
        try:
            row = plan_fields(target, settings, now)
        except (StorageError, OSError, ValueError) as e:
            click.echo(f"Error: {target.directory.name}: {e}", err=True)
            failed = True
            continue
        rows.append(row)
        if fmt == "json":
            click.echo(json.dumps(row))
    if fmt == "text":
        _print_plans(rows)
    if failed:
        raise SystemExit(1)


def _print_plans(rows: list[dict[str, Any]]) -> None:
    """One row per partition, narrow enough for 80 columns; JSON has every field."""
    table = Table(title="cleanerd plan", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("partition", overflow="fold", min_width=9)
    for name in ("dirty", "must-clean", "delay s", "range", "clean", "cleanable", "now"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        low, high = r["cleanable_range"]
        table.add_row(
            r["partition"],
            f"{r['dirty_ratio']:.3f}",
            f"{r['must_clean_ratio']:.3f}",
            f"{r['compaction_delay_ms'] / 1000:.0f}",
            f"[{low}, {high})",
            decimal(r["clean_bytes"]),
            decimal(r["cleanable_bytes"]),
            "yes" if r["is_cleanable"] else "no",
        )
    console = table_console([table])
    console.print(table)
    for r in rows:
        for note in r["notes"]:
            click.echo(f"note: {r['partition']}: {note}")
