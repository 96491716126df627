"""The FetchSnapshot client: download a snapshot from a daemon, resumably, and install it.

A snapshot can be large and the link between two hosts can break, so the download goes to
``<id>.checkpoint.part`` and a later attempt (in the same run or the next) asks only for what is
missing (``Range: bytes=<part size>-``). The server's ETag is kept beside the part file
(``<id>.checkpoint.part.etag``) and sent back as ``If-Range``: if the snapshot was replaced
meanwhile the server answers with the whole new file (200) and the part starts over, so two
different files are never spliced. Only a file whose CRCs, header and footer check out gets the
``.checkpoint`` name, after an fsync, by rename, with the directory fsynced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import aiofiles
import aiohttp
from yarl import URL

from cleanerd.service.snapshot_routes import ID_HEADER, SIZE_HEADER, snapshot_name
from cleanerd.snapshot.format import SnapshotError, SnapshotReader
from cleanerd.storage.checkpoints import fsync_dir
from cleanerd.storage.snapshot_files import PART_SUFFIX, SUFFIX, parse_name

CHUNK_BYTES = 1 << 20
ATTEMPTS = 3
"""Tries per run; each one resumes where the part file ends."""
RETRY_PAUSE_S = 0.5
ETAG_SUFFIX = ".etag"
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
Report = Callable[[str], None]


class FetchError(Exception):
    """A download that cannot succeed as asked; the message names the URL and why."""


def _ignore(_: str) -> None:
    pass


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _refused(resp: aiohttp.ClientResponse) -> FetchError:
    """A FetchError with the server's own error message when it sent one."""
    try:
        body: Any = await resp.json(content_type=None)
        why = body.get("error") if isinstance(body, dict) else None
    except (ValueError, aiohttp.ClientError):
        why = None
    why = why or resp.reason or "error"
    return FetchError(f"{resp.url}: HTTP {resp.status}: {why}")


async def _resolve(session: aiohttp.ClientSession, url: URL, token: str | None) -> URL:
    """The file URL: ``url`` itself, or the newest snapshot of a ``.../snapshots`` listing."""
    segments = [s for s in url.path.split("/") if s]
    if segments and segments[-1] == "snapshots":
        async with session.get(url, headers=_headers(token)) as resp:
            if resp.status != 200:
                raise await _refused(resp)
            rows = await resp.json()
        if not isinstance(rows, list):
            raise FetchError(f"{url}: the answer is not a snapshot listing")
        if not rows:
            raise FetchError(f"{url}: the partition has no snapshot")
        try:
            newest = max(rows, key=lambda r: (int(r["end_offset"]), int(r["epoch"])))
            return url.with_path(url.path.rstrip("/") + "/" + str(newest["id"]))
        except (KeyError, TypeError, ValueError):
            raise FetchError(f"{url}: the answer is not a snapshot listing") from None
    if len(segments) >= 2 and segments[-2] == "snapshots" and parse_name(segments[-1] + SUFFIX):
        return url
    raise FetchError(
        f"{url}: not a snapshot URL (want .../partitions/<topic>/<partition>/snapshots "
        "or .../snapshots/<20-digit end offset>-<10-digit epoch>)"
    )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _unlink(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _read_etag(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


async def _attempt(
    session: aiohttp.ClientSession,
    url: URL,
    token: str | None,
    part: Path,
    etag_file: Path,
    report: Report,
) -> int | None:
    """One request, appended to (206) or replacing (200) the part file: the file's full size
    (-1 when the server does not say it), or None when the part file must start over."""
    have = await asyncio.to_thread(_size, part)
    headers = _headers(token)
    if have:
        headers["Range"] = f"bytes={have}-"
        etag = await asyncio.to_thread(_read_etag, etag_file)
        if etag:
            headers["If-Range"] = etag
    async with session.get(url, headers=headers) as resp:
        if resp.status == 416 and have:
            whole = resp.headers.get("Content-Range", "").rpartition("/")[2]
            if whole == str(have):
                report(f"{url}: the part file already holds all {have} bytes")
                return have
            report(f"{url}: the part file ({have} bytes) does not fit the snapshot; restarting")
            await asyncio.to_thread(_unlink, part, etag_file)
            return None
        if resp.status not in (200, 206):
            raise await _refused(resp)
        served = resp.headers.get(ID_HEADER)
        if served is not None and served != url.name:
            raise FetchError(f"{url}: the server sent snapshot {served}")
        total = int(resp.headers.get(SIZE_HEADER, "-1"))
        if resp.status == 206:
            start = resp.headers.get("Content-Range", "").removeprefix("bytes ").split("-")[0]
            if start != str(have):
                raise FetchError(f"{url}: asked for byte {have} on, got range {start}")
            report(f"{url}: resumed at byte {have} (206)")
            mode: Literal["ab", "wb"] = "ab"
        else:
            if have:
                report(f"{url}: the snapshot changed or ranges are off; restarting (200)")
            mode = "wb"
        if resp.headers.get("ETag"):
            await asyncio.to_thread(etag_file.write_text, resp.headers["ETag"] + "\n")
        async with aiofiles.open(part, mode) as out:
            async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                await out.write(chunk)
            await out.flush()
            await asyncio.to_thread(os.fsync, out.fileno())
    return total


def _install(part: Path, final: Path, url: URL, total: int) -> None:
    """Validate the part file; a good one becomes the snapshot, a bad one is deleted."""
    size = _size(part)
    if total >= 0 and size != total:
        raise FetchError(f"{url}: got {size} bytes of {total}")
    try:
        with SnapshotReader(part):
            pass
    except SnapshotError as e:
        _unlink(part)
        raise FetchError(f"{url}: the download is not a valid snapshot ({e.reason})") from None
    _fsync(part)
    os.replace(part, final)
    fsync_dir(final.parent)


async def fetch_snapshot(
    url: str,
    dest_dir: Path,
    token: str | None = None,
    *,
    attempts: int = ATTEMPTS,
    report: Report = _ignore,
) -> Path:
    """Download the snapshot ``url`` names (the newest one for a ``.../snapshots`` URL) into
    ``dest_dir`` and return its installed path; ``report`` hears about resumes and restarts."""
    dest = Path(dest_dir)
    await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT, raise_for_status=False) as session:
            file_url = await _resolve(session, URL(url), token)
            sid = parse_name(file_url.name + SUFFIX)
            assert sid is not None
            name = snapshot_name(sid)
            part = dest / (name + PART_SUFFIX)
            etag_file = dest / (name + PART_SUFFIX + ETAG_SUFFIX)
            total: int | None = None
            for attempt in range(1, attempts + 1):
                try:
                    total = await _attempt(session, file_url, token, part, etag_file, report)
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
                    if attempt == attempts:
                        raise
                    report(f"{file_url}: transfer broken ({e}); resuming")
                    await asyncio.sleep(RETRY_PAUSE_S * attempt)  # a blip may need a moment
                    continue
                if total is not None:
                    break
    except aiohttp.ClientError as e:
        raise FetchError(f"{url}: {e}") from None
    except TimeoutError:
        raise FetchError(f"{url}: timed out") from None
    if total is None:
        raise FetchError(f"{file_url}: no complete answer in {attempts} attempts")
    final = dest / (name + SUFFIX)
    try:
        await asyncio.to_thread(_install, part, final, file_url, total)
    finally:
        await asyncio.to_thread(_unlink, etag_file)
    return final
