"""``cleanerd snapshot``: KIP-630 snapshots of compacted partitions (create, list, show, load,
fetch, delete; ``verify`` checks them too).

Partitions and their settings are chosen as for ``cleanerd compact`` (``--config`` and friends):
the topic's ``compaction.strategy`` decides each key's record, its ``compression.type`` the codec
(``producer`` means none here). ``create`` holds each log dir's ``.lock`` while it opens and reads
the partitions, like ``compact``; ``list``, ``show`` and ``load`` only read.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from cleanerd.cli._errors import os_error_line, print_error
from cleanerd.cli._options import decompression_option, dedupe_buffer_option, format_option
from cleanerd.cli._targets import find_targets, load_selection, select, target_options
from cleanerd.compaction import open_log
from cleanerd.format import limit_decompression
from cleanerd.snapshot import (
    DEFAULT_BUDGET,
    SnapshotError,
    SnapshotReader,
    SnapshotResult,
    codec_for,
    create_snapshot,
    load_state,
)
from cleanerd.storage import (
    LogDir,
    ReadOnlyLog,
    SnapshotId,
    StorageError,
    delete_snapshot,
    parse_name,
    scan_snapshot_dir,
)

_dedupe = dedupe_buffer_option(
    DEFAULT_BUDGET, "Offset map memory; more keys than fit are done in several passes."
)


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


@click.group("snapshot")
def snapshot_group() -> None:
    """KIP-630 snapshots of compacted partitions: create, list, show, load, fetch, delete."""


@snapshot_group.command("create")
@target_options
@click.option("--upto", type=click.IntRange(min=0), help="End offset [default: high watermark].")
@_dedupe
@format_option("text: one line per partition; json: one object per partition.")
def create(
    paths: tuple[Path, ...],
    topic: str | None,
    partition: int | None,
    now_ms: int | None,
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    upto: int | None,
    dedupe_buffer_bytes: int,
    fmt: str,
) -> None:
    """Write a snapshot of each partition: the state below its high watermark (capped at the
    last stable offset), from its newest valid snapshot plus the log after it."""
    del now_ms  # a snapshot does not depend on the clock
    selection = load_selection(config_file, kafka_properties, sets)
    jobs = select(find_targets(paths, topic, partition), selection, {})
    failed = False
    with contextlib.ExitStack() as stack:
        for logdir in sorted({t.directory.parent for t, _ in jobs}):
            try:
                stack.enter_context(LogDir(logdir).locked())
            except StorageError as e:
                print_error(f"{e}")
                raise SystemExit(1) from None
        for job in jobs:
            target, settings = job
            codec = codec_for(settings.snapshot.compression_type)
            started = time.perf_counter()
            try:
                with open_log(target.directory, settings.log) as log:
                    result = create_snapshot(
                        log,
                        settings.strategy,
                        upto=upto,
                        compression=codec,
                        budget_bytes=dedupe_buffer_bytes,
                        warn=_warn,
                    )
            except (SnapshotError, StorageError, ValueError) as e:
                click.echo(f"{target.directory.name}: failed: {e}", err=True)
                failed = True
                continue
            except OSError as e:  # this partition's (read-only, unreadable, disk full): the next
                click.echo(f"{target.directory.name}: {os_error_line('failed', e)}", err=True)
                failed = True
                continue
            _print_result(target.directory.name, result, time.perf_counter() - started, fmt)
    if failed:
        raise SystemExit(1)


def _print_result(name: str, r: SnapshotResult, seconds: float, fmt: str) -> None:
    fields = {
        "partition": name,
        "path": None if r.path is None else str(r.path),
        "end_offset": None if r.sid is None else r.sid.end_offset,
        "epoch": None if r.sid is None else r.sid.epoch,
        "records": r.records,
        "bytes": r.bytes,
        "base_end_offset": None if r.base is None else r.base.end_offset,
        "replayed_offsets": r.replayed_offsets,
        "seconds": round(seconds, 6),
        "skipped": r.skipped,
        "warnings": list(r.warnings),
    }
    if fmt == "json":
        click.echo(json.dumps(fields))
    elif r.skipped:
        click.echo(f"{name}: no snapshot: {r.skipped}")
    else:
        base = "the log" if r.base is None else f"snapshot {r.base.end_offset} + log"
        click.echo(
            f"{name}: {r.path} ({r.records} records, {r.bytes} bytes, from {base}, "
            f"{r.replayed_offsets} offsets replayed, {seconds:.3f} s)"
        )


@snapshot_group.command("list")
@click.argument(
    "partition_dirs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)
@format_option("text: a line per snapshot; json: one object per snapshot.")
@decompression_option
def list_command(partition_dirs: tuple[Path, ...], fmt: str) -> None:
    """The snapshots of each partition dir, oldest first, each checked (valid or why not).

    A symlink, FIFO or the like under a snapshot's name is listed as invalid, never opened."""
    failed = False
    for directory in partition_dirs:
        try:
            found = scan_snapshot_dir(directory)
        except OSError as e:
            click.echo(f"{directory.name}: {os_error_line('failed', e)}", err=True)
            failed = True
            continue
        rows: list[tuple[SnapshotId, Path, str | None]] = [
            (sid, path, None) for sid, path in found.snapshots
        ]
        rows += [
            (sid, path, f"{kind}, not a snapshot file")
            for path, kind in found.impostors
            if (sid := parse_name(path.name)) is not None
        ]
        for sid, path, problem in sorted(rows, key=lambda r: (r[0], str(r[1]))):
            _list_row(directory, sid, path, problem, fmt)
    if failed:
        raise SystemExit(1)


