"""FetchSnapshot over HTTP: a running ``cleanerd run`` serves a partition's snapshots, and
``cleanerd snapshot fetch`` downloads one whole, by ranges, or resumed after a broken transfer,
always byte-identical; the access rule (loopback or token), 400, 403 and 404 are checked too."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from click.testing import CliRunner

from cleanerd.cli._snapshot import snapshot_group
from cleanerd.service import FetchError, fetch_snapshot
from cleanerd.service._http import Access, make_app, serve_app
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.service._snapshot_routes import (
    ID_HEADER,
    SIZE_HEADER,
    SnapshotFileResponse,
    file_etag,
)
from cleanerd.storage import parse_name
from tests.support.daemon_stub import OnePartition, remote_peer
from tests.support.e2e_support import DaemonProcess, free_port, write_config

TOKEN = "fetch-test-token"
TP = "/partitions/orders/0/snapshots"
TIMEOUT = aiohttp.ClientTimeout(total=30)


def _non_loopback_address() -> str | None:
    """An address of this machine other peers would use (no packet is sent), or None."""
    for probe in ("192.0.2.1", "10.255.255.255", "8.8.8.8"):
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((probe, 9))
            address: str = s.getsockname()[0]
            if not address.startswith("127.") and address != "0.0.0.0":
                return address
    return None


@dataclass
class Served:
    daemon: DaemonProcess
    partition: Path
    snapshot: Path
    remote: str | None  # the daemon's URL as seen from a non-loopback peer

    @property
    def sid(self) -> str:
        return self.snapshot.name.removesuffix(".checkpoint")

    def url(self, path: str, remote: bool = False) -> str:
        base = f"http://{self.remote}" if remote else self.daemon.base_url
        return base + path


def _get(
    url: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status), dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), dict(e.headers), e.read()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("fetch")
    logdir = tmp / "logs"
    subprocess.run(
        [sys.executable, "-m", "cleanerd", "gen", str(logdir), "--topic", "orders",
         "--partitions", "2", "--records", "20000", "--keys", "4000", "--value-bytes", "200"],
        check=True, capture_output=True,
    )  # fmt: skip
    partition = logdir / "orders-0"
    made = CliRunner().invoke(snapshot_group, ["create", "--format", "json", str(partition)])
    assert made.exit_code == 0, made.output
    snapshot = Path(json.loads(made.output)["path"])
    config = write_config(
        tmp,
        {"log.dirs": str(logdir), "log.cleanup.policy": "compact", "cleanerd.admin.token": TOKEN},
    )
    remote = _non_loopback_address()
    port = free_port()
    # every interface: 127.0.0.1 for loopback peers, the machine's own address for a remote one
    listen = f"0.0.0.0:{port}" if remote else f"127.0.0.1:{port}"
    args = ["--set", f"cleanerd.http.listen={listen}"]
    with DaemonProcess(config, tmp, port=port, extra_args=args) as daemon:
        yield Served(daemon, partition, snapshot, f"{remote}:{port}" if remote else None)


def test_listing_names_each_finished_snapshot(served: Served) -> None:
    part_only = served.partition / "checkpoints" / f"{'9' * 20}-{'0' * 10}.checkpoint.part"
    part_only.write_bytes(b"unfinished")
    try:
        status, _, body = _get(served.url(TP))
    finally:
        part_only.unlink()
    assert status == 200
    sid = parse_name(served.snapshot.name)
    assert sid is not None
    assert json.loads(body) == [
        {
            "id": served.sid,
            "end_offset": sid.end_offset,
            "epoch": sid.epoch,
            "bytes": served.snapshot.stat().st_size,
        }
    ]
    assert _get(served.url("/partitions/nosuch/0/snapshots"))[0] == 404


def test_full_download_with_the_cli(served: Served, tmp_path: Path) -> None:
    dest = tmp_path / "got"
    result = CliRunner().invoke(snapshot_group, ["fetch", served.url(TP), str(dest)])
    assert result.exit_code == 0, result.output
    got = dest / served.snapshot.name
    assert got.read_bytes() == served.snapshot.read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == [served.snapshot.name]  # no .part left


def test_ranged_requests_and_headers(served: Served) -> None:
    data = served.snapshot.read_bytes()
    sid = parse_name(served.snapshot.name)
    assert sid is not None
    url = served.url(f"{TP}/{served.sid}")
    status, headers, body = _get(url)
    assert (status, body) == (200, data)
    assert headers["X-Snapshot-Id"] == served.sid
    assert headers["X-Snapshot-End-Offset"] == str(sid.end_offset)
    assert headers["X-Snapshot-Epoch"] == str(sid.epoch)
    assert headers["X-Snapshot-Size"] == headers["Content-Length"] == str(len(data))
    assert headers["Accept-Ranges"] == "bytes"
    etag = headers["Etag"]

    status, headers, body = _get(url, {"Range": "bytes=1000-4999"})
    assert (status, body) == (206, data[1000:5000])
    assert headers["Content-Range"] == f"bytes 1000-4999/{len(data)}"
    assert headers["X-Snapshot-Size"] == str(len(data))
    # a range under the current ETag is honoured, under another one the whole file comes back
    assert _get(url, {"Range": "bytes=7-", "If-Range": etag})[::2] == (206, data[7:])
    assert _get(url, {"Range": "bytes=7-", "If-Range": '"stale-1"'})[::2] == (200, data)
    assert _get(url, {"Range": f"bytes={len(data)}-"})[0] == 416
    status, headers, body = _get(url, method="HEAD")
    assert (status, body, headers["X-Snapshot-Size"]) == (200, b"", str(len(data)))


async def _partial(url: str, part: Path, n: int) -> str:
    """Read ``n`` bytes of ``url`` into ``part`` and drop the connection; the ETag."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        resp = await session.get(url)
        part.write_bytes(await resp.content.readexactly(n))
        resp.close()  # a broken transfer: the rest is never read
        return resp.headers["ETag"]


