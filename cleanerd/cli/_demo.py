"""``cleanerd demo``: the daemon on a fresh log dir fed by a built-in writer, with a live table.

Three compacted topics: ``orders`` and ``users`` receive updates and deletes all the time;
``sessions`` receives one burst at the start and then nothing, so its records sit in the active
segment until the daemon rolls it once they are older than its ``max.compaction.lag.ms`` (15 s)
and compacts it (KIP-354). The demo's config is written next to the data
(``<DIR>/cleanerd-demo.toml``) so ``cleanerd run --config`` can run on the same dir afterwards.
At the end the log is checked against the writer's model: the last record of every key must be
the value the writer last wrote.

What it says while it runs: a line before the numba kernels are first used (a fresh install
compiles them, ~30 s, before anything else happens: they are prepared on a small throwaway log
first), then a live table on a terminal, or a progress line every few seconds when stdout is a
pipe or a file, and the final table. The daemon's own log goes to ``<DIR>/cleanerd-demo.log``
as JSON lines at info level. Sizes for people are IEC (KiB, MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import click
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cleanerd._kernel import use_numba
from cleanerd.cli._config import load_from_options
from cleanerd.cli._errors import print_error
from cleanerd.cli._tables import iec_size
from cleanerd.config import CleanerdConfig, LoadedConfig, join_listen, load_config, parse_listen
from cleanerd.service import (
    Daemon,
    DaemonStatus,
    StartupError,
    configure_logging,
    load_kernels,
    run_async,
)
from cleanerd.storage import LOCK_FILE, LogDir, StorageError
from cleanerd.workload import LiveWriter, check_survivors

MARKER = ".cleanerd-demo"
"""A file marking a dir the demo made, so a second run may wipe it and nothing else."""

IDLE_TOPIC = "sessions"
IDLE_LAG_MS = 15_000
PROGRESS_EVERY_S = 5.0  # a progress line this often when stdout is not a terminal


def _config_text(directory: Path, listen: str) -> str:
    return f"""# written by `cleanerd demo`; to run the daemon alone on the same dir:
#   cleanerd run --config {directory / "cleanerd-demo.toml"}
"log.dirs" = "{directory}"
"log.cleanup.policy" = "compact"
"log.cleaner.threads" = 2
"log.cleaner.backoff.ms" = 1000
"log.cleaner.min.cleanable.ratio" = 0.3
"log.cleaner.delete.retention.ms" = 10000
"log.cleaner.dedupe.buffer.size" = 33554432
"log.segment.bytes" = 262144
"cleanerd.http.listen" = "{listen}"

