"""``cleanerd dump``: print segments, indexes, snapshots and checkpoints, like kafka-dump-log.sh.

Kafka's options work with Kafka's meaning, so an operator's habits carry over: ``--files``
(comma-separated), ``--deep-iteration``, ``--print-data-log``, ``--index-sanity-check``,
``--verify-index-only`` and ``--max-bytes``. Any of them switches to Kafka's layout: a line per
batch always, records only with --deep-iteration (implied by --print-data-log), keys and
payloads only with --print-data-log. Without them, cleanerd's own layout: a line per record,
batch lines with --batches, values with --values. ``--format json`` serves both.

Exit codes: 0 when everything decoded; 1 when some file is corrupt (everything valid before the
problem is printed first, then an error on stderr naming the file, byte position and last good
offset; later paths are still dumped), an index fails its check or does not match its log, a
path cannot be read (one line naming it), or stdout was closed early (``| head``); 2 for a
usage error: a missing path or a file that is not a kind ``dump`` knows (checked for every path
before anything is printed).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from cleanerd.cli._errors import os_error_text, print_error
from cleanerd.cli._options import decompression_option, format_option
from cleanerd.format import CorruptRecordError
from cleanerd.inspect import (
    DumpError,
    FileKind,
    Item,
    JsonLines,
    UnknownFileKindError,
    classify,
    dump_file,
    files_to_dump,
    index_problems,
    index_sanity,
    item_line,
    kafka_item_line,
)
from cleanerd.storage import LOG_SUFFIX, StorageError, parse_base_offset, segment_file

_FLUSH_EVERY = 256  # lines per write: streams big segments without one echo per record
_INDEXES = (FileKind.OFFSET_INDEX, FileKind.TIME_INDEX)
_DUMP_ERRORS = (CorruptRecordError, DumpError, StorageError, OSError)


@dataclass(frozen=True)
class Options:
    """What to print, from cleanerd's options or Kafka's (``kafka``: Kafka's layout)."""

    fmt: str
    batches: bool
    values: bool
    records: bool = True
    kafka: bool = False
    sanity_only: bool = False
    verify_only: bool = False
    max_bytes: int | None = None

    def render(self) -> Callable[[Item], str]:
        if self.fmt == "json":
            return JsonLines()
        return kafka_item_line if self.kafka else item_line


def _error_message(exc: Exception) -> str:
    if isinstance(exc, CorruptRecordError) and exc.last_good_offset < 0:
        return f"{exc} (no valid batch before it)"
    if isinstance(exc, OSError):
        return os_error_text(exc)
    return str(exc)


def _echo_all(lines: list[str], render: Callable[[Item], str], items: Iterable[Item]) -> None:
    """Print ``lines`` then every item, a few hundred lines per write; when the items stop on
    an error, what was rendered before it is printed first (the valid part always shows)."""
    pending = list(lines)
    try:
        for item in items:
            pending.append(render(item))
            if len(pending) >= _FLUSH_EVERY:
                click.echo("\n".join(pending))
                pending.clear()
    finally:
        if pending:
            click.echo("\n".join(pending))


def _header(path: Path, kind: FileKind, opts: Options) -> list[str]:
    if opts.fmt != "text":
        return []
    base = parse_base_offset(path.name)
    log_start = kind is FileKind.LOG and base is not None
    return [f"Dumping {path}"] + ([f"Log starting offset: {base}"] if log_start else [])


def _index_checks(path: Path, kind: FileKind, opts: Options) -> bool:
    """Kafka's index options: the start-up sanity check instead of the entries, or the entries
    checked against the log (mismatches on stderr, or as JSON lines). False when it fails."""
    if opts.sanity_only:
        line = index_sanity(path, kind)
        json_item: Item = {"type": "index_sanity", "file": str(path), "message": line}
        click.echo(opts.render()(json_item) if opts.fmt == "json" else line)
        return True
    problems = index_problems(path)
    if opts.fmt == "json":
        render = opts.render()
        for message in problems:
            click.echo(render({"type": "index_problem", "file": str(path), "message": message}))
    elif problems:
        sys.stdout.flush()
        click.echo(f"Mismatches in :{path}", err=True)
        for message in problems:
            click.echo(f"  {message}", err=True)
    return not problems


def _dump_one(path: Path, kind: FileKind, opts: Options) -> bool:
    """Print one file; False (after printing the error) if it is corrupt."""
    header = _header(path, kind, opts)
    checks = opts.kafka and kind in _INDEXES and (opts.sanity_only or opts.verify_only)
    try:
        if checks:
            _echo_all(header, opts.render(), ())
            return _index_checks(path, kind, opts)
        items = dump_file(
            path,
            kind,
            batches=opts.batches,
            values=opts.values,
            records=opts.records,
            max_bytes=opts.max_bytes,
        )
        gaps: list[tuple[int, int]] = []
        if opts.kafka and opts.records and opts.fmt == "text":
            items = _noting_gaps(items, gaps)
        try:
            _echo_all(header, opts.render(), items)
        finally:
            _print_gaps(path, gaps)
        if opts.kafka and kind in _INDEXES and _has_log(path):  # Kafka checks them as it prints
            return _index_checks(path, kind, opts)
    except BrokenPipeError:
        raise  # the reader went away: not this file's fault (handled by the caller)
    except _DUMP_ERRORS as exc:
        sys.stdout.flush()
        print_error(f"{_error_message(exc)}")
        return False
    return True


def _noting_gaps(items: Iterable[Item], gaps: list[tuple[int, int]]) -> Iterator[Item]:
    """The items, noting each record offset that does not follow the previous one (Kafka's
    deep iteration reports them: expected in a compacted log, a sign of loss elsewhere)."""
    last = -1
    for item in items:
        if item["type"] == "record":
            offset = item["offset"]
            assert isinstance(offset, int)
            if last >= 0 and offset != last + 1:
                gaps.append((last, offset))
            last = offset
        yield item


def _print_gaps(path: Path, gaps: list[tuple[int, int]]) -> None:
    if gaps:
        sys.stdout.flush()
        click.echo(f"Non-consecutive offsets in {path}", err=True)
        click.echo("\n".join(f"  {a} is followed by {b}" for a, b in gaps), err=True)


def _has_log(index: Path) -> bool:
    base = parse_base_offset(index.name)
    return base is not None and segment_file(index.parent, base, LOG_SUFFIX).is_file()


def _split_files(files: tuple[str, ...]) -> list[Path]:
    """Kafka's ``--files a,b``: comma-separated (repeatable here); each must exist."""
    paths = [Path(name.strip()) for value in files for name in value.split(",") if name.strip()]
    for path in paths:
        if not path.exists():
            raise click.BadParameter(f"{path} does not exist", param_hint="--files")
    return paths


@click.command()
@click.argument(
    "paths",
    nargs=-1,
    metavar="[PATH]...",
    # an unreadable path is the data's or the system's problem (exit 1), not usage
    type=click.Path(exists=True, readable=False, path_type=Path),
)
@click.option(
    "--files",
    multiple=True,
    metavar="FILE1,FILE2,...",
    help="Kafka's: comma-separated files to dump (Kafka's layout).",
)
@click.option(
    "--deep-iteration", is_flag=True, help="Kafka's: also print the records of each batch."
)
@click.option(
    "--print-data-log",
    is_flag=True,
    help="Kafka's: print each record's key and payload (implies --deep-iteration).",
)
@click.option(
    "--index-sanity-check",
    is_flag=True,
    help="Kafka's: for .index/.timeindex run the broker's start-up check, print no entries.",
)
@click.option(
    "--verify-index-only",
    is_flag=True,
    help="Kafka's: check .index/.timeindex entries against the .log, print only mismatches.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=0),
    help="Kafka's: read at most this many bytes of each .log [default: all].",
)
@click.option("--batches", is_flag=True, help="Also print one line per batch (header fields).")
@format_option("text: kafka-dump-log style lines; json: one JSON object per line.")
@decompression_option
@click.option("--values", is_flag=True, help="Also print record values (UTF-8 text or hex).")
def dump(
    paths: tuple[Path, ...],
    files: tuple[str, ...],
    deep_iteration: bool,
    print_data_log: bool,
    index_sanity_check: bool,
    verify_index_only: bool,
    max_bytes: int | None,
    batches: bool,
    fmt: str,
    values: bool,
) -> None:
    """Print the contents of Kafka log files, as kafka-dump-log.sh does.

    PATH (or --files) is a .log segment, an .index/.timeindex/.txnindex file, a producer-state
    .snapshot, a partition dir (its segments in offset order) or a checkpoint file
    (cleaner-offset-checkpoint, recovery-point-offset-checkpoint, log-start-offset-checkpoint,
    replication-offset-checkpoint, leader-epoch-checkpoint, partition.metadata).

    Kafka's options (--files, --deep-iteration, --print-data-log, --index-sanity-check,
    --verify-index-only, --max-bytes) mean what they mean to kafka-dump-log.sh and print in its
    layout: batches, then records with --deep-iteration, keys and payloads with
    --print-data-log. Without them: records, --batches adds batch lines, --values the values.

    Exit status: 0 all valid; 1 corrupt data (valid part printed, error on stderr names the
    file, byte position and last good offset) or an index that fails its check; 2 missing path
    or unknown file kind.
    """
    given = [*paths, *_split_files(files)]
    if not given:
        raise click.UsageError("give the files to dump: PATH... or --files FILE1,FILE2,...")
    kafka = bool(files) or deep_iteration or print_data_log or index_sanity_check
    kafka = kafka or verify_index_only or max_bytes is not None
    opts = Options(
        fmt=fmt,
        batches=batches or kafka,
        values=values or print_data_log,
        records=not kafka or deep_iteration or print_data_log or values,
        kafka=kafka,
        sanity_only=index_sanity_check,
        verify_only=verify_index_only,
        max_bytes=max_bytes,
    )
    todo: list[tuple[Path, FileKind]] = []
    for path in given:
        try:
            todo.extend(files_to_dump(path, classify(path)))
        except UnknownFileKindError as exc:
            raise click.BadParameter(str(exc), param_hint="PATH") from None
    ok = True
    try:
        for path, kind in todo:
            ok = _dump_one(path, kind, opts) and ok
    except BrokenPipeError:  # `cleanerd dump ... | head`: stop quietly instead of a traceback
        with contextlib.suppress(OSError, ValueError):  # no real fd under CliRunner
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    if not ok:
        raise SystemExit(1)
