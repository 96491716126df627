"""The daemon's one HTTP port: Prometheus scrapes, health, readiness, status and admin actions.

Served by aiohttp inside the event loop, so handlers call the manager directly (it is only ever
used from the loop thread) and a scrape reads one fresh status. Admin actions change what the
daemon does, so they are refused unless the peer is loopback or sends the configured bearer
token; ``/status`` names every partition and its errors (paths included), so it follows the same
rule unless ``cleanerd.http.status.public`` is set. ``/metrics``, ``/healthz`` and ``/readyz``
stay open, as Prometheus and health checkers expect: ``/healthz`` is liveness (the manager loop
turns, the workers live), ``/readyz`` readiness (the first survey applied, the kernels loaded,
and healthy), its JSON body naming what is pending. Forwarding headers are ignored on purpose:
behind a reverse proxy on the same host every request looks local, so such a deployment should
set ``cleanerd.admin.token`` and not rely on loopback alone. No route takes a body; a request
body over ``MAX_BODY_BYTES`` is refused (413) before any handler runs. Snapshot listing and
download (KIP-630's FetchSnapshot) live in ``snapshot_routes`` and follow the admin rule.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from cleanerd.config import is_loopback_host
from cleanerd.scheduling import PartitionStatus
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.service._snapshot_routes import add_snapshot_routes
from cleanerd.service._status import DaemonStatus
from cleanerd.service._threads import Blocking, in_default_pool
from cleanerd.storage import StorageError, TopicPartition

ACTIONS = ("pause", "resume", "clean")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY_BYTES = 64 << 10
"""Largest request body read (no route needs one; the cap keeps a client from feeding it)."""
_PASSED = frozenset({"ok", "done", "loaded"})
"""The states of a passed readiness check (``AdminApi.readiness``); any other is pending."""
SHUTDOWN_TIMEOUT_S = 2.0
"""How long ``close()`` lets in-flight requests finish; scrapes and admin calls are quick."""


class AdminApi(Protocol):
    """What the HTTP layer needs from the daemon (None from an action = unknown partition)."""

    def status(self) -> DaemonStatus: ...

    def healthy(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, dict[str, str]]: ...

    # StorageError from an action: it took effect, but its record could not be written
    async def pause(self, tp: TopicPartition) -> PartitionStatus | None: ...

    async def resume(self, tp: TopicPartition) -> PartitionStatus | None: ...

    async def clean(self, tp: TopicPartition) -> PartitionStatus | None: ...


def is_trusted(peer_ip: str | None, auth_header: str | None, token: str | None) -> bool:
    """Loopback peers are trusted; anyone else needs ``Authorization: Bearer <token>``.

    Without a configured token, only loopback may act. The comparison is constant-time.
    """
    if peer_ip is not None and is_loopback_host(peer_ip):
        return True
    if not token or not auth_header:
        return False
    scheme, _, presented = auth_header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


def _json(body: Any, status: int = 200) -> web.Response:
    data = orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS)
    return web.Response(body=data, status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


@web.middleware
async def _cap_body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """413 for a body over ``MAX_BODY_BYTES`` (announced or streamed), before the handler."""
    announced = request.content_length
    too_big = announced is not None and announced > MAX_BODY_BYTES
    if not too_big and request.body_exists:
        try:
            await request.read()  # bounded by the application's client_max_size
        except web.HTTPRequestEntityTooLarge:
            too_big = True
    if too_big:
        return _error(413, f"request body over {MAX_BODY_BYTES} bytes")
    return await handler(request)


@dataclass(frozen=True)
class Access:
    """Who may do what: ``cleanerd.admin.token`` and ``cleanerd.http.status.public``."""

    token: str | None = None
    status_public: bool = False  # False: /status for loopback peers and token bearers only


def make_app(
    api: AdminApi,
    metrics: DaemonMetrics,
    access: Access | Callable[[], Access] = Access(),
    blocking: Blocking = in_default_pool,
) -> web.Application:
    """The application with every route; ``start_http`` serves it. ``access`` may be a
    function, read at each request, so a reloaded token applies at once; handlers' file reads
    go to ``blocking``."""
    current = access if callable(access) else lambda: access

    def trusted(request: web.Request) -> bool:
        token = current().token
        return is_trusted(request.remote, request.headers.get("Authorization"), token)

    async def get_metrics(_: web.Request) -> web.Response:
        body, content_type = metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def get_healthz(_: web.Request) -> web.Response:
        ok, reason = api.healthy()
        if ok:
            return web.Response(text="ok\n")
        return web.Response(text=f"{reason}\n", status=503)

    async def get_readyz(_: web.Request) -> web.Response:
        ready, checks = api.readiness()
        pending = [name for name, state in checks.items() if state not in _PASSED]
        return _json({"ready": ready, "pending": pending, **checks}, 200 if ready else 503)

    async def get_status(request: web.Request) -> web.Response:
        if not current().status_public and not trusted(request):
            return _error(
                403,
                "/status needs a loopback peer or the admin bearer token "
                "(cleanerd.http.status.public = false)",
            )
        return _json(api.status().to_json())

    async def post_action(request: web.Request) -> web.Response:
        if not trusted(request):
            return _error(403, "admin actions need a loopback peer or the admin bearer token")
        info = request.match_info
        tp = TopicPartition(info["topic"], int(info["partition"]))
        action = info["action"]
        try:
            status = await getattr(api, action)(tp)
        except StorageError as e:
            return _error(
                500,
                f"{action} {tp} took effect but was not recorded ({e}): a restart would undo it",
            )
        if status is None:
            return _error(404, f"unknown partition {tp}")
        state = "uncleanable" if status.uncleanable else status.state.value
        return _json({"partition": str(tp), "state": state})

    def find_partition(tp: TopicPartition) -> Path | None:
        found = (p.directory for p in api.status().partitions if p.tp == tp)
        return next(found, None)

    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_cap_body])
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", get_healthz)
    app.router.add_get("/readyz", get_readyz)
    app.router.add_get("/status", get_status)
    # The patterns make unknown actions and non-numeric partitions plain 404s; a GET on an
    # action path matches the resource but not the method, hence 405.
    app.router.add_post(
        "/partitions/{topic}/{partition:[0-9]{1,10}}/{action:" + "|".join(ACTIONS) + "}",
        post_action,
    )
    add_snapshot_routes(app, find_partition, trusted, _json, _error, blocking)
    return app


@dataclass
class HttpServer:
    """A running server: the port actually bound (useful with port 0) and how to stop it."""

    runner: web.AppRunner
    host: str
    port: int
    closed: bool = False

    async def close(self) -> None:
        """Stop serving (once: later calls do nothing)."""
        if not self.closed:
            self.closed = True
            await self.runner.cleanup()


async def serve_app(
    app: web.Application, host: str, port: int, tls: ssl.SSLContext | None = None
) -> HttpServer:
    """Bind ``app`` on host:port (OSError if the port is taken), over TLS with ``tls``; access
    log off."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=tls)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0]
    return HttpServer(runner=runner, host=host, port=int(bound[1]))


async def start_http(
    api: AdminApi,
    metrics: DaemonMetrics,
    host: str,
    port: int,
    access: Access | Callable[[], Access] = Access(),
    blocking: Blocking = in_default_pool,
    *,
    tls: ssl.SSLContext | None = None,
) -> HttpServer:
    """Serve metrics, health, readiness, status, admin actions and snapshots on host:port (0:
    any port), over TLS with ``tls`` (plain HTTP is then refused)."""
    return await serve_app(make_app(api, metrics, access, blocking), host, port, tls)
