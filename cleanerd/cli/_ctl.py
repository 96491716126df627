"""``cleanerd ctl``: a running daemon's admin API from the command line.

``ctl`` talks to a running daemon over its HTTP port (address and token from the same config
sources as ``run``, or ``--url`` and ``--token``). Without ``--url`` it uses the address a live
daemon recorded on the config's log dirs (``_daemon_address``), with a note when it differs from
the config's cleanerd.http.listen, else the config's address.

Over TLS (``https``, the scheme a daemon with ``cleanerd.http.tls.*`` records and the config
implies) ctl trusts that daemon's own certificate, the config's ``cleanerd.http.tls.cert.file``,
or with ``--cacert FILE`` the CAs in FILE (``config._tls`` says how each is checked).

``ready`` asks ``/readyz`` and exits 0 only when the daemon is ready, for scripts that wait for
a (re)started daemon; it finds the daemon as the other commands do. (The container's health
check asks ``/readyz`` with a bare Python one-liner instead: ``ctl`` loads the config, which
costs more CPU than a check every 30 s should.)
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import click

from cleanerd.cli._config import config_options, load_from_options
from cleanerd.cli._daemon_address import recorded_address
from cleanerd.config import CleanerdConfig, TlsError, client_context, join_listen


@click.group()
def ctl() -> None:
    """Ask a running daemon: status, readiness, or pause / resume / clean a partition."""


def _endpoint(
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    url: str | None,
    token: str | None,
    cacert: Path | None,
) -> tuple[str, str | None, ssl.SSLContext | None]:
    """(base URL, token, TLS context for an https URL)."""
    loaded = load_from_options(config_file, kafka_properties, sets)
    c = loaded.config
    if url is None:
        configured = (
            None
            if c.http_host is None
            else f"{c.http_scheme}://{join_listen(c.http_host, c.http_port)}"
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
    tls = _trust(c, cacert) if url.lower().startswith("https:") else None
    return url.rstrip("/"), token if token is not None else c.admin_token, tls


def _trust(c: CleanerdConfig, cacert: Path | None) -> ssl.SSLContext:
    """``--cacert``'s CAs, else the daemon's certificate from the config, else the system's."""
    try:
        return client_context(cacert, c.tls_cert_file)
    except (TlsError, OSError, ssl.SSLError) as e:
        where = f"--cacert {cacert}" if cacert is not None else "cleanerd.http.tls.cert.file"
        raise click.UsageError(f"{where}: {e}") from None


def _request(
    url: str, token: str | None, method: str, tls: ssl.SSLContext | None = None
) -> dict[str, object]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls) as response:
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
    func = click.option(
        "--cacert",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Trust the CAs in this PEM file for an https URL, checking the host name "
        "[default: the daemon's own certificate, cleanerd.http.tls.cert.file].",
    )(func)
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
    cacert: Path | None,
) -> None:
    """Print the daemon's /status JSON."""
    base, token, tls = _endpoint(config_file, kafka_properties, sets, url, token, cacert)
    click.echo(json.dumps(_request(f"{base}/status", token, "GET", tls), indent=2))


@ctl.command()
@_ctl_options
def ready(
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    url: str | None,
    token: str | None,
    cacert: Path | None,
) -> None:
    """Exit 0 when the daemon is ready (/readyz: first survey done, kernels loaded, healthy),
    else 1 with what is pending; for health checks."""
    base, token, tls = _endpoint(config_file, kafka_properties, sets, url, token, cacert)
    click.echo(json.dumps(_request(f"{base}/readyz", token, "GET", tls)))


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
        cacert: Path | None,
        topic: str,
        partition: int,
    ) -> None:
        base, token, tls = _endpoint(config_file, kafka_properties, sets, url, token, cacert)
        quoted = urllib.parse.quote(topic, safe="")
        body = _request(f"{base}/partitions/{quoted}/{partition}/{name}", token, "POST", tls)
        click.echo(json.dumps(body))

    command.__doc__ = {
        "pause": "Pause cleaning TOPIC PARTITION (a running cleaning is aborted); the pause is "
        "recorded in its log dir and outlives a restart.",
        "resume": "Resume TOPIC PARTITION; also clears its uncleanable mark.",
        "clean": "Clean TOPIC PARTITION at the next chance, whatever its dirty ratio.",
    }[name]
    return click.command(name)(command)


for _name in ("pause", "resume", "clean"):
    ctl.add_command(_action(_name))
