"""``cleanerd verify``: read-only integrity check of a log dir, a partition dir or a segment.

A file names its segment (``.log``, ``.index``, ``.timeindex``, ``.txnindex``), as Kafka's tools
take segment files; which kind a file is, is decided as ``cleanerd dump`` decides it
(``inspect._files.classify``).

Exit codes: 0 when nothing is wrong, 1 on any problem (notes, such as a missing ``.index`` that
Kafka simply rebuilds, do not count; a partition of a log dir that cannot be read is a problem
of that partition, the others are checked), 2 when the path does not exist or is a file verify
does not check.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cleanerd.cli._options import decompression_option, format_option
from cleanerd.inspect import UnknownFileKindError, verify_path


@click.command()
@click.argument(
    "path",
    type=click.Path(exists=True, readable=False, path_type=Path),
)
@format_option("text: one line per problem and a summary per partition; json: one document.")
@decompression_option
def verify(path: Path, fmt: str) -> None:
    """Check every file of PATH without modifying anything: a log dir, a partition dir, or a
    segment file (a .log, or its .index, .timeindex or .txnindex: that segment's files, its
    offsets against the next segment, its .txnindex against the log's markers).

    Checks batch CRCs, lengths and record encoding, offsets increasing within and across
    segments, offset/time/transaction index entries against the batches, checkpoint files, and
    leftovers of an interrupted segment swap. A partition of LOGDIR that cannot be read is
    reported as that partition's problem; the others are still checked.

    Exit status: 0 clean; 1 problems found; 2 no such path, or a file verify does not check.
    """
    try:
        report = verify_path(path)
    except UnknownFileKindError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from None
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo("\n".join(report.text_lines()))
    if not report.ok:
        raise SystemExit(1)
