"""``cleanerd run`` (the daemon) and ``cleanerd ctl`` (its admin API from the command line).

``run`` loads the config (defaults < ``--config`` TOML < ``--kafka-properties`` < ``CLEANERD_*``
environment < ``--set``), configures logging and runs the daemon until SIGTERM/SIGINT.
Exit codes: 0 stopped cleanly (SIGTERM/SIGINT at any moment, start-up included: see
``early_stop``); 1 a log dir is missing, not a directory or locked, the port is taken, the
daemon failed, or a cleaning outlived ``cleanerd.shutdown.timeout.ms``; 2 invalid configuration
(one line per problem).

``ctl`` talks to a running daemon over its HTTP port (address and token from the same config
sources, or ``--url`` and ``--token``). The HTTP address is restart-only: after the config file
was edited (and SIGHUP'd) the daemon still listens where it started. So ``run`` records the
address it actually bound (port 0 resolved) in ``<log dir>/.cleanerd-http.json`` of each log
dir it holds, with its pid, and removes it when it stops; ``ctl`` without ``--url`` uses the
address recorded by a live daemon on the config's log dirs (with a note when it differs from
the config's cleanerd.http.listen), else the config's address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import click

from cleanerd.cli import early_stop
from cleanerd.cli.config_cmd import check_engine, config_options, load_from_options, parse_sets
from cleanerd.config import LoadedConfig, load_config
from cleanerd.config_sources import join_listen
from cleanerd.service.daemon import Daemon, StartupError
from cleanerd.service.logging import configure_logging
from cleanerd.service.runner import run_async
from cleanerd.storage.errors import StorageError


@click.command()
@config_options
def run(config_file: Path | None, kafka_properties: Path | None, sets: tuple[str, ...]) -> None:
    """Run the compaction daemon on the configured log dirs (log.dirs, default ./data).

    Serves /metrics, /healthz, /status and the admin API on cleanerd.http.listen (default
    127.0.0.1:9404). SIGTERM/SIGINT: stop; SIGHUP: reload the config.
    """
    loaded = load_from_options(config_file, kafka_properties, sets)
    check_engine(loaded)
    configure_logging(loaded.config.log_format, loaded.config.log_level)
    for note in loaded.notes:
        click.echo(f"note: {note}", err=True)

    def reload() -> LoadedConfig:
        return load_config(
            config_file=config_file,
            kafka_properties=kafka_properties,
            overrides=parse_sets(sets),
        )

    async def daemon() -> int:
        running = Daemon(loaded, reload)
        recorder = asyncio.create_task(_record_address(running))
        try:
            return await running.run()
        finally:  # stopped: the process leaves with this code, whatever signal comes now
            early_stop.ignore()
            recorder.cancel()
            _forget_address(loaded.config.log_dirs)

    try:
        code = run_async(daemon)
    except (StartupError, StorageError) as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(1) from None
    raise SystemExit(code)


ADDRESS_FILE = ".cleanerd-http.json"
"""Where a running daemon records the address it bound, in each of its log dirs."""


async def _record_address(daemon: Daemon) -> None:
    """Once the daemon's HTTP port is bound, record its address for ``ctl`` (see the module
    doc). Best effort: a log dir that cannot take the file leaves ``ctl`` the config's address."""
    if daemon.loaded.config.http_host is None:
        return  # cleanerd.http.listen = off: nothing to record
    while daemon.http is None:  # bound early in start-up, before the daemon is ready
        await asyncio.sleep(0.05)
    record = {
        "pid": os.getpid(),
        "url": f"http://{join_listen(daemon.http.host, daemon.http.port)}",
    }
    for directory in daemon.loaded.config.log_dirs:
        tmp = directory / f"{ADDRESS_FILE}.tmp"
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(record) + "\n")
            tmp.replace(directory / ADDRESS_FILE)


