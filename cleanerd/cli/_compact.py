"""``cleanerd compact``: one-shot compaction of a log dir or of partition dirs.

Which partitions, and with which topic settings, is decided as for ``cleanerd plan`` (see
``cli._targets``): the settings come from the same config as ``cleanerd run``'s (``--config``,
``--kafka-properties``, ``CLEANERD_*``, ``--set``), each topic's broker defaults and
``[topics."glob"]`` tables, with this command's options on top. A LOGDIR means all its
partitions, or with a config file only its compacted topics; a PARTITION_DIR is always
compacted. ``compaction._one_shot`` does the work, one partition after another, holding each log
dir's ``.lock`` for the whole run (a dry run takes no lock: it only reads the real files and
writes to its temporary copy). The active segment is never cleaned: ``--roll-active`` rolls it
first (an empty segment at the log end, on the copy for a dry run) so a stopped broker's or an
archived log dir is compacted whole; without it a partition left with nothing cleanable gets a
note saying why.

Exit codes: 0 all partitions compacted; 1 a log dir is locked (nothing done), a PARTITION_DIR
named cannot be read (one line naming it), or some partition failed (corrupt segment, a
partition dir of LOGDIR that cannot be read...: that partition is left as it was and named with
the file and the reason, the others are compacted); 2 usage.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress as RichProgress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from cleanerd.cli._errors import os_error_text, print_error
from cleanerd.cli._options import cleaning_options, dedupe_buffer_option, format_option
from cleanerd.cli._tables import iec_size, table_console
from cleanerd.cli._targets import Job, find_targets, load_selection, select, target_options
from cleanerd.compaction import (
    DEFAULT_DEDUPE_BUFFER_BYTES,
    DEFAULT_LOAD_FACTOR,
    Bound,
    CompactionError,
    CompactionProgress,
    CompactionSummary,
    Progress,
    compact_directory,
    compile_clock,
    decompression_pool,
    slot_bytes,
)
from cleanerd.format import CorruptRecordError
from cleanerd.storage import (
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogDir,
    Repairs,
    StorageError,
    read_any_checkpoint,
    wall_clock_ms,
)
from cleanerd.topics import Strategy


def _check_jobs(jobs: list[Job], map_bytes: int, strategy: str | None) -> None:
    """Refuse up front what would fail in every partition: a map too small, a header strategy
    asked for without a header name (KIP-280 would silently fall back to offset)."""
    for target, settings in jobs:
        if strategy == Strategy.HEADER and settings.strategy.strategy is not Strategy.HEADER:
            raise click.BadParameter(
                f"{target.directory.name}: the header strategy needs --strategy-header NAME "
                "(or compaction.strategy.header in --config)",
                param_hint="--strategy",
            )
        if map_bytes // slot_bytes(settings.strategy) * DEFAULT_LOAD_FACTOR <= 1:
            raise click.BadParameter(
                f"{map_bytes} bytes hold no two keys of {slot_bytes(settings.strategy)} bytes",
                param_hint="--dedupe-buffer-bytes",
            )


@click.command()
@target_options
@cleaning_options
@dedupe_buffer_option(
    DEFAULT_DEDUPE_BUFFER_BYTES,
    "Offset map memory (log.cleaner.dedupe.buffer.size); smaller means more passes.",
)
@click.option("--dry-run", is_flag=True, help="Compact a temporary copy; write nothing here.")
@format_option("text: a summary table; json: one JSON object per partition per line.")
def compact(
    paths: tuple[Path, ...],
    topic: str | None,
    partition: int | None,
    now_ms: int | None,
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    strategy: str | None,
    strategy_header: str | None,
    delete_retention_ms: int | None,
    min_compaction_lag_ms: int | None,
    producer_id_expiration_ms: int | None,
    roll_active: bool,
    dedupe_buffer_bytes: int,
    dry_run: bool,
    fmt: str,
) -> None:
    """Compact LOGDIR (all its partitions; with a config file only compacted topics) or the
    PARTITION_DIRs named (whatever their policy) as far as Kafka's rules allow at --now.

    Topic settings: the config as `cleanerd run` reads it (broker defaults, [topics."<glob>"]
    tables, CLEANERD_* environment, --set), then this command's options.

    Passes repeat while a dirty range is left, then whole-log passes remove the tombstones and
    transaction markers whose delete horizon has passed (with --delete-retention-ms 0, all).
    The active segment is never cleaned; --roll-active first rolls it (an empty segment at the
    log end; on the copy for --dry-run) so an offline log dir is compacted whole. Without it, a
    partition with nothing cleanable gets a note saying why. Holds each log dir's .lock for the
    whole run.

    Exit status: 0 done; 1 a log dir is locked or some partition failed (it is left as it
    was; the others are compacted); 2 usage error.
    """
    overrides = {
        "compaction.strategy": strategy,
        "compaction.strategy.header": strategy_header,
        "delete.retention.ms": delete_retention_ms,
        "min.compaction.lag.ms": min_compaction_lag_ms,
        "producer.id.expiration.ms": producer_id_expiration_ms,
    }
    selection = load_selection(config_file, kafka_properties, sets)
    jobs = select(find_targets(paths, topic, partition), selection, overrides)
    _check_jobs(jobs, dedupe_buffer_bytes, strategy)
    if not jobs:
        click.echo("no partitions to compact", err=True)
        return
    now = wall_clock_ms() if now_ms is None else now_ms
    with contextlib.ExitStack() as stack:
        if not dry_run:
            for logdir in sorted({t.directory.parent for t, _ in jobs}):
                try:
                    stack.enter_context(LogDir(logdir).locked())
                except StorageError as e:
                    print_error(f"{e}")
                    raise SystemExit(1) from None
        _warn_unused_checkpoints({t.directory.parent / RECOVERY_POINT_CHECKPOINT for t, _ in jobs})
        # one cleaning at a time: a core left beside it decompresses part of pass 1
        pool = decompression_pool(1)
        if pool is not None:
            stack.callback(pool.shutdown)
        results, failures = _run(jobs, now, dedupe_buffer_bytes, dry_run, roll_active, fmt, pool)
    if fmt == "text":
        _print_table(results, failures, dry_run)
    if failures:
        raise SystemExit(1)


def _warn_unused_checkpoints(paths: set[Path]) -> None:
    """Checkpoints compaction does not depend on (Kafka's recovery point, the leader epochs) are
    checked as ``verify`` checks them: a bad one is a warning naming the file and line. Those it
    depends on (cleaner offsets, log start, high watermark) fail the partition when read. A dir
    that cannot be searched raises (``exists``): for a partition dir, that partition fails."""
    for path in sorted(p for p in paths if p.exists()):
        try:
            read_any_checkpoint(path)
        except StorageError as e:
            click.echo(f"warning: {e} (not used by compaction)", err=True)
        except OSError as e:
            click.echo(f"warning: {os_error_text(e)} (not used by compaction)", err=True)


def _run(
    jobs: list[Job],
    now: int,
    map_bytes: int,
    dry_run: bool,
    roll_active: bool,
    fmt: str,
    pool: Executor | None = None,
) -> tuple[list[CompactionSummary], list[str]]:
    """Compact each partition in turn; a failure (corrupt data, a partition dir that cannot be
    read) is reported naming the file and the reason, and the next one goes on."""
    results: list[CompactionSummary] = []
    failures: list[str] = []
    with _progress(len(jobs)) as report:
        for target, settings in jobs:
            name = target.directory.name
            before = Repairs(target.directory) if not dry_run else None
            try:
                _warn_unused_checkpoints({target.directory / LEADER_EPOCH_CHECKPOINT})
                with compile_clock() as jit:
                    summary = compact_directory(
                        target.directory,
                        settings.log,
                        settings.cleaner,
                        settings.strategy,
                        now,
                        map_bytes=map_bytes,
                        dry_run=dry_run,
                        progress=report,
                        roll_active=roll_active,
                        decompression_pool=pool,
                    )
                summary = summary.without_compile_time(jit.seconds, jit.compiled)
            except (CorruptRecordError, StorageError, CompactionError, OSError) as e:
                error = os_error_text(e) if isinstance(e, OSError) else str(e)
                print_error(f"{name}: {error} ({before.undo() if before else 'nothing written'})")
                failures.append(name)
                if fmt == "json":
                    click.echo(json.dumps({"partition": name, "error": error}))
                continue
            results.append(summary)
            if summary.checkpoint_reset is not None:
                click.echo(f"warning: {name}: {summary.checkpoint_reset}", err=True)
            if summary.ledger_error is not None:
                click.echo(f"warning: {name}: {summary.ledger_error}", err=True)
            for problem in summary.txn_index_problems:
                click.echo(f"warning: {name}: transaction index rebuilt: {problem}", err=True)
            if fmt == "json":
                click.echo(json.dumps({**summary.to_json(), "note": _note(summary)}))
    return results, failures


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Progress | None]:
    """A progress callback: a rich bar on stderr when it is a terminal, else a no-op."""
    if not sys.stderr.isatty():
        yield None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        _IecSpeedColumn(),
        TimeElapsedColumn(),
    )
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as bar:
        overall = bar.add_task("partitions", total=total)
        tasks: dict[str, Any] = {}

        def report(p: CompactionProgress) -> None:
            if p.partition not in tasks:
                if tasks:
                    bar.advance(overall)
                tasks[p.partition] = bar.add_task(p.partition, total=None)
            label = f"{p.partition} {p.phase} pass {p.passes + 1}"
            bar.update(tasks[p.partition], description=label, completed=p.io_bytes)

        yield report


class _IecSpeedColumn(ProgressColumn):
    """rich's TransferSpeedColumn in IEC units (it has only decimal ones)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("?" if speed is None else f"{iec_size(speed)}/s", style="progress.data.speed")


def _tombstones(s: CompactionSummary) -> str:
    """Removed tombstones, as expired+superseded when the split is known."""
    if s.tombstones_expired is None or s.tombstones_superseded is None:
        return str(s.tombstones_removed)
    return f"{s.tombstones_expired}+{s.tombstones_superseded}"


def _note(summary: CompactionSummary) -> str | None:
    """The summary's note, with the way out when the active segment held everything."""
    if summary.note is not None and summary.bound == Bound.ACTIVE_SEGMENT.value:
        return f"{summary.note}; --roll-active rolls it"
    return summary.note


def _print_table(results: list[CompactionSummary], failures: list[str], dry_run: bool) -> None:
    """One row per partition, narrow enough for 80 columns; JSON has every field."""
    title = "cleanerd compact" + (" --dry-run: nothing written" if dry_run else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("partition", overflow="fold", min_width=9)
    for name in ("records", "size", "tomb", "mark", "abort", "passes"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in results:
        table.add_row(
            s.partition,
            f"{s.records_in}→{s.records_out}",
            f"{iec_size(s.bytes_in)}→{iec_size(s.bytes_out)}",
            _tombstones(s),
            str(s.markers_removed),
            str(s.aborted_records_removed),
            str(s.passes),
        )
    for name in failures:
        table.add_row(name, "failed")
    console = table_console([table])
    console.print(table)
    seconds = sum(s.seconds for s in results)
    size = sum(s.bytes_in for s in results)
    console.print(
        f"{len(results)} partitions, {iec_size(size)} in {seconds:.2f} s"
        f" ({iec_size(size / seconds if seconds else 0)}/s). tomb/mark/abort: tombstones"
        " (expired+superseded), transaction markers, aborted records removed; records and size:"
        " whole partitions",
        highlight=False,
    )
    compiled = sum(s.kernels_compiled for s in results)
    if compiled:
        console.print(
            f"+ {sum(s.compile_seconds for s in results):.2f} s compiling {compiled} numba"
            " kernels (`cleanerd warmup` compiles them ahead)",
            highlight=False,
            markup=False,
        )
    for s in results:
        note = _note(s)
        if note is not None:
            console.print(f"note: {s.partition}: {note}", highlight=False, markup=False)