@pytest.mark.asyncio
@pytest.mark.parametrize("keep_etag", [True, False])
async def test_interrupted_then_resumed(served: Served, tmp_path: Path, keep_etag: bool) -> None:
    data = served.snapshot.read_bytes()
    cut = len(data) // 3
    part = tmp_path / f"{served.sid}.checkpoint.part"
    etag = await _partial(served.url(f"{TP}/{served.sid}"), part, cut)
    if keep_etag:
        Path(f"{part}.etag").write_text(etag + "\n")
    heard: list[str] = []
    got = await fetch_snapshot(served.url(TP), tmp_path, report=heard.append)
    assert any(f"resumed at byte {cut} (206)" in line for line in heard), heard
    assert got == tmp_path / served.snapshot.name
    assert got.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [served.snapshot.name]


@pytest.mark.asyncio
async def test_a_part_of_another_file_starts_over(served: Served, tmp_path: Path) -> None:
    part = tmp_path / f"{served.sid}.checkpoint.part"
    part.write_bytes(b"x" * 500)
    Path(f"{part}.etag").write_text('"an-older-file"\n')
    heard: list[str] = []
    got = await fetch_snapshot(served.url(f"{TP}/{served.sid}"), tmp_path, report=heard.append)
    assert any("restarting (200)" in line for line in heard), heard
    assert got.read_bytes() == served.snapshot.read_bytes()


