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
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

import aiofiles
import aiohttp
from aiohttp import hdrs
from yarl import URL

from cleanerd.service._snapshot_routes import (
    END_OFFSET_HEADER,
    EPOCH_HEADER,
    ID_HEADER,
    SIZE_HEADER,
    snapshot_name,
)
from cleanerd.snapshot import SnapshotError, SnapshotReader
from cleanerd.storage import (
    SNAPSHOT_FILE_SUFFIX,
    SNAPSHOT_PART_SUFFIX,
    SnapshotId,
    file_kind,
    fsync_dir,
    open_regular,
    parse_name,
)

CHUNK_BYTES = 1 << 20
ATTEMPTS = 3
"""Tries per run; each one resumes where the part file ends."""
RETRY_PAUSE_S = 0.5
ETAG_SUFFIX = ".etag"
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
LISTING_BYTES = 16 << 20
"""A listing longer than this is refused unread (a row is about 90 bytes)."""
ERROR_BODY_BYTES = 64 << 10
ETAG_BYTES = 1024
_CONTENT_RANGE = re.compile(r"bytes (\d{1,20})-(\d{1,20})/(\d{1,20})")
Report = Callable[[str], None]


class Expected(NamedTuple):
    """What an answer declared: the whole file's size, its first byte, its length."""

    total: int
    start: int
    length: int


class FetchError(Exception):
    """A download that cannot succeed as asked; the message names the URL and why."""


def _ignore(_: str) -> None:
    pass


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _refused(resp: aiohttp.ClientResponse) -> FetchError:
    """A FetchError with the server's own error message when it sent one (the first line of
    it, read no further than ``ERROR_BODY_BYTES``)."""
    why: object = None
    with contextlib.suppress(ValueError, aiohttp.ClientError, asyncio.TimeoutError):
        body = json.loads(await resp.content.read(ERROR_BODY_BYTES))
        why = body.get("error") if isinstance(body, dict) else None
    text = str(why).strip().splitlines()[0][:200] if why else ""
    return FetchError(f"{resp.url}: HTTP {resp.status}: {text or resp.reason or 'error'}")


def _listed_id(row: object) -> SnapshotId:
    """The id of one listing row, every field checked: ``id`` is ``<20 digits>-<10 digits>``
    and agrees with ``end_offset`` and ``epoch``, which are non-negative integers."""
    if not isinstance(row, dict):
        raise ValueError(f"a row is {type(row).__name__}, not an object")
    name = row.get("id")
    sid = parse_name(f"{name}{SNAPSHOT_FILE_SUFFIX}") if isinstance(name, str) else None
    if sid is None:
        raise ValueError(f"id {name!r} is not <20-digit end offset>-<10-digit epoch>")
    for key, want in (("end_offset", sid.end_offset), ("epoch", sid.epoch)):
        value = row.get(key)
        if type(value) is not int or value != want:
            raise ValueError(f"{key} {value!r} does not match id {name}")
    size = row.get("bytes", 0)
    if type(size) is not int or size < 0:
        raise ValueError(f"bytes {size!r} of {name} is not a size")
    return sid


async def _resolve(session: aiohttp.ClientSession, url: URL, token: str | None) -> URL:
    """The file URL: ``url`` itself, or the newest snapshot of a ``.../snapshots`` listing."""
    segments = [s for s in url.path.split("/") if s]
    if segments and segments[-1] == "snapshots":
        async with session.get(url, headers=_headers(token)) as resp:
            if resp.status != 200:
                raise await _refused(resp)
            body = await resp.content.read(LISTING_BYTES + 1)
        if len(body) > LISTING_BYTES:
            raise FetchError(f"{url}: the listing is larger than {LISTING_BYTES} bytes")
        try:
            rows = json.loads(body)
            if not isinstance(rows, list):
                raise ValueError(f"a JSON {type(rows).__name__}, not an array")
            ids = [_listed_id(row) for row in rows]
        except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise FetchError(f"{url}: the answer is not a snapshot listing: {why}") from None
        if not ids:
            raise FetchError(f"{url}: the partition has no snapshot")
        return url.with_path(url.path.rstrip("/") + "/" + snapshot_name(max(ids)))
    if (
        len(segments) >= 2
        and segments[-2] == "snapshots"
        and parse_name(segments[-1] + SNAPSHOT_FILE_SUFFIX)
    ):
        return url
    raise FetchError(
        f"{url}: not a snapshot URL (want .../partitions/<topic>/<partition>/snapshots "
        "or .../snapshots/<20-digit end offset>-<10-digit epoch>)"
    )


