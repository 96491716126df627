"""``cleanerd plan``: each partition's cleaning plan, read-only.

Which partitions, and with which topic settings, is decided as for ``compact``, ``snapshot`` and
``spark`` (``cli._targets``): the config as ``cleanerd run`` reads it, then this command's own
options.

``plan`` writes nothing: opening a ``PartitionLog`` would finish an interrupted swap and rebuild
bad indexes, so segment metadata comes from a plain walk of the batch headers here. With
``--roll-active`` it also plans the log as ``compact --roll-active`` would see it, its active
segment rolled (``bounds.as_rolled``), and shows the range that adds; the dir is not touched.

Exit codes: 0 every partition planned; 1 some partition could not be read; 2 usage error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from cleanerd.cli._errors import print_error
from cleanerd.cli._options import format_option
from cleanerd.cli._tables import iec_size, table_console
from cleanerd.cli._targets import Target, find_targets, load_selection, select, target_options
from cleanerd.compaction import (
    LogMeta,
    SegmentMeta,
    as_rolled,
    plan,
    producer_scans,
    walk_segment,
)
from cleanerd.inspect import segment_logs
from cleanerd.scheduling import partition_log_meta
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    StorageError,
    TopicPartition,
    leftover_temp_files,
    read_offset_checkpoint,
    scan_producer_state,
    wall_clock_ms,
)
from cleanerd.topics import TopicSettings


# --- reading a partition's metadata without writing -------------------------------------------
def _checkpointed(logdir: Path, name: str, tp: TopicPartition) -> int | None:
    path = logdir / name
    return read_offset_checkpoint(path).get(tp) if path.exists() else None


def _segment(base: int, path: Path, notes: list[str]) -> SegmentMeta:
    """One segment's metadata from a header walk (no CRC check, index files not needed). The
    largest timestamp is the newest batch's, which a rolled segment's time index ends with."""
    result = walk_segment(base, path)
    if result.walk.error is not None:
        notes.append(str(result.walk.error))
    return result.walk.meta


def read_log_meta(directory: Path, tp: TopicPartition) -> tuple[LogMeta, list[str]]:
    """``LogMeta.from_log`` without opening the log (which may write), and notes on oddities:
    swap leftovers, a batch that does not decode (the segment is planned up to it)."""
    notes = [f"{p.name}: left by an interrupted swap" for p in leftover_temp_files(directory)]
    logs = segment_logs(directory)
    segments = [_segment(base, path, notes) for base, path in logs]
    logdir = directory.parent
    log_start = _checkpointed(logdir, LOG_START_OFFSET_CHECKPOINT, tp)
    high_watermark = _checkpointed(logdir, REPLICATION_OFFSET_CHECKPOINT, tp)
    # a chunk at a time, up to each segment's first problem (what its walk summarised)
    state = scan_producer_state(scan for base, path in logs for scan in producer_scans(base, path))
    meta = partition_log_meta(
        tp,
        segments,
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
            print_error(f"{target.directory.name}: {e}")
            failed = True
            continue
        rows.append(row)
        if fmt == "json":
            click.echo(json.dumps(row))
    if fmt == "text" and (rows or not failed):  # no empty table above the errors
        _print_plans(rows, roll_active)
    if failed:
        raise SystemExit(1)


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
