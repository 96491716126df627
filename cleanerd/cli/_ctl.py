"""``cleanerd ctl``: a running daemon's admin API from the command line.

``ctl`` talks to a running daemon over its HTTP port (address and token from the same config
sources as ``run``, or ``--url`` and ``--token``). Without ``--url`` it uses the address a live
daemon recorded on the config's log dirs (``_daemon_address``), with a note when it differs from
the config's cleanerd.http.listen, else the config's address.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import click

from cleanerd.cli._config import config_options, load_from_options
from cleanerd.cli._daemon_address import recorded_address
from cleanerd.config import join_listen


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
