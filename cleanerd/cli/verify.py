"""``cleanerd verify``: read-only integrity check of a log dir or a partition dir.

Exit codes: 0 when nothing is wrong, 1 on any problem (notes, such as a missing ``.index`` that
Kafka simply rebuilds, do not count), 2 when the path does not exist or is not a directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cleanerd.cli.options import format_option
from cleanerd.inspect.verify import verify_path


@click.command()
@click.argument(
    "path",
    type=click.Path(exists=True, file_okay=False, dir_okay=True, path_type=Path),
)
@format_option("text: one line per problem and a summary per partition; json: one document.")
def verify(path: Path, fmt: str) -> None:
    """Check every file of LOGDIR or PARTITION_DIR without modifying anything.

    Checks batch CRCs, lengths and record encoding, offsets increasing within and across
    segments, offset/time/transaction index entries against the batches, checkpoint files, and
    leftovers of an interrupted segment swap.

    Exit status: 0 clean; 1 problems found; 2 no such directory.
    """
    report = verify_path(path)
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo("\n".join(report.text_lines()))
    if not report.ok:
        raise SystemExit(1)
