"""``cleanerd gen LOGDIR``: write a seeded, reproducible workload and say what was written.

Only option parsing, signals and presentation live here; ``cleanerd.workload`` does the
writing, so tests and benchmarks produce exactly what this command produces.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from rich.table import Table

from cleanerd.cli._options import format_option
from cleanerd.cli._tables import table_console
from cleanerd.storage import StorageError
from cleanerd.workload import (
    DEFAULT_START_TIMESTAMP,
    KEY_DISTRIBUTIONS,
    TIMESTAMP_MODES,
    PartitionResult,
    WorkloadError,
    WorkloadResult,
    WorkloadSpec,
    generate,
)

_DEFAULTS = WorkloadSpec()
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _opt(name: str, help_text: str, **kw: Any) -> Any:
    """An option whose default (shown in --help) is the WorkloadSpec field of the same name."""
    field = name.lstrip("-").replace("-", "_")
    kw.setdefault("default", getattr(_DEFAULTS, field))
    kw.setdefault("show_default", True)
    return click.option(name, field, help=help_text, **kw)


_OPTIONS = [
    _opt("--topic", "Topic name; partitions go to LOGDIR/<topic>-<n>."),
    _opt("--partitions", "Number of partitions.", type=int),
    _opt("--records", "Data records per partition.", type=int),
    _opt("--keys", "Distinct keys to draw from.", type=int),
    _opt("--key-distribution", "How keys are drawn.", type=click.Choice(KEY_DISTRIBUTIONS)),
    _opt(
        "--zipf-s", "Zipf exponent (bigger = more skewed) for --key-distribution zipf.", type=float
    ),
    _opt("--value-bytes", "Bytes per value (hex text).", type=int),
    _opt("--tombstone-ratio", "Share of records with a null value (tombstones).", type=float),
    _opt("--codec", "Batch compression.", type=click.Choice(_CODECS)),
    _opt("--records-per-batch", "Records per batch.", type=int),
    _opt("--headers", "Headers per record (h0, h1, ...: random values, about 10% null).", type=int),
    _opt(
        "--version-header", "Add this 8-byte big-endian version header (KIP-280 header strategy)."
    ),
    _opt("--version-skew", "Share of records whose version goes down instead of up.", type=float),
    _opt("--timestamps", "Record timestamp order.", type=click.Choice(TIMESTAMP_MODES)),
    _opt("--timestamp-window-ms", "Shuffled timestamps lie within this window.", type=int),
    _opt(
        "--start-timestamp",
        f"First timestamp in ms [default: {DEFAULT_START_TIMESTAMP}, or after the newest "
        "record when appending].",
        type=int,
        show_default=False,
    ),
    _opt(
        "--idempotent-producers", "Idempotent producers (producer id, epoch, sequences).", type=int
    ),
    _opt("--transactional-producers", "Transactional producers, interleaved.", type=int),
    _opt("--abort-ratio", "Share of transactions ended by ABORT instead of COMMIT.", type=float),
    _opt("--leave-open", "Do not close the transactions still open at the end.", is_flag=True),
    _opt("--segment-bytes", "Roll segments at this size (segment.bytes).", type=int),
    _opt("--index-interval-bytes", "Offset/time index interval (index.interval.bytes).", type=int),
    _opt("--seed", "Random seed; equal seeds and options write byte-identical logs.", type=int),
    _opt("--append", "Add to partitions that already hold data instead of refusing.", is_flag=True),
]
_POSITIVE = click.FloatRange(min=0, min_open=True)


def _with_options(func: Any) -> Any:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("logdir", type=click.Path(file_okay=False, path_type=Path))
@_with_options
@format_option("text: a table; json: one JSON document on stdout.", dest="output_format")
@click.option(
    "--expected",
    "expected_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Also write the expected survivors (fixture expected.json layout) to this file.",
)
@click.option(
    "--rate",
    type=_POSITIVE,
    default=None,
    help="Records per second, all partitions together, paced against the start time; batches "
    "go round-robin over the partitions. [default: as fast as it can]",
)
@click.option(
    "--duration",
    type=_POSITIVE,
    default=None,
    help="Keep writing for this many seconds (--records is then no limit). [default: write "
    "--records per partition once]",
)
def gen(
    logdir: Path,
    output_format: str,
    expected_file: Path | None,
    rate: float | None,
    duration: float | None,
    **options: Any,
) -> None:
    """Write a deterministic workload into LOGDIR through the storage append path.

    Records, keys, tombstones, headers, codecs, idempotent and transactional producers (COMMIT
    and ABORT markers), version headers and shuffled timestamps, all from --seed. Prints what
    was written and, per key, the record a full clean under the offset strategy keeps.

    Feeding a running daemon: when `cleanerd run` holds LOGDIR, gen writes beside it under
    the writer contract (each partition's writer lock, never the log dir's .lock), and new
    partitions appear whole. A log dir held by anything else (a Kafka broker, `cleanerd
    compact`, another gen) is refused, and a stream stops if such a process takes the dir.
    When nobody holds LOGDIR, gen holds it for the run: start the daemon first. For example:

    \b
      cleanerd gen /srv/logs --topic orders --partitions 3 --append --rate 2000 --duration 60

    Ctrl-C or SIGTERM stops at the next batch boundary: open transactions are closed as at a
    normal end, and the summary says what was written.
    """
    try:
        spec = WorkloadSpec(**options)
    except WorkloadError as e:
        raise click.BadParameter(e.message, param_hint=f"'{e.flag}'") from None
    try:
        with _stop_on_signals() as stop:
            result = _run(
                logdir,
                spec,
                show_progress=output_format == "text",
                rate=rate,
                duration_s=duration,
                stop=stop,
            )
    except WorkloadError as e:
        raise click.ClickException(e.message) from None
    except (StorageError, OSError) as e:
        raise click.ClickException(f"writing {logdir} failed: {e}") from None
    if expected_file is not None:
        expected_file.write_text(json.dumps(result.expected_json(), indent=1) + "\n")
    if output_format == "json":
        click.echo(json.dumps(result.summary_json(), indent=2))
    else:
        _print_table(result, expected_file)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM set the event (the run ends at its next batch boundary); a second
    one acts as it would have without this, so a stuck run can still be interrupted."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # only the main thread may install handlers (an embedding caller's)
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    # None: a handler not set from Python, which cannot be put back; the default stands in
    previous = {int(sig): signal.getsignal(sig) or signal.SIG_DFL for sig in signals}

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signum, previous[signum])

    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(
    logdir: Path,
    spec: WorkloadSpec,
    *,
    show_progress: bool,
    rate: float | None,
    duration_s: float | None,
    stop: threading.Event,
) -> WorkloadResult:
    """Generate, with a progress bar on stderr when it is a terminal and the run is big."""
    write = functools.partial(generate, logdir, spec, rate=rate, duration_s=duration_s, stop=stop)
    big = spec.records >= 200_000 and duration_s is None
    if not (show_progress and sys.stderr.isatty() and big):
        return write()
    columns = (BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("gen", total=spec.records * spec.partitions)
        done: dict[int, int] = {}

        def update(partition: int, written: int) -> None:
            done[partition] = written
            if written % (20 * spec.records_per_batch) == 0 or written == spec.records:
                bar.update(task, completed=sum(done.values()))

        return write(progress=update)


_MAX_COLUMNS = 6  # partitions shown side by side; the total column covers the rest
_ROWS: list[tuple[str, Callable[[PartitionResult], int]]] = [
    ("records", lambda p: p.records),
    ("batches", lambda p: p.batches),
    ("segments", lambda p: len(p.segments)),
    ("bytes", lambda p: p.bytes),
    ("distinct keys", lambda p: p.distinct_keys),
    ("tombstones", lambda p: p.tombstones),
    ("commits", lambda p: p.commits),
    ("aborts", lambda p: p.aborts),
    ("aborted records", lambda p: p.aborted_records),
    ("open transactions", lambda p: p.open_transactions),
    ("first offset", lambda p: p.first_offset),
    ("last offset", lambda p: p.last_offset),
    ("expected survivors", lambda p: p.survivors),
]


def _print_table(result: WorkloadResult, expected_file: Path | None) -> None:
    """One column per partition (narrow for the usual few), plus a total when there are more."""
    spec = result.spec
    parts = result.partitions
    shown = parts[:_MAX_COLUMNS]
    table = Table(title=f"cleanerd gen: topic {spec.topic} in {result.logdir}", box=box.SIMPLE)
    table.add_column("")
    for p in shown:
        table.add_column(
            p.directory + (" (appended)" if p.appended_to_existing else ""), justify="right"
        )
    if len(parts) > 1:
        table.add_column(f"total ({len(parts)})", justify="right")
    for label, get in _ROWS:
        cells = [f"{get(p):,}" for p in shown]
        if len(parts) > 1:
            offsets = "offset" in label
            cells.append("" if offsets else f"{sum(get(p) for p in parts):,}")
        table.add_row(label, *cells)
    console = table_console([table])
    console.print(table)
    if len(parts) > len(shown):
        console.print(f"({len(parts) - len(shown)} more partitions: see --format json)")
    how = {"done": "", "deadline": ", --duration reached", "stopped": ", stopped by a signal"}
    console.print(
        f"{result.records:,} records in {result.batches:,} batches to {len(parts)} "
        f"partition{'s' if len(parts) != 1 else ''} in {result.elapsed_s:.2f} s "
        f"({result.records_per_s:,.0f} records/s{how[result.ended]}); codec {spec.codec}, "
        f"seed {spec.seed}"
        + ("; written beside the daemon holding the log dir" if result.beside else ""),
        highlight=False,
    )
    if expected_file is not None:
        console.print(f"expected survivors written to {expected_file}", highlight=False)
