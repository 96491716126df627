"""``cleanerd dump``: print segments, indexes and checkpoints, like Kafka's kafka-dump-log.sh.

Exit codes: 0 when everything decoded; 1 when some file is corrupt (everything valid before the
problem is printed first, then an error on stderr naming the file, byte position and last good
offset; later paths are still dumped) or stdout was closed early (``| head``); 2 for a usage
error: a missing path or a file that is not a kind ``dump`` knows (checked for every path before
anything is printed).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from cleanerd.cli.options import format_option
from cleanerd.format.errors import CorruptRecordError
from cleanerd.inspect.dump import DumpError, JsonLines, dump_file, files_to_dump
from cleanerd.inspect.files import FileKind, UnknownFileKindError, base_offset_of, classify
from cleanerd.inspect.text import item_line
from cleanerd.storage.errors import StorageError

_FLUSH_EVERY = 256  # lines per write: streams big segments without one echo per record


def _error_message(exc: Exception) -> str:
    if isinstance(exc, CorruptRecordError) and exc.last_good_offset < 0:
        return f"{exc} (no valid batch before it)"
    return str(exc)


def _dump_one(path: Path, kind: FileKind, *, fmt: str, batches: bool, values: bool) -> bool:
    """Print one file; False (after printing the error) if it is corrupt."""
    render = JsonLines() if fmt == "json" else item_line
    pending: list[str] = []
    if fmt == "text":
        pending.append(f"Dumping {path}")
        base = base_offset_of(path)
        if kind is FileKind.LOG and base is not None:
            pending.append(f"Log starting offset: {base}")
    try:
        for item in dump_file(path, kind, batches=batches, values=values):
            pending.append(render(item))
            if len(pending) >= _FLUSH_EVERY:
                click.echo("\n".join(pending))
                pending.clear()
    except BrokenPipeError:
        raise  # the reader went away: not this file's fault (handled by the caller)
    except (CorruptRecordError, DumpError, StorageError, OSError) as exc:
        if pending:
            click.echo("\n".join(pending))
        sys.stdout.flush()
        click.echo(f"Error: {_error_message(exc)}", err=True)
        return False
    if pending:
        click.echo("\n".join(pending))
    return True


@click.command()
@click.argument(
    "paths",
    nargs=-1,
    required=True,
    metavar="PATH...",
    type=click.Path(exists=True, path_type=Path),
)
@click.option("--batches", is_flag=True, help="Also print one line per batch (header fields).")
@format_option("text: kafka-dump-log style lines; json: one JSON object per line.")
@click.option("--values", is_flag=True, help="Also print record values (UTF-8 text or hex).")
def dump(paths: tuple[Path, ...], batches: bool, fmt: str, values: bool) -> None:
    """Print the contents of Kafka log files.

    PATH is a .log segment, an .index/.timeindex/.txnindex file, a partition dir (its segments
    in offset order) or a checkpoint file (cleaner-offset-checkpoint,
    recovery-point-offset-checkpoint, log-start-offset-checkpoint,
    replication-offset-checkpoint, leader-epoch-checkpoint, partition.metadata).

    Exit status: 0 all valid; 1 corrupt data (valid part printed, error on stderr names the
    file, byte position and last good offset); 2 missing path or unknown file kind.
    """
    todo: list[tuple[Path, FileKind]] = []
    for path in paths:
        try:
            todo.extend(files_to_dump(path, classify(path)))
        except UnknownFileKindError as exc:
            raise click.BadParameter(str(exc), param_hint="PATH") from None
    ok = True
    try:
        for path, kind in todo:
            ok = _dump_one(path, kind, fmt=fmt, batches=batches, values=values) and ok
    except BrokenPipeError:  # `cleanerd dump ... | head`: stop quietly instead of a traceback
        with contextlib.suppress(OSError, ValueError):  # no real fd under CliRunner
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    if not ok:
        raise SystemExit(1)
