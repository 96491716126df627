"""``cleanerd erasure check``: is an older value of a key still on disk? (``inspect._erasure``).

Keys come as ``--key`` (UTF-8 text, ``hex:<digits>`` for any bytes) and ``--key-file`` (one per
line, same syntax). Which record of a key is its newest follows the topic's strategy, found as
``cleanerd compact`` finds it: the config as ``cleanerd run`` reads it, then ``--strategy``.
Each partition is read within its topic's ``max.decompressed.message.bytes``.

Exit codes: 0 no older value of any key on disk and every file read; 1 an older value found, or
a file that cannot be read (each named, with the byte position of the problem); 2 usage (no key,
a key that does not parse, a path holding no partition).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click
from rich import box
from rich.table import Table

from cleanerd.cli._config import config_options
from cleanerd.cli._errors import print_error
from cleanerd.cli._options import format_option, strategy_options
from cleanerd.cli._tables import iec_size, table_console
from cleanerd.cli._targets import Selection, Target, load_selection, select
from cleanerd.inspect import (
    Copy,
    ErasureReport,
    ErasureTarget,
    KeyInPartition,
    check_erasure,
    erasure_partitions,
    key_text,
    parse_key,
    read_key_file,
)
from cleanerd.storage import LedgerEntry, TopicPartition, iso_ms

SHOWN = 5
"""Older values and ledger entries listed per cell of the table (JSON lists them all)."""


@click.group("erasure")
def erasure_group() -> None:
    """Proof of erasure: find every value of a key still on disk (check)."""


@erasure_group.command(
    "check", short_help="Each key's newest record and its older values still on disk."
)
@click.argument(
    "paths",
    nargs=-1,
    required=True,
    metavar="LOGDIR|PARTITION_DIR...",
    # an unreadable dir is the data's or the system's problem (exit 1), not usage
    type=click.Path(exists=True, file_okay=False, readable=False, path_type=Path),
)
@click.option(
    "--key",
    "key_args",
    multiple=True,
    metavar="KEY",
    help="A key: UTF-8 text, or hex:<digits> for any bytes (text:<text> for a text key "
    "starting with hex: or text:); repeatable.",
)
@click.option(
    "--key-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="One key per line, written as --key takes them; blank lines are skipped.",
)
@click.option("--topic", help="Only this topic (a glob is accepted).")
@click.option("--partition", type=click.IntRange(min=0), help="Only this partition.")
@strategy_options
@config_options
@format_option("text: a table for people; json: one document, one object per key.")
def check(
    paths: tuple[Path, ...],
    key_args: tuple[str, ...],
    key_file: Path | None,
    topic: str | None,
    partition: int | None,
    strategy: str | None,
    strategy_header: str | None,
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    fmt: str,
) -> None:
    """Find every record of each KEY in LOGDIR's partitions (those Kafka is deleting or
    moving too) or in the PARTITION_DIRs: all segments, the active one included, swap
    leftovers (.cleaned, .swap, .deleted), KIP-630 snapshots in checkpoints/ and their
    leftovers. For each key: its newest record (the one the topic's strategy keeps), every
    older value still on disk (file and offset), and the erasure ledger's cleanings that
    covered the newest record, that is when the older values were removed.

    Under the timestamp or header strategy (KIP-280) the newest record is the one that
    strategy keeps: give the topic's --config or --strategy. What the check cannot see
    (blocks the filesystem freed, copies elsewhere, consumers that read the value) is in
    docs/operations.md, "Erasure".

    Exit status: 0 no older value on disk; 1 an older value found, or a file that cannot be
    read (named, with the byte position); 2 usage error.
    """
    keys = _keys(key_args, key_file)
    targets = _targets(paths, topic, partition)
    overrides = {"compaction.strategy": strategy, "compaction.strategy.header": strategy_header}
    selection = load_selection(config_file, kafka_properties, sets)
    jobs = select(targets, Selection(selection.loaded, by_policy=False), overrides)
    report = check_erasure(
        [
            ErasureTarget(t.directory, s.strategy, s.log.max_decompressed_message_bytes)
            for t, s in jobs
        ],
        keys,
    )
    for problem in report.ledger_problems:
        click.echo(f"warning: {problem}", err=True)
    for bad in report.unreadable:
        print_error(f"cannot read: {bad.message}")
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=1))
    else:
        _print_table(report)
    if not report.ok:
        raise SystemExit(1)


def _keys(key_args: Sequence[str], key_file: Path | None) -> list[bytes]:
    keys = []
    for text in key_args:
        try:
            keys.append(parse_key(text))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--key") from None
    if key_file is not None:
        try:
            keys.extend(read_key_file(key_file))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--key-file") from None
    if not keys:
        raise click.UsageError("no key to check: give --key KEY or --key-file FILE")
    return keys


def _targets(paths: Sequence[Path], topic: str | None, partition: int | None) -> list[Target]:
    """Each partition dir to read; one not named ``<topic>-<partition>`` gets the settings of
    the topic named "" (the broker defaults and the tables matching every topic)."""
    found: list[Target] = []
    for path in paths:
        try:
            dirs = erasure_partitions(path.absolute(), topic, partition)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="LOGDIR|PARTITION_DIR") from None
        found += [Target(d, tp or TopicPartition("", 0), named=True) for d, tp in dirs]
    return list(dict.fromkeys(found))


def _key_label(key: bytes) -> str:
    text = key_text(key)
    if text is not None and text.isprintable() and not text.startswith(("hex:", "text:")):
        return text
    return f"hex:{key.hex()}"


def _copy_text(c: Copy, *, name: bool) -> str:
    where = f"{c.file.name} " if name else ""
    at = "(snapshot)" if c.offset is None else f"@{c.offset}"
    what = "tombstone" if c.tombstone else "value"
    aborted = ", aborted" if c.aborted else ""
    return f"{where}{at} {what}{aborted} {iso_ms(c.timestamp)}"


def _entry_text(e: LedgerEntry) -> str:
    many = f" ({e.cleanings} cleanings from {iso_ms(e.since_ms)})" if e.since_ms is not None else ""
    return f"{iso_ms(e.time_ms)} [{e.first_dirty}, {e.end}) {e.engine}{many}"


def _cell(lines: list[str], total: int) -> str:
    shown = lines[:SHOWN]
    if total > len(shown):
        shown.append(f"... and {total - len(shown)} more")
    return "\n".join(shown) or "-"


def _row(found: KeyInPartition) -> tuple[str, str, str]:
    newest = "-" if found.newest is None else _copy_text(found.newest, name=False)
    older = _cell([_copy_text(c, name=True) for c in found.older], found.older_count)
    if not found.older_count:
        older = "none"
    removed = _cell([_entry_text(e) for e in found.removed_by], len(found.removed_by))
    return newest, older, removed


def _print_table(report: ErasureReport) -> None:
    table = Table(title="cleanerd erasure check", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("key", "partition", "newest", "older values on disk", "removed (ledger)"):
        table.add_column(name, overflow="fold")
    for r in report.keys:
        if not r.found:
            table.add_row(_key_label(r.key), "-", "not on disk", "none", "-")
        for found in r.found:
            table.add_row(_key_label(r.key), found.partition, *_row(found))
    console = table_console([table])
    console.print(table)
    with_older = sum(r.older_on_disk for r in report.keys)
    console.print(
        f"{len(report.keys)} keys in {report.partitions} partitions ({report.files} files, "
        f"{iec_size(report.bytes)} in {report.seconds:.2f} s): {with_older} with older values "
        f"on disk, {len(report.unreadable)} files not read",
        highlight=False,
        markup=False,
    )