def _list_row(directory: Path, sid: SnapshotId, path: Path, problem: str | None, fmt: str) -> None:
    info: dict[str, Any] = {"valid": False, "problem": problem, "bytes": None}
    if problem is None:
        try:
            with SnapshotReader(path) as reader:
                info = {"valid": True, "records": reader.info.records, "bytes": reader.info.size}
                info["last_contained_timestamp"] = reader.info.last_contained_timestamp
        except SnapshotError as e:
            info["problem"] = e.reason
            with contextlib.suppress(OSError):
                info["bytes"] = os.lstat(path).st_size
    row = {
        "partition": directory.name,
        "end_offset": sid.end_offset,
        "epoch": sid.epoch,
        "path": str(path),
        **info,
    }
    if fmt == "json":
        click.echo(json.dumps(row))
    else:
        state = f"{row['records']} records" if row["valid"] else f"INVALID: {row['problem']}"
        click.echo(f"{path}  end {sid.end_offset} epoch {sid.epoch}  {state}")


@snapshot_group.command("show")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@format_option("text: kafka-dump-log style lines; json: one object per record.")
@decompression_option
def show(path: Path, fmt: str) -> None:
    """Dump one snapshot file's records (after checking its CRCs, header and footer)."""
    try:
        reader = SnapshotReader(path)
    except SnapshotError as e:
        raise click.ClickException(str(e)) from None
    with reader:
        info = reader.info
        if fmt == "text":
            click.echo(
                f"Snapshot {path}: {info.records} records, lastContainedLogTimestamp: "
                f"{info.last_contained_timestamp}"
            )
        for r in reader.records():
            _print_record(r.key, r.value, r.timestamp, r.headers, fmt)


def _text(raw: bytes | None) -> str:
    if raw is None:
        return "null"
    return raw.decode("utf-8", errors="backslashreplace")


def _print_record(
    key: bytes | None,
    value: bytes | None,
    timestamp: int,
    headers: tuple[tuple[str, bytes | None], ...],
    fmt: str,
) -> None:
    if fmt == "json":
        row = {
            "key": _text(key),
            "value": None if value is None else _text(value),
            "timestamp": timestamp,
            "headers": {k: None if v is None else _text(v) for k, v in headers},
        }
        sys.stdout.write(json.dumps(row) + "\n")
    else:
        names = [k for k, _ in headers]
        sys.stdout.write(
            f"| CreateTime: {timestamp} headerKeys: {names} key: {_text(key)} "
            f"payload: {_text(value)}\n"
        )


@snapshot_group.command("load")
@target_options
@click.option("--upto", type=click.IntRange(min=0), help="End offset [default: high watermark].")
@click.option("--count", is_flag=True, help="Print only the number of live keys.")
@_dedupe
def load(
    paths: tuple[Path, ...],
    topic: str | None,
    partition: int | None,
    now_ms: int | None,
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    upto: int | None,
    count: bool,
    dedupe_buffer_bytes: int,
) -> None:
    """The state of each partition as a reader loads it (newest valid snapshot, then the log
    after it), as JSON lines of live records, or their count."""
    del now_ms
    selection = load_selection(config_file, kafka_properties, sets)
    for target, settings in select(find_targets(paths, topic, partition), selection, {}):
        n = 0
        bound = limit_decompression(settings.log.max_decompressed_message_bytes)
        with bound, ReadOnlyLog(target.directory, settings.log) as log:
            state = load_state(
                log, settings.strategy, upto=upto, budget_bytes=dedupe_buffer_bytes, warn=_warn
            )
            for r in state:
                n += 1
                if not count:
                    _print_record(r.key, r.value, r.timestamp, r.headers, "json")
        if count:
            click.echo(f"{target.directory.name}: {n} live keys")


@snapshot_group.command("delete")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def delete(path: Path) -> None:
    """Delete one snapshot file (renamed to .checkpoint.deleted first, as Kafka does)."""
    delete_snapshot(path)
    click.echo(f"deleted {path}")


@snapshot_group.command("fetch")
@click.argument("url")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--token",
    help="The daemon's cleanerd.admin.token, sent as a bearer token (needed unless loopback).",
)
def fetch(url: str, directory: Path, token: str | None) -> None:
    """Download a snapshot from a running daemon into DIRECTORY (KIP-630's FetchSnapshot).

    URL is http://HOST:PORT/partitions/TOPIC/PARTITION/snapshots (the newest snapshot) or
    .../snapshots/ID (that one). A broken transfer resumes from the .part file on the next run;
    the file is installed only after its CRCs, header and footer check out.
    """
    import asyncio  # noqa: PLC0415 (only this command runs an event loop)

    from cleanerd.service import FetchError, fetch_snapshot  # noqa: PLC0415 (only this command runs an event loop)

    try:
        path = asyncio.run(fetch_snapshot(url, directory, token, report=_say))
    except FetchError as e:
        print_error(f"{e}")
        raise SystemExit(1) from None
    click.echo(f"fetched {path} ({path.stat().st_size} bytes)")


def _say(message: str) -> None:
    click.echo(message, err=True)