def _number(value: str | None, what: str, url: URL) -> int | None:
    """A header holding a non-negative decimal number (None when absent)."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise FetchError(f"{url}: {what} {value[:40]!r} is not a byte count or offset")
    return int(text)


def _declared(resp: aiohttp.ClientResponse, url: URL, sid: SnapshotId, have: int) -> Expected:
    """What a 200 or 206 says it sends, every header checked against the URL and each other:
    (whole file size, first byte, bytes in this answer)."""
    served = resp.headers.get(ID_HEADER)
    if served is not None and served != url.name:
        raise FetchError(f"{url}: the server sent snapshot {served[:40]!r}")
    for header, want in ((END_OFFSET_HEADER, sid.end_offset), (EPOCH_HEADER, sid.epoch)):
        got = _number(resp.headers.get(header), header, url)
        if got is not None and got != want:
            raise FetchError(f"{url}: {header} {got} does not match the id")
    total = _number(resp.headers.get(SIZE_HEADER), SIZE_HEADER, url)
    if total is None:
        raise FetchError(f"{url}: the answer has no {SIZE_HEADER}")
    start = 0
    if resp.status == 206:
        m = _CONTENT_RANGE.fullmatch(resp.headers.get(hdrs.CONTENT_RANGE, "").strip())
        if m is None:
            raise FetchError(f"{url}: a 206 without a byte Content-Range")
        start, last, whole = (int(g) for g in m.groups())
        if start != have:
            raise FetchError(f"{url}: asked for byte {have} on, got range {start}")
        if whole != total or last != total - 1:
            raise FetchError(
                f"{url}: Content-Range {start}-{last}/{whole} does not end the "
                f"{total}-byte snapshot"
            )
    length = _number(resp.headers.get(hdrs.CONTENT_LENGTH), "Content-Length", url)
    if length is not None and length != total - start:
        raise FetchError(
            f"{url}: Content-Length {length} for bytes {start}.. of a {total}-byte snapshot"
        )
    etag = resp.headers.get(hdrs.ETAG)
    if etag is not None and (len(etag) > ETAG_BYTES or not etag.isprintable()):
        raise FetchError(f"{url}: an ETag of {len(etag)} characters")
    return Expected(total, start, total - start)


def _fsync(path: Path) -> None:
    fd = open_regular(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return 0


def _regular(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], flags: int) -> int:
    """The opener of every file the download writes or reads back: ``DIR`` may be a
    partition's ``checkpoints/``, where a symlink or FIFO under a part file's name must not
    send the bytes elsewhere or hang the command (``open_regular``)."""
    return open_regular(Path(os.fsdecode(path)), flags)


def _not_ours(url: URL, *paths: Path) -> None:
    """Refuse (and leave alone) a symlink, FIFO or the like where the download's files go."""
    for path in paths:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise FetchError(f"{url}: {path} is {file_kind(mode)}, not a file; left as it is")


def _write_etag(path: Path, etag: str) -> None:
    with open(path, "w", opener=_regular) as f:
        f.write(etag + "\n")