def test_missing_and_malformed_ids(served: Served, tmp_path: Path) -> None:
    missing = f"{1:020d}-{0:010d}"
    status, _, body = _get(served.url(f"{TP}/{missing}"))
    assert status == 404
    assert missing in json.loads(body)["error"]
    for bad in ("latest", f"{served.sid}.checkpoint", f"{served.sid}.checkpoint.part", "..%2F.."):
        assert _get(served.url(f"{TP}/{bad}"))[0] in (400, 404), bad
    assert _get(served.url(f"{TP}/latest"))[0] == 400
    result = CliRunner().invoke(
        snapshot_group, ["fetch", served.url(f"{TP}/{missing}"), str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "HTTP 404" in result.output
    assert missing in result.output


def test_a_corrupt_snapshot_is_not_installed(served: Served, tmp_path: Path) -> None:
    bad = served.partition / "checkpoints" / f"{2:020d}-{0:010d}.checkpoint"
    data = bytearray(served.snapshot.read_bytes())
    data[200] ^= 0xFF
    bad.write_bytes(bytes(data))
    try:
        url = served.url(f"{TP}/{bad.name.removesuffix('.checkpoint')}")
        result = CliRunner().invoke(snapshot_group, ["fetch", url, str(tmp_path / "d")])
    finally:
        bad.unlink()
    assert result.exit_code == 1
    assert "not a valid snapshot" in result.output
    assert url in result.output
    assert list((tmp_path / "d").iterdir()) == []  # the part file went too


@pytest.mark.asyncio
async def test_remote_peers_need_the_token(served: Served, tmp_path: Path) -> None:
    if served.remote is None:
        pytest.skip("this machine has no non-loopback address (the in-process test covers it)")
    listing = served.url(TP, remote=True)
    assert _get(listing)[0] == 403
    assert _get(listing, {"Authorization": "Bearer wrong"})[0] == 403
    file_url = served.url(f"{TP}/{served.sid}", remote=True)
    status, _, body = _get(file_url, {"Authorization": "Bearer wrong"})
    assert status == 403
    assert b"token" in body
    with pytest.raises(FetchError, match="HTTP 403"):
        await fetch_snapshot(listing, tmp_path, token="wrong")
    got = await fetch_snapshot(listing, tmp_path, token=TOKEN)
    assert got.read_bytes() == served.snapshot.read_bytes()


# --- the access rule in process, with a faked remote peer (no second address needed) --------------
@pytest_asyncio.fixture
async def remote_app(served: Served) -> AsyncIterator[str]:
    api = OnePartition(served.partition)
    app = make_app(api, DaemonMetrics(api.status), Access(TOKEN))
    app.middlewares.insert(0, remote_peer)
    srv = await serve_app(app, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{srv.port}"
    await srv.close()


@pytest.mark.asyncio
async def test_fake_remote_peer_needs_the_token(
    remote_app: str, served: Served, tmp_path: Path
) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            for path in (TP, f"{TP}/{served.sid}", f"{TP}/not-an-id"):
                async with session.get(remote_app + path, headers=headers) as resp:
                    assert resp.status == 403, path
        ok = {"Authorization": f"Bearer {TOKEN}"}
        async with session.get(f"{remote_app}{TP}/not-an-id", headers=ok) as resp:
            assert resp.status == 400
            assert "not-an-id" in (await resp.json())["error"]
    got = await fetch_snapshot(remote_app + TP, tmp_path, token=TOKEN)
    assert got.read_bytes() == served.snapshot.read_bytes()


@pytest.mark.asyncio
async def test_a_transfer_broken_mid_run_resumes_in_the_same_run(
    served: Served, tmp_path: Path
) -> None:
    """The first answer stops after a third of the file; the client asks for the rest."""
    data = served.snapshot.read_bytes()
    cut = len(data) // 3
    etag = file_etag(served.snapshot.stat())
    ranges: list[str | None] = []
    part = tmp_path / f"{served.sid}.checkpoint.part"

    async def flaky(request: web.Request) -> web.StreamResponse:
        ranges.append(request.headers.get("Range"))
        headers = {ID_HEADER: served.sid, SIZE_HEADER: str(len(data))}
        if len(ranges) > 1:
            return SnapshotFileResponse(served.snapshot, etag, headers)
        resp = web.StreamResponse(headers={**headers, "ETag": etag})
        resp.content_length = len(data)
        await resp.prepare(request)
        await resp.write(data[:cut])
        # break the link only once the client has written something: a connection closed
        # before the client reads drops aiohttp's buffer, and the retry would start at 0
        for _ in range(3000):
            if part.exists() and part.stat().st_size > 0:
                break
            await asyncio.sleep(0.01)
        assert request.transport is not None
        request.transport.close()
        return resp

    app = web.Application()
    app.router.add_get(f"{TP}/{{id}}", flaky)
    srv = await serve_app(app, "127.0.0.1", 0)
    try:
        heard: list[str] = []
        url = f"http://127.0.0.1:{srv.port}{TP}/{served.sid}"
        got = await fetch_snapshot(url, tmp_path, report=heard.append)
    finally:
        await srv.close()
    assert ranges[0] is None
    assert len(ranges) == 2
    resumed_at = int(str(ranges[1]).removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= cut
    assert any("transfer broken" in line for line in heard), heard
    assert any(f"resumed at byte {resumed_at} (206)" in line for line in heard), heard
    assert got.read_bytes() == data


def test_a_complete_part_file_is_installed_without_a_new_transfer(
    served: Served, tmp_path: Path
) -> None:
    """Cut off after the last byte but before the rename: the server answers 416, the part
    file is checked and installed."""
    (tmp_path / f"{served.sid}.checkpoint.part").write_bytes(served.snapshot.read_bytes())
    result = CliRunner().invoke(snapshot_group, ["fetch", served.url(TP), str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "already holds all" in result.output
    got = tmp_path / served.snapshot.name
    assert got.read_bytes() == served.snapshot.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [served.snapshot.name]


def test_no_snapshot_yet_and_not_a_snapshot_url(served: Served, tmp_path: Path) -> None:
    other = "/partitions/orders/1/snapshots"  # a partition the daemon has, with no snapshot
    assert _get(served.url(other))[::2] == (200, b"[]")
    result = CliRunner().invoke(snapshot_group, ["fetch", served.url(other), str(tmp_path)])
    assert result.exit_code == 1
    assert "has no snapshot" in result.output
    result = CliRunner().invoke(
        snapshot_group, ["fetch", served.url("/partitions/orders/0"), str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "not a snapshot URL" in result.output
    assert list(tmp_path.iterdir()) == []


def test_nothing_listening_is_a_clear_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}{TP}"
    result = CliRunner().invoke(snapshot_group, ["fetch", url, str(tmp_path / "d")])
    assert result.exit_code == 1
    assert f"error: {url}: " in result.output