[topics."{IDLE_TOPIC}"]
"max.compaction.lag.ms" = {IDLE_LAG_MS}
"""


def _prepare(directory: Path) -> LogDir:
    """Take the dir's ``.lock`` (the lock ``compact`` and ``run`` take), then empty it: a demo
    still running there (or a daemon, or a broker) keeps it, and nothing is touched."""
    if directory.exists():
        if not directory.is_dir():
            raise click.UsageError(f"{directory} is not a directory: choose another DIR")
        if not (directory / MARKER).exists() and any(directory.iterdir()):
            raise click.UsageError(f"{directory} exists and is not a demo dir: choose another DIR")
    directory.mkdir(parents=True, exist_ok=True)
    lock = LogDir(directory)
    lock.lock()  # LogDirLockedError names the process holding it
    try:
        for entry in directory.iterdir():
            if entry.name == LOCK_FILE:
                continue  # the lock we hold: never removed (another process may wait on it)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        (directory / MARKER).write_text("made by cleanerd demo; removed by the next demo run\n")
    except BaseException:
        lock.unlock()
        raise
    return lock


def _age(now_ms: int, then_ms: int | None) -> str:
    return "-" if then_ms is None else f"{(now_ms - then_ms) / 1000:.0f}s ago"


def _table(status: DaemonStatus, url: str, writer: LiveWriter, started: float) -> Group:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in (
        "partition",
        "state",
        "size",
        "dirty",
        "must-clean",
        "delay",
        "last clean",
        "cleanings",
    ):
        table.add_column(name, justify="left" if name in ("partition", "state") else "right")
    for p in sorted(status.partitions, key=lambda s: str(s.tp)):
        table.add_row(
            str(p.tp),
            "uncleanable" if p.uncleanable else p.state.value,
            iec_size(p.size_bytes),
            f"{p.dirty_ratio:.2f}",
            f"{p.must_clean_ratio:.2f}",
            f"{p.compaction_delay_ms / 1000:.1f}s",
            _age(status.now_ms, p.last_clean_ms),
            str(p.cleanings),
        )
    footer = Text(
        f"{_progress(status, writer, started)}\n"
        f"metrics: {url}/metrics   status: {url}/status   Ctrl-C stops"
    )
    return Group(table, footer)


def _progress(status: DaemonStatus, writer: LiveWriter, started: float) -> str:
    """One line: time, what the writer wrote, what the cleaner did."""
    t = status.totals
    to_clean = sum(1 for p in status.partitions if p.cleanable)
    return (
        f"{time.monotonic() - started:.0f}s  writer: {writer.records_written} records "
        f"({writer.tombstones_written} deletes)  cleaner: {t.cleanings} cleanings, "
        f"{t.records_removed} records removed, {t.segments_rolled} idle segments rolled, "
        f"{to_clean} of {len(status.partitions)} partitions to clean"
    )


async def _show(daemon: Daemon, writer: LiveWriter, started: float) -> None:
    """The live table on a terminal; else a line at once and one every few seconds (the table
    comes at the end: ``_final_table``). A closed stdout (``| head``) ends the showing, never
    the demo: its duration is timed apart. Starts once the HTTP port is bound, so the address
    shown is the one the daemon took."""
    url = await daemon.http_url() or _url(daemon.loaded.config)
    console = Console()
    try:
        if console.is_terminal:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while True:
                    live.update(_table(daemon.status(), url, writer, started))
                    await asyncio.sleep(0.5)
        click.echo(f"demo running; progress every {PROGRESS_EVERY_S:.0f} s, the table at the end")
        while True:
            click.echo(_progress(daemon.status(), writer, started))
            await asyncio.sleep(PROGRESS_EVERY_S)
    except OSError:  # stdout went away
        return


def _final_table(daemon: Daemon, writer: LiveWriter, started: float) -> None:
    """The table once, when stdout is not a terminal, with room for its columns (not the 80 of
    an unknown width)."""
    console = Console()
    if not console.is_terminal:
        with contextlib.suppress(OSError):
            Console(width=max(console.width, 140)).print(
                _table(
                    daemon.status(), daemon.bound_url or _url(daemon.loaded.config), writer, started
                )
            )


@click.command()
@click.argument("directory", type=click.Path(path_type=Path), default="demo-data")
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    help="Stop after this many seconds [default: Ctrl-C].",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=1),
    default=2000.0,
    show_default=True,
    help="Records per second the writer appends.",
)
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    help="HTTP address for /metrics and /status; port 0 takes a free one (the demo prints it).",
)
def demo(directory: Path, duration: float | None, rate: float, listen: str) -> None:
    """Run the daemon on a fresh demo log dir (DIRECTORY, default ./demo-data) fed by a writer
    of updates and deletes, and show its partitions live."""
    directory = directory.absolute()
    problem = _listen_problem(listen)
    if problem is not None:  # before anything is written: a taken port leaves no half demo
        print_error(f"{problem}")
        raise SystemExit(1)
    try:
        lock = _prepare(directory)
    except StorageError as e:
        print_error(f"{e}")
        raise SystemExit(1) from None
    try:
        _run_demo(directory, lock, duration, rate, listen)
    except BrokenPipeError:  # `cleanerd demo | head`: the demo ran; say nothing more
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    finally:
        lock.unlock()


def _listen_problem(listen: str) -> str | None:
    """Why the daemon could not listen on ``listen``, found by binding it once; None if it can."""
    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        return f"--listen {listen}: {e}"
    if host is None or port == 0:
        return None  # off, or any free port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the daemon binds
        try:
            probe.bind((host, port))
        except OSError as e:
            return (
                f"cannot listen on {listen}: {e.strerror}; choose another --listen"
                " (127.0.0.1:0 takes a free port)"
            )
    return None


def _url(config: CleanerdConfig) -> str:
    """The configured HTTP address, for when the daemon bound none (off, or it failed first)."""
    return f"http://{join_listen(config.http_host or '127.0.0.1', config.http_port)}"


def _run_demo(
    directory: Path, lock: LogDir, duration: float | None, rate: float, listen: str
) -> None:
    """Write the config, start the writers, run the daemon on the locked dir, then check."""
    config_file = directory / "cleanerd-demo.toml"
    config_file.write_text(_config_text(directory, listen))
    loaded = load_from_options(config_file, None, ())
    log_file = directory / "cleanerd-demo.log"
    configure_logging("json", "info", stream=open(log_file, "a"))  # noqa: SIM115
    click.echo(f"daemon log (JSON lines, info level): {log_file}")
    _prepare_kernels()
    writer = LiveWriter(directory, ("orders", "users"), partitions=2, keys=2000, rate=rate, seed=1)
    idle = LiveWriter(directory, (IDLE_TOPIC,), keys=300, rate=None, seed=2)
    idle.step(40)  # one burst, then silence: only an idle roll gets it compacted
    writer.step(10)  # every partition exists before the daemon's first survey

    def reload() -> LoadedConfig:
        return load_config(config_file=config_file)

    async def main() -> int:
        daemon = Daemon(loaded, reload, held=(lock,))
        writer.start()
        started = time.monotonic()
        if duration is not None:
            loop = asyncio.get_running_loop()
            loop.call_later(duration, daemon.request_stop, "demo duration reached")
        shower = asyncio.create_task(_show(daemon, writer, started))
        try:
            return await daemon.run()
        finally:
            shower.cancel()
            writer.stop()
            _final_table(daemon, writer, started)

    try:
        code = run_async(main)
    except (StartupError, StorageError) as e:
        print_error(f"{e}")
        raise SystemExit(1) from None
    finally:
        writer.close()
        idle.close()
    _report(directory, writer, idle)
    raise SystemExit(code)


def _prepare_kernels() -> None:
    """Load the numba kernels the cleaner uses (compiling them when numba's cache has none),
    saying so: on a fresh install that takes about 30 s, which would otherwise pass in silence
    before the first line of the table."""
    click.echo("preparing kernels (the first run after an install compiles them for ~30 s) ...")
    use_numba()  # the daemon's way (cli/_run.py)
    load = load_kernels()
    how = (
        f"{load.compiled} compiled in {load.compile_seconds:.0f} s; `cleanerd warmup` after an "
        "install compiles them ahead"
        if load.compiled
        else "all from numba's cache"
    )
    click.echo(f"kernels ready in {load.seconds:.0f} s ({how})")


def _report(directory: Path, *writers: LiveWriter) -> None:
    """Check every partition against its writer's model and say so."""
    bad = 0
    for w in writers:
        for tp in w.partitions:
            ok, problems, records, keys = check_survivors(
                directory, tp, w.expected(tp), w.tombstoned(tp)
            )
            status = "survivors match the writer's model" if ok else "; ".join(problems[:3])
            bad += not ok
            click.echo(f"{tp}: {records} records, {keys} keys: {status}")
    click.echo(f"logs: {directory}  daemon log: {directory / 'cleanerd-demo.log'}", err=bad > 0)
    if bad:
        sys.exit(1)