def _unlink(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _read_etag(path: Path) -> str | None:
    try:
        with open(path, opener=_regular) as f:
            return f.read(ETAG_BYTES + 1).strip() or None
    except FileNotFoundError:
        return None


async def _attempt(
    session: aiohttp.ClientSession,
    url: URL,
    sid: SnapshotId,
    token: str | None,
    part: Path,
    etag_file: Path,
    report: Report,
) -> int | None:
    """One request, appended to (206) or replacing (200) the part file: the file's full size,
    or None when the part file must start over. No byte past what the answer declared is
    written: more is refused as soon as it arrives."""
    have = await asyncio.to_thread(_size, part)
    headers = _headers(token)
    if have:
        headers["Range"] = f"bytes={have}-"
        etag = await asyncio.to_thread(_read_etag, etag_file)
        if etag:
            headers["If-Range"] = etag
    async with session.get(url, headers=headers) as resp:
        if resp.status == 416 and have:
            whole = resp.headers.get(hdrs.CONTENT_RANGE, "").rpartition("/")[2]
            if whole == str(have):
                report(f"{url}: the part file already holds all {have} bytes")
                return have
            report(f"{url}: the part file ({have} bytes) does not fit the snapshot; restarting")
            await asyncio.to_thread(_unlink, part, etag_file)
            return None
        if resp.status not in (200, 206):
            raise await _refused(resp)
        if resp.status == 206 and not have:
            raise FetchError(f"{url}: a 206 (part of the file) to a request for all of it")
        expected = _declared(resp, url, sid, have)
        if resp.status == 206:
            report(f"{url}: resumed at byte {have} (206)")
            mode: Literal["ab", "wb"] = "ab"
        else:
            if have:
                report(f"{url}: the snapshot changed or ranges are off; restarting (200)")
            mode = "wb"
        etag = resp.headers.get(hdrs.ETAG)
        if etag:
            await asyncio.to_thread(_write_etag, etag_file, etag)
        room = expected.length
        async with aiofiles.open(part, mode, opener=_regular) as out:
            async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                if len(chunk) > room:
                    raise FetchError(
                        f"{url}: the server sent more than the {expected.length} bytes it "
                        f"declared (bytes {expected.start}.. of {expected.total})"
                    )
                room -= len(chunk)
                await out.write(chunk)
            await out.flush()
            await asyncio.to_thread(os.fsync, out.fileno())
    return expected.total


def _install(part: Path, final: Path, url: URL, sid: SnapshotId, total: int) -> None:
    """Validate the part file; a good one becomes the snapshot, a bad one is deleted."""
    size = _size(part)
    if size != total:
        raise FetchError(f"{url}: got {size} bytes of {total}")
    try:
        with SnapshotReader(part, sid=sid):
            pass
    except SnapshotError as e:
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
    ``dest_dir`` and return its installed path; ``report`` hears about resumes and restarts.

    A refused answer (malformed, inconsistent, longer than declared, not a valid snapshot)
    removes what this download wrote; a broken connection keeps the part file to resume."""
    dest = Path(dest_dir)
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT, raise_for_status=False) as session:
            file_url = await _resolve(session, URL(url), token)
            sid = parse_name(file_url.name + SNAPSHOT_FILE_SUFFIX)
            if sid is None:  # pragma: no cover - _resolve returns only snapshot URLs
                raise FetchError(f"{file_url}: not a snapshot URL")
            await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
            name = snapshot_name(sid)
            part = dest / (name + SNAPSHOT_PART_SUFFIX)
            etag_file = dest / (name + SNAPSHOT_PART_SUFFIX + ETAG_SUFFIX)
            await asyncio.to_thread(_not_ours, file_url, part, etag_file)
            try:
                total = await _download(
                    session, file_url, sid, token, (part, etag_file), attempts, report
                )
            except FetchError:
                await asyncio.to_thread(_unlink, part, etag_file)
                raise
    except aiohttp.ClientError as e:
        raise FetchError(f"{url}: {_one_line(e)}") from None
    except TimeoutError:
        raise FetchError(f"{url}: timed out") from None
    final = dest / (name + SNAPSHOT_FILE_SUFFIX)
    try:
        await asyncio.to_thread(_install, part, final, file_url, sid, total)
    except FetchError:
        await asyncio.to_thread(_unlink, part)
        raise
    finally:
        await asyncio.to_thread(_unlink, etag_file)
    return final


async def _download(
    session: aiohttp.ClientSession,
    url: URL,
    sid: SnapshotId,
    token: str | None,
    files: tuple[Path, Path],
    attempts: int,
    report: Report,
) -> int:
    """The whole file into the part file (``files``: it and its ETag's), resuming after a
    broken connection: its size."""
    part, etag_file = files
    for attempt in range(1, attempts + 1):
        try:
            total = await _attempt(session, url, sid, token, part, etag_file, report)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
            if attempt == attempts:
                raise
            report(f"{url}: transfer broken ({_one_line(e)}); resuming")
            await asyncio.sleep(RETRY_PAUSE_S * attempt)  # a blip may need a moment
            continue
        if total is not None:
            return total
    raise FetchError(f"{url}: no complete answer in {attempts} attempts")


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
