"""KIP-630's FetchSnapshot over the daemon's HTTP port: list a partition's snapshots, serve one.

Kafka's FetchSnapshot hands out a snapshot in position-addressed chunks so that a follower can
resume; HTTP ranges give the same thing, and ``web.FileResponse`` serves them with sendfile from
the loop without reading the file into Python. The id in the URL is the file name stem
(``<end offset, 20 digits>-<epoch, 10 digits>``) and nothing else, so no request can name a path
outside ``checkpoints/`` or an unfinished ``.part`` file; and only a regular file of that name is
listed or served (``storage._regular.open_regular``), never what a symlink points at or a FIFO. A
snapshot holds every live record of a partition, so these routes follow the admin rule
(loopback peer or bearer token).

aiohttp honours ``If-Range`` only as a date; a resuming client sends the ETag instead, so a stale
ETag is handled here: the Range header is dropped and the whole file comes back with 200.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.web_request import BaseRequest

from cleanerd.service._threads import Blocking, in_default_pool
from cleanerd.storage import (
    SNAPSHOT_FILE_SUFFIX,
    SnapshotId,
    TopicPartition,
    list_snapshots,
    open_regular,
    parse_name,
    snapshot_path,
)

END_OFFSET_HEADER = "X-Snapshot-End-Offset"
EPOCH_HEADER = "X-Snapshot-Epoch"
ID_HEADER = "X-Snapshot-Id"
SIZE_HEADER = "X-Snapshot-Size"
"""The whole file's size (``Content-Length`` is the range's on a 206)."""

Reply = Callable[[int, str], web.Response]
FindPartition = Callable[[TopicPartition], Path | None]


def file_etag(st: os.stat_result) -> str:
    """The strong ETag of a file, quoted: the same value ``web.FileResponse`` sends.

    Modification time and size change when a snapshot of the same id is deleted and written
    again, so a resume never splices two different files together.
    """
    return f'"{st.st_mtime_ns:x}-{st.st_size:x}"'


def _stale_if_range(value: str | None, etag: str) -> bool:
    """True for an ``If-Range`` ETag that is not ``etag`` (dates are left to aiohttp)."""
    if value is None:
        return False
    value = value.strip()
    if not value.startswith(('"', "W/")):
        return False
    return value != etag  # a weak ETag never matches for If-Range (RFC 9110 13.1.5)


class SnapshotFileResponse(web.FileResponse):
    """A file response that ignores ``Range`` when ``If-Range`` names another ETag."""

    def __init__(self, path: Path, etag: str, headers: dict[str, str]) -> None:
        super().__init__(path, headers=headers)
        self._expected_etag = etag

    async def prepare(self, request: BaseRequest) -> AbstractStreamWriter | None:
        if hdrs.RANGE in request.headers and _stale_if_range(
            request.headers.get(hdrs.IF_RANGE), self._expected_etag
        ):
            headers = request.headers.copy()
            del headers[hdrs.RANGE]
            request = request.clone(headers=headers)
        return await super().prepare(request)


def regular_stat(path: Path) -> os.stat_result:
    """The stat of ``path`` when it is a regular file itself (``open_regular``'s rule);
    ``OSError`` (``NotRegularFileError`` for a symlink, FIFO, ...) otherwise."""
    fd = open_regular(path)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _listing(directory: Path) -> list[dict[str, Any]]:
    """Finished snapshots, oldest first, with their sizes (a file deleted or replaced by
    something else meanwhile is left out)."""
    rows = []
    for sid, path in list_snapshots(directory):
        try:
            size = regular_stat(path).st_size
        except OSError:
            continue
        rows.append(
            {
                "id": snapshot_name(sid),
                "end_offset": sid.end_offset,
                "epoch": sid.epoch,
                "bytes": size,
            }
        )
    return rows


def snapshot_name(sid: SnapshotId) -> str:
    """The id as URLs and listings carry it: the file name without ``.checkpoint``."""
    return sid.file_name(SNAPSHOT_FILE_SUFFIX).removesuffix(SNAPSHOT_FILE_SUFFIX)


def add_snapshot_routes(
    app: web.Application,
    find_partition: FindPartition,
    trusted: Callable[[web.Request], bool],
    json_reply: Callable[[Any], web.Response],
    error: Reply,
    blocking: Blocking = in_default_pool,
) -> None:
    """``GET /partitions/{topic}/{partition}/snapshots[/{id}]`` on ``app``; the file reads go
    to ``blocking`` (the daemon's service threads)."""

    def partition_dir(request: web.Request) -> Path | web.Response:
        if not trusted(request):
            return error(403, "snapshots need a loopback peer or the admin bearer token")
        info = request.match_info
        tp = TopicPartition(info["topic"], int(info["partition"]))
        directory = find_partition(tp)
        if directory is None:
            return error(404, f"unknown partition {tp}")
        return directory

    async def list_route(request: web.Request) -> web.Response:
        directory = partition_dir(request)
        if isinstance(directory, web.Response):
            return directory
        return json_reply(await blocking(_listing, directory))

    async def file_route(request: web.Request) -> web.StreamResponse:
        directory = partition_dir(request)
        if isinstance(directory, web.Response):
            return directory
        name = request.match_info["id"]
        sid = parse_name(name + SNAPSHOT_FILE_SUFFIX)
        if sid is None:
            return error(
                400, f"bad snapshot id {name!r}: want <20-digit end offset>-<10-digit epoch>"
            )
        path = snapshot_path(directory, sid)
        try:
            st = await blocking(regular_stat, path)
        except OSError:  # missing, or a symlink, FIFO, ... under a snapshot's name
            return error(404, f"no snapshot {name} in {directory.name}")
        etag = file_etag(st)
        headers = {
            ID_HEADER: name,
            END_OFFSET_HEADER: str(sid.end_offset),
            EPOCH_HEADER: str(sid.epoch),
            SIZE_HEADER: str(st.st_size),
            hdrs.CONTENT_TYPE: "application/octet-stream",
        }
        return SnapshotFileResponse(path, etag, headers)

    base = "/partitions/{topic}/{partition:[0-9]{1,10}}/snapshots"
    app.router.add_get(base, list_route)
    app.router.add_get(base + "/{id}", file_route)