def _forget_address(log_dirs: tuple[Path, ...]) -> None:
    """Remove the records this process wrote (not another daemon's, should one have started)."""
    for directory in log_dirs:
        path = directory / ADDRESS_FILE
        record = _read_record(path)
        if record is not None and record[0] == os.getpid():
            with contextlib.suppress(OSError):
                path.unlink()


def _read_record(path: Path) -> tuple[int, str] | None:
    try:
        record = json.loads(path.read_text())
        pid, url = record["pid"], record["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not isinstance(url, str):
        return None
    return pid, url


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (the service account's)
        return True
    return True


def recorded_address(log_dirs: tuple[Path, ...]) -> tuple[int, str] | None:
    """(pid, URL) a live daemon recorded in one of ``log_dirs``; None when none did."""
    for directory in log_dirs:
        record = _read_record(directory / ADDRESS_FILE)
        if record is not None and _alive(record[0]):
            return record
    return None


@click.group()
def ctl() -> None:
    """Ask a running daemon: status, or pause / resume / clean a partition."""


def _endpoint(
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    url: str | None,
    token: str | None,
) -> tuple[str, str | None]:
    loaded = load_from_options(config_file, kafka_properties, sets)
    c = loaded.config
    if url is None:
        configured = (
            None if c.http_host is None else f"http://{join_listen(c.http_host, c.http_port)}"
        )
        recorded = recorded_address(c.log_dirs)
        if recorded is not None:
            pid, url = recorded
            if url != configured:
                click.echo(
                    f"note: the daemon (pid {pid}) listens on {url}, not on "
                    f"{configured or 'nothing'} as the config now says "
                    "(cleanerd.http.listen changes need a restart)",
                    err=True,
                )
        elif configured is None:
            raise click.UsageError("cleanerd.http.listen is off: give --url")
        else:
            url = configured
    return url.rstrip("/"), token if token is not None else c.admin_token


def _request(url: str, token: str | None, method: str) -> dict[str, object]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body: dict[str, object] = json.loads(response.read())
            return body
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace").strip()
        click.echo(f"error: {method} {url}: HTTP {e.code}: {detail}", err=True)
        raise SystemExit(1) from None
    except (urllib.error.URLError, OSError) as e:
        click.echo(
            f"error: {method} {url}: {getattr(e, 'reason', e)} (is cleanerd running?)", err=True
        )
        raise SystemExit(1) from None


def _ctl_options(func: click.decorators.FC) -> click.decorators.FC:
    func = click.option("--token", help="Admin token [default: cleanerd.admin.token].")(func)
    func = click.option(
        "--url",
        help="Daemon URL [default: the address the daemon running on the config's log dirs "
        "recorded, else cleanerd.http.listen].",
    )(func)
    return config_options(func)


@ctl.command()
@_ctl_options
def status(
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    url: str | None,
    token: str | None,
) -> None:
    """Print the daemon's /status JSON."""
    base, token = _endpoint(config_file, kafka_properties, sets, url, token)
    click.echo(json.dumps(_request(f"{base}/status", token, "GET"), indent=2))


def _action(name: str) -> click.Command:
    @click.argument("topic")
    @click.argument("partition", type=click.IntRange(min=0))
    @_ctl_options
    def command(
        config_file: Path | None,
        kafka_properties: Path | None,
        sets: tuple[str, ...],
        url: str | None,
        token: str | None,
        topic: str,
        partition: int,
    ) -> None:
        base, token = _endpoint(config_file, kafka_properties, sets, url, token)
        quoted = urllib.parse.quote(topic, safe="")
        body = _request(f"{base}/partitions/{quoted}/{partition}/{name}", token, "POST")
        click.echo(json.dumps(body))

    command.__doc__ = {
        "pause": "Pause cleaning TOPIC PARTITION (a running cleaning is aborted).",
        "resume": "Resume TOPIC PARTITION; also clears its uncleanable mark.",
        "clean": "Clean TOPIC PARTITION at the next chance, whatever its dirty ratio.",
    }[name]
    return click.command(name)(command)


for _name in ("pause", "resume", "clean"):
    ctl.add_command(_action(_name))
