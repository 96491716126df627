"""The HTTP port as a client sees it: a real server on 127.0.0.1:0 over a fake daemon."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from cleanerd.config import client_context
from cleanerd.config._tls import server_context
from cleanerd.scheduling import CleaningState, PartitionStatus
from cleanerd.service import DaemonStatus
from cleanerd.service._http import (
    MAX_BODY_BYTES,
    Access,
    HttpServer,
    is_trusted,
    make_app,
    serve_app,
    start_http,
)
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.storage import StorageError, TopicPartition
from tests.support.daemon_stub import remote_peer
from tests.support.tls import self_signed

TOKEN = "s3cret-token"
TIMEOUT = aiohttp.ClientTimeout(total=10)


class FakeDaemon:
    """An AdminApi over two partitions; records the actions it was asked for."""

    def __init__(self) -> None:
        self.partitions = {
            TopicPartition("orders", 0): PartitionStatus(
                TopicPartition("orders", 0),
                Path("/d"),
                Path("/d/orders-0"),
                compacted=True,
                dirty_ratio=0.5,
            ),
            TopicPartition("users.v2", 3): PartitionStatus(
                TopicPartition("users.v2", 3),
                Path("/d"),
                Path("/d/users.v2-3"),
                compacted=True,
                uncleanable=True,
                last_error="boom",
            ),
        }
        self.health = (True, "")
        self.ready: tuple[bool, dict[str, str]] = (True, {"kernels": "loaded", "health": "ok"})
        self.record_error: str | None = None  # a pause's record cannot be written
        self.calls: list[tuple[str, TopicPartition]] = []

    def status(self) -> DaemonStatus:
        return DaemonStatus(
            now_ms=1000,
            partitions=tuple(dataclasses.replace(p) for p in self.partitions.values()),
            ready=True,
        )

    def healthy(self) -> tuple[bool, str]:
        return self.health

    def _act(self, action: str, tp: TopicPartition, state: CleaningState) -> PartitionStatus | None:
        self.calls.append((action, tp))
        status = self.partitions.get(tp)
        if status is not None:
            status.state = state
        return status

    def readiness(self) -> tuple[bool, dict[str, str]]:
        return self.ready

    async def pause(self, tp: TopicPartition) -> PartitionStatus | None:
        status = self._act("pause", tp, CleaningState.PAUSED)
        if self.record_error is not None:
            raise StorageError(self.record_error)
        return status

    async def resume(self, tp: TopicPartition) -> PartitionStatus | None:
        return self._act("resume", tp, CleaningState.IDLE)

    async def clean(self, tp: TopicPartition) -> PartitionStatus | None:
        return self._act("clean", tp, CleaningState.IDLE)


@pytest.fixture
def daemon() -> FakeDaemon:
    return FakeDaemon()


@pytest_asyncio.fixture
async def server(daemon: FakeDaemon) -> AsyncIterator[HttpServer]:
    srv = await start_http(daemon, DaemonMetrics(daemon.status), "127.0.0.1", 0, Access(TOKEN))
    yield srv
    await srv.close()


@pytest_asyncio.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield session


def _url(srv: HttpServer, path: str) -> str:
    return f"http://127.0.0.1:{srv.port}{path}"


@pytest.mark.asyncio
async def test_binds_a_real_port(server: HttpServer) -> None:
    assert server.port > 0


@pytest.mark.asyncio
async def test_metrics_endpoint(server: HttpServer, client: aiohttp.ClientSession) -> None:
    async with client.get(_url(server, "/metrics")) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    dirty = families["cleanerd_partition_dirty_ratio"].samples
    assert {(s.labels["topic"], s.labels["partition"], s.value) for s in dirty} == {
        ("orders", "0", 0.5),
        ("users.v2", "3", 0.0),
    }
    assert families["cleanerd_uncleanable_partitions"].samples[0].value == 1


@pytest.mark.asyncio
async def test_healthz_ok_and_503(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon
) -> None:
    async with client.get(_url(server, "/healthz")) as resp:
        assert (resp.status, await resp.text()) == (200, "ok\n")
    daemon.health = (False, "worker 1 is dead")
    async with client.get(_url(server, "/healthz")) as resp:
        assert resp.status == 503
        assert "worker 1 is dead" in await resp.text()


@pytest.mark.asyncio
async def test_readyz_is_200_when_ready_else_503_naming_what_is_pending(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon
) -> None:
    async with client.get(_url(server, "/readyz")) as resp:
        assert resp.status == 200
        assert await resp.json() == {
            "ready": True,
            "pending": [],
            "kernels": "loaded",
            "health": "ok",
        }
    daemon.ready = (False, {"survey": "done", "kernels": "loading", "health": "ok"})
    async with client.get(_url(server, "/readyz")) as resp:
        assert resp.status == 503
        body = await resp.json()
    assert body["pending"] == ["kernels"]
    assert (body["ready"], body["kernels"]) == (False, "loading")


@pytest.mark.asyncio
async def test_readyz_is_open_to_remote_peers(
    remote_server: HttpServer, client: aiohttp.ClientSession
) -> None:
    async with client.get(_url(remote_server, "/readyz")) as resp:
        assert resp.status == 200


@pytest.mark.asyncio
async def test_a_pause_that_could_not_be_recorded_is_a_500_saying_so(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon
) -> None:
    daemon.record_error = "/d/cleanerd-paused.json: cannot write: No space left on device"
    async with client.post(_url(server, "/partitions/orders/0/pause")) as resp:
        assert resp.status == 500
        error = (await resp.json())["error"]
    assert error.startswith("pause orders-0 took effect but was not recorded (/d/cleanerd-paused")
    assert error.endswith("a restart would undo it")


@pytest.mark.asyncio
async def test_with_tls_it_serves_https_and_refuses_plain_http(
    daemon: FakeDaemon, client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    tls = server_context(cert, key)
    srv = await start_http(daemon, DaemonMetrics(daemon.status), "127.0.0.1", 0, tls=tls)
    try:
        trust = client_context(pinned=cert)
        url = f"https://127.0.0.1:{srv.port}"
        async with client.get(f"{url}/healthz", ssl=trust) as resp:
            assert (resp.status, await resp.text()) == (200, "ok\n")
        async with client.post(f"{url}/partitions/orders/0/pause", ssl=trust) as resp:
            assert (await resp.json())["state"] == "paused"
        with pytest.raises(aiohttp.ClientError):  # no plain HTTP on a TLS port
            async with client.get(_url(srv, "/healthz")) as resp:
                await resp.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):  # an unknown certificate
            async with client.get(f"{url}/healthz") as resp:
                await resp.read()
    finally:
        await srv.close()


@pytest.mark.asyncio
async def test_status_json(server: HttpServer, client: aiohttp.ClientSession) -> None:
    async with client.get(_url(server, "/status")) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["ready"] is True
    assert body["uncleanable_partitions"] == 1
    by_tp = {p["tp"]: p for p in body["partitions"]}
    assert by_tp["orders-0"]["dirty_ratio"] == 0.5
    assert by_tp["users.v2-3"]["state"] == "uncleanable"
    assert by_tp["users.v2-3"]["last_error"] == "boom"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("action", "state"), [("pause", "paused"), ("resume", "idle"), ("clean", "idle")]
)
async def test_admin_actions_from_loopback(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon, action: str, state: str
) -> None:
    async with client.post(_url(server, f"/partitions/orders/0/{action}")) as resp:
        assert resp.status == 200
        assert await resp.json() == {"partition": "orders-0", "state": state}
    assert daemon.calls == [(action, TopicPartition("orders", 0))]


@pytest.mark.asyncio
async def test_admin_action_reports_uncleanable(
    server: HttpServer, client: aiohttp.ClientSession
) -> None:
    async with client.post(_url(server, "/partitions/users.v2/3/pause")) as resp:
        assert await resp.json() == {"partition": "users.v2-3", "state": "uncleanable"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "path",
    [
        "/partitions/nope/0/pause",
        "/partitions/orders/7/clean",
        "/partitions/orders/0/explode",
        "/partitions/orders/x/pause",
        "/nowhere",
    ],
)
async def test_not_found(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon, path: str
) -> None:
    async with client.post(_url(server, path)) as resp:
        assert resp.status == 404
    assert all(tp.topic != "orders" or tp.partition != 0 for _, tp in daemon.calls)


@pytest.mark.asyncio
async def test_unknown_partition_is_a_json_404(
    server: HttpServer, client: aiohttp.ClientSession
) -> None:
    async with client.post(_url(server, "/partitions/nope/0/resume")) as resp:
        assert resp.status == 404
        assert "nope-0" in (await resp.json())["error"]


@pytest.mark.asyncio
async def test_get_on_admin_path_is_405(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon
) -> None:
    async with client.get(_url(server, "/partitions/orders/0/pause")) as resp:
        assert resp.status == 405
    assert daemon.calls == []


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_loopback_peers_are_trusted(peer: str) -> None:
    assert is_trusted(peer, None, None)
    assert is_trusted(peer, "Bearer wrong", TOKEN)


@pytest.mark.parametrize(
    "peer",
    ["10.0.0.5", "192.168.1.2", "2001:db8::1", "::ffff:10.0.0.1", "0.0.0.0", "not-an-ip", None],
)
def test_remote_peers_need_the_token(peer: str | None) -> None:
    assert not is_trusted(peer, None, None)
    assert not is_trusted(peer, None, TOKEN)
    assert not is_trusted(peer, f"Bearer {TOKEN}", None)  # no token configured: loopback only
    assert not is_trusted(peer, f"Bearer {TOKEN}", "")
    assert not is_trusted(peer, "Bearer wrong", TOKEN)
    assert not is_trusted(peer, f"Basic {TOKEN}", TOKEN)
    assert not is_trusted(peer, "Bearer", TOKEN)
    assert not is_trusted(peer, f"Bearer {TOKEN}x", TOKEN)
    assert is_trusted(peer, f"Bearer {TOKEN}", TOKEN)
    assert is_trusted(peer, f"bearer  {TOKEN} ", TOKEN)


@pytest_asyncio.fixture
async def remote_server(daemon: FakeDaemon) -> AsyncIterator[HttpServer]:
    app = make_app(daemon, DaemonMetrics(daemon.status), Access(TOKEN))
    app.middlewares.insert(0, remote_peer)
    srv = await serve_app(app, "127.0.0.1", 0)
    yield srv
    await srv.close()


@pytest.mark.asyncio
async def test_remote_admin_refused_without_token(
    remote_server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon
) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}):
        async with client.post(
            _url(remote_server, "/partitions/orders/0/pause"), headers=headers
        ) as resp:
            assert resp.status == 403
            assert "token" in (await resp.json())["error"]
    assert daemon.calls == []


@pytest.mark.asyncio
async def test_remote_admin_with_token(
    remote_server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon
) -> None:
    async with client.post(
        _url(remote_server, "/partitions/orders/0/pause"),
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as resp:
        assert resp.status == 200
        assert (await resp.json())["state"] == "paused"
    assert daemon.calls == [("pause", TopicPartition("orders", 0))]


@pytest.mark.asyncio
async def test_port_in_use_raises(server: HttpServer, daemon: FakeDaemon) -> None:
    with pytest.raises(OSError, match="in use"):
        await start_http(daemon, DaemonMetrics(daemon.status), "127.0.0.1", server.port)


@pytest.mark.asyncio
async def test_close_frees_the_port(daemon: FakeDaemon) -> None:
    srv = await start_http(daemon, DaemonMetrics(daemon.status), "127.0.0.1", 0)
    port = srv.port
    await srv.close()
    again = await start_http(daemon, DaemonMetrics(daemon.status), "127.0.0.1", port)
    assert again.port == port
    await again.close()


async def _remote(daemon: FakeDaemon, *, status_public: bool = False) -> HttpServer:
    app = make_app(daemon, DaemonMetrics(daemon.status), Access(TOKEN, status_public))
    app.middlewares.insert(0, remote_peer)
    return await serve_app(app, "127.0.0.1", 0)


@pytest.mark.asyncio
async def test_status_is_refused_to_remote_peers_without_the_token(
    remote_server: HttpServer, client: aiohttp.ClientSession
) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}):
        async with client.get(_url(remote_server, "/status"), headers=headers) as resp:
            assert resp.status == 403
            assert "cleanerd.http.status.public" in (await resp.json())["error"]
    async with client.get(
        _url(remote_server, "/status"), headers={"Authorization": f"Bearer {TOKEN}"}
    ) as resp:
        assert resp.status == 200
        assert (await resp.json())["uncleanable_partitions"] == 1
    # what Prometheus and health checkers need stays open
    async with client.get(_url(remote_server, "/metrics")) as resp:
        assert resp.status == 200
    async with client.get(_url(remote_server, "/healthz")) as resp:
        assert resp.status == 200


@pytest.mark.asyncio
async def test_status_public_opens_status_to_everyone(
    daemon: FakeDaemon, client: aiohttp.ClientSession
) -> None:
    srv = await _remote(daemon, status_public=True)
    try:
        async with client.get(_url(srv, "/status")) as resp:
            assert resp.status == 200
        async with client.post(_url(srv, "/partitions/orders/0/pause")) as resp:
            assert resp.status == 403  # admin actions still need the token
    finally:
        await srv.close()
    assert daemon.calls == []


@pytest.mark.asyncio
@pytest.mark.parametrize("chunked", [False, True])
async def test_request_bodies_are_capped(
    server: HttpServer, client: aiohttp.ClientSession, daemon: FakeDaemon, chunked: bool
) -> None:
    big = b"x" * (MAX_BODY_BYTES + 1)

    async def stream() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    body = stream() if chunked else big
    async with client.post(_url(server, "/partitions/orders/0/pause"), data=body) as resp:
        assert resp.status == 413
        assert str(MAX_BODY_BYTES) in (await resp.json())["error"]
    assert daemon.calls == []
    small = b"x" * 100  # a small body is read and ignored
    async with client.post(_url(server, "/partitions/orders/0/pause"), data=small) as resp:
        assert resp.status == 200
    assert daemon.calls == [("pause", TopicPartition("orders", 0))]


@pytest.mark.asyncio
async def test_access_rules_are_read_at_each_request(
    daemon: FakeDaemon, client: aiohttp.ClientSession
) -> None:
    """The daemon passes a function, so a SIGHUP that changes the token applies at once."""
    rules = [Access("old-token")]
    app = make_app(daemon, DaemonMetrics(daemon.status), lambda: rules[-1])
    app.middlewares.insert(0, remote_peer)
    srv = await serve_app(app, "127.0.0.1", 0)
    try:
        new = {"Authorization": "Bearer new-token"}
        async with client.get(_url(srv, "/status"), headers=new) as resp:
            assert resp.status == 403
        rules.append(Access("new-token"))
        async with client.get(_url(srv, "/status"), headers=new) as resp:
            assert resp.status == 200
        rules.append(Access(None, status_public=True))
        async with client.get(_url(srv, "/status")) as resp:
            assert resp.status == 200
    finally:
        await srv.close()
