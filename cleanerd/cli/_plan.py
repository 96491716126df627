"""``cleanerd plan``: each partition's cleaning plan, read-only; and what both ``plan`` and
``compact`` share: which partitions a command works on, and with which topic settings.

Topic settings come from the daemon's config, read as ``cleanerd run`` reads it
(``config.load_config``: defaults < ``--config`` TOML < ``--kafka-properties`` < ``CLEANERD_*``
environment < ``--set``): the broker defaults of topic settings (``log.cleanup.policy``, ...),
then each matching ``[topics."glob"]`` table; the command's own options (``--strategy``,
``--min-cleanable-ratio``, ...) beat them all. An invalid config: one line per problem, exit 2.

A LOGDIR means all its partitions (narrowed by ``--topic`` and ``--partition``); with a config
file (``--config`` or ``--kafka-properties``) only topics whose ``cleanup.policy`` contains
``compact``. A PARTITION_DIR named is always included.

``plan`` writes nothing: opening a ``PartitionLog`` would finish an interrupted swap and rebuild
bad indexes, so segment metadata comes from a plain walk of the batch headers here. With
``--roll-active`` it also plans the log as ``compact --roll-active`` would see it, its active
segment rolled (``bounds.as_rolled``), and shows the range that adds; the dir is not touched.

Exit codes: 0 every partition planned; 1 some partition could not be read; 2 usage error.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich import box
from rich.filesize import pick_unit_and_suffix
from rich.table import Table

from cleanerd.cli._config import config_options, fail_invalid, load_from_options
from cleanerd.cli._options import format_option
from cleanerd.cli._tables import table_console
from cleanerd.compaction import LogMeta, SegmentMeta, as_rolled, plan, walk_segment
from cleanerd.config import ConfigError, LoadedConfig
from cleanerd.format import I64, U8
from cleanerd.inspect import looks_like_partition_dir, segment_logs
from cleanerd.scheduling import partition_log_meta
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogDir,
    StorageError,
    TopicPartition,
    leftover_temp_files,
    parse_partition_dir_name,
    read_offset_checkpoint,
    scan_producer_state,
    wall_clock_ms,
)
from cleanerd.topics import TopicSettings

F = TypeVar("F", bound=Callable[..., Any])


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
    logdir = directory.parent
    log_start = _checkpointed(logdir, LOG_START_OFFSET_CHECKPOINT, tp)
    high_watermark = _checkpointed(logdir, REPLICATION_OFFSET_CHECKPOINT, tp)
    state = scan_producer_state((arr, b, str(path)) for _, arr, b, path in read)
    meta = partition_log_meta(
        tp,
        [meta for meta, _, _, _ in read],
        log_start=log_start,
        high_watermark=high_watermark,
        cleaner_checkpoint=_checkpointed(logdir, CLEANER_OFFSET_CHECKPOINT, tp),
        first_unstable=state.first_unstable_offset,
    )
    return meta, notes


def plan_fields(
    target: Target, settings: TopicSettings, now_ms: int, roll_active: bool = False
) -> dict[str, Any]:
    """A partition's plan as JSON-ready fields: ``CleaningPlan.summary`` and the log's offsets;
    with ``roll_active`` also ``roll_active``: the plan were the active segment rolled."""
    directory = target.directory
    meta, notes = read_log_meta(directory, target.tp)
    p = plan(meta, settings.cleaner, now_ms)
    high = max(p.first_dirty_offset, p.first_uncleanable_offset)
    rolled: dict[str, Any] | None = None
    if roll_active:
        r = plan(as_rolled(meta), settings.cleaner, now_ms)
        rolled_high = max(r.first_dirty_offset, r.first_uncleanable_offset)
        rolled = {
            **{key: r.summary()[key] for key in _ROLLED_FIELDS},
            "cleanable_range": [r.first_dirty_offset, rolled_high],
            "added_range": [high, rolled_high],
        }
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
        **({} if rolled is None else {"roll_active": rolled}),
    }


_ROLLED_FIELDS = (
    "first_uncleanable_offset",
    "clean_bytes",
    "cleanable_bytes",
    "dirty_ratio",
    "must_clean_ratio",
    "is_cleanable",
)


@click.command("plan")
@target_options
@click.option(
    "--min-cleanable-ratio",
    type=click.FloatRange(0.0, 1.0),
    help="min.cleanable.dirty.ratio [default: the topic's, else 0.5].",
)
@click.option("--min-compaction-lag-ms", type=click.IntRange(min=0), help="min.compaction.lag.ms.")
@click.option("--max-compaction-lag-ms", type=click.IntRange(min=1), help="max.compaction.lag.ms.")
@click.option(
    "--roll-active",
    is_flag=True,
    help="Also plan as if the active segment were rolled (compact --roll-active); read-only.",
)
@format_option("text: a table; json: one JSON object per partition per line.")
def plan_command(
    paths: tuple[Path, ...],
    topic: str | None,
    partition: int | None,
    now_ms: int | None,
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    min_cleanable_ratio: float | None,
    min_compaction_lag_ms: int | None,
    max_compaction_lag_ms: int | None,
    roll_active: bool,
    fmt: str,
) -> None:
    """Print each partition's cleaning plan at --now, as the cleaner would make it.

    Dirty ratio, must-clean ratio (KIP-354: overdue bytes past max.compaction.lag.ms), compaction
    delay, the cleanable range [first dirty, first uncleanable), clean and cleanable bytes,
    whether it is overdue now (column now: need_compaction_now) and whether Kafka would clean it
    (column pick: is_cleanable). Sizes: bytes in JSON, KiB/MiB/GiB in the table. Read-only:
    writes nothing and takes no lock. With --roll-active, also what rolling the active segment
    would add to the cleanable range (the LSO and min.compaction.lag.ms still apply); the dir
    is not touched.

    Topic settings: the config as `cleanerd run` reads it (broker defaults, [topics."<glob>"]
    tables, CLEANERD_* environment, --set), then this command's options. With a config file,
    only topics whose cleanup.policy contains compact (a PARTITION_DIR named: always).

    Exit status: 0 done; 1 some partition could not be read; 2 usage error.
    """
    overrides = {
        "min.cleanable.dirty.ratio": min_cleanable_ratio,
        "min.compaction.lag.ms": min_compaction_lag_ms,
        "max.compaction.lag.ms": max_compaction_lag_ms,
    }
    selection = load_selection(config_file, kafka_properties, sets)
    jobs = select(find_targets(paths, topic, partition), selection, overrides)
    now = wall_clock_ms() if now_ms is None else now_ms
    rows: list[dict[str, Any]] = []
    failed = False
    for target, settings in jobs:
        try:
            row = plan_fields(target, settings, now, roll_active)
        except (StorageError, OSError, ValueError) as e:
            click.echo(f"Error: {target.directory.name}: {e}", err=True)
            failed = True
            continue
        rows.append(row)
        if fmt == "json":
            click.echo(json.dumps(row))
    if fmt == "text" and (rows or not failed):  # no empty table above the errors
        _print_plans(rows, roll_active)
    if failed:
        raise SystemExit(1)


_IEC_UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]


def iec_size(size: int) -> str:
    """Bytes for people, in IEC units (1 KiB = 1024 bytes): what human text uses everywhere,
    while JSON, log fields and metrics carry plain bytes."""
    unit, suffix = pick_unit_and_suffix(size, _IEC_UNITS, 1024)
    return f"{size} bytes" if unit == 1 else f"{size / unit:.1f} {suffix}"


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


def _print_plans(rows: list[dict[str, Any]], roll_active: bool = False) -> None:
    """One row per partition, narrow enough for 80 columns; JSON has every field. ``now`` is the
    JSON's ``need_compaction_now`` (overdue past max.compaction.lag.ms) and ``pick`` its
    ``is_cleanable`` (the cleaner would choose it): two different questions, shown apart. With
    ``roll_active`` a last column shows the offsets rolling would add to the range."""
    table = Table(title="cleanerd plan", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("partition", overflow="fold", min_width=9)
    names = ["dirty", "must-clean", "delay s", "range", "clean", "cleanable", "now", "pick"]
    for name in names + (["+rolled"] if roll_active else []):
        table.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        low, high = r["cleanable_range"]
        cells = [
            r["partition"],
            f"{r['dirty_ratio']:.3f}",
            f"{r['must_clean_ratio']:.3f}",
            f"{r['compaction_delay_ms'] / 1000:.0f}",
            f"[{low}, {high})",
            iec_size(r["clean_bytes"]),
            iec_size(r["cleanable_bytes"]),
            _yes(r["need_compaction_now"]),
            _yes(r["is_cleanable"]),
        ]
        if roll_active:
            start, end = r["roll_active"]["added_range"]
            cells.append(f"[{start}, {end})" if end > start else "none")
        table.add_row(*cells)
    console = table_console([table])
    console.print(table)
    click.echo("now: overdue past max.compaction.lag.ms; pick: the cleaner would clean it")
    if roll_active:
        click.echo("+rolled: offsets --roll-active would add to the range (LSO, min lag apply)")
    for r in rows:
        for note in r["notes"]:
            click.echo(f"note: {r['partition']}: {note}")
