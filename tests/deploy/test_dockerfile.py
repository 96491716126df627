"""The Dockerfile read as text, no image built (``test_container.py`` builds and runs one): its
health check asks for readiness, on the port the shipped config listens on and the image
exposes, and passes or fails as it should against a daemon on plain HTTP and on TLS."""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import ssl
import sys
import threading
import tomllib
from pathlib import Path
from typing import ClassVar

import pytest

from cleanerd.config import load_config, parse_listen
from cleanerd.service import Daemon
from tests.support.polling import until
from tests.support.tls import self_signed

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
SHIPPED = REPO / "deploy" / "container" / "cleanerd.toml"


def _instruction(name: str) -> str:
    """The one instruction ``name`` with its continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found = re.findall(rf"^{name}\s+(.*)$", text, re.MULTILINE)
    assert len(found) == 1, found
    return str(found[0])


def _health_command() -> list[str]:
    healthcheck = _instruction("HEALTHCHECK")
    command: list[str] = json.loads(healthcheck.split("CMD", 1)[1])
    return command


def test_the_health_check_asks_readyz_on_the_shipped_port() -> None:
    command = _health_command()
    assert command[:2] == ["python3", "-c"]
    _, port = parse_listen(tomllib.loads(SHIPPED.read_text())["cleanerd"]["http"]["listen"])
    assert re.findall(r"'([0-9.]+:\d+/\w+)'", command[2]) == [f"127.0.0.1:{port}/readyz"]
    assert _instruction("EXPOSE") == f"{port}/tcp"


async def _check(port: int) -> int:
    """The exit status of the HEALTHCHECK's own command, asking ``port``."""
    code = _health_command()[2].replace(":9404/", f":{port}/")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    return await asyncio.wait_for(proc.wait(), 30)


@pytest.mark.asyncio
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_the_health_check_passes_on_a_ready_daemon_with_or_without_tls(
    tmp_path: Path, tls: bool
) -> None:
    """With TLS on the port the check asked plain HTTP and failed: the container was never
    healthy unless the operator overrode the check."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    overrides = {"log.dirs": str(logdir), "cleanerd.http.listen": "127.0.0.1:0"}
    if tls:
        cert, key = self_signed(tmp_path)
        overrides |= {"cleanerd.http.tls.cert.file": str(cert),
                      "cleanerd.http.tls.key.file": str(key)}  # fmt: skip
    loaded = load_config(env={}, overrides=overrides)
    daemon = Daemon(loaded, lambda: loaded)
    run = asyncio.create_task(daemon.run())
    try:
        await asyncio.wait_for(daemon.http_url(), 60)
        await until(lambda: daemon.ready)
        assert daemon.http is not None
        assert await _check(daemon.http.port) == 0
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0


class _NotReady(http.server.BaseHTTPRequestHandler):
    """Answers 503 to every GET, counting the connections it is given."""

    connections: ClassVar[list[str]] = []

    def setup(self) -> None:
        super().setup()
        self.connections.append(self.client_address[0])

    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.mark.asyncio
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_the_health_check_fails_on_a_503_and_on_a_closed_port(
    tmp_path: Path, tls: bool
) -> None:
    """An answer is the answer: a 503 over plain HTTP is not asked again over https (nor the
    other way round), and a port nobody listens on fails both ways."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotReady)
    if tls:
        cert, key = self_signed(tmp_path)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    port = server.server_address[1]
    _NotReady.connections.clear()
    try:
        assert await _check(port) == 1
        # plain HTTP: its 503 ends the check; TLS: the https attempt is the one that connects
        assert len(_NotReady.connections) == 1
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert await _check(port) == 1
