"""Snapshots against hostile input: a file that lies (a batch cut out, every CRC still valid),
names that are not files (a symlink, a FIFO), a FetchSnapshot server that answers badly, a
partition that may not be written, and partitions that fail one at a time.

Each case starts from a real snapshot made by ``cleanerd snapshot create`` on a generated log.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.format import Record
from cleanerd.service._http import make_app, serve_app
from cleanerd.service._metrics import DaemonMetrics
from cleanerd.snapshot._build import plan_state
from cleanerd.snapshot._format import SnapshotError, SnapshotReader, SnapshotWriter
from cleanerd.storage import ReadOnlyLog, SnapshotId, list_snapshots, snapshot_dir
from tests.support.cli import cleanerd_env
from tests.support.daemon_stub import OnePartition
from tests.support.permissions import permissions_prefix

LIVE_KEYS = 2300  # what orders-0's state holds (seed 3): more than two 1,000-record batches
END = 6000
SID = f"{END:020d}-{0:010d}"
TP = "/partitions/orders/0/snapshots"


def cleanerd(*args: str, prefix: tuple[str, ...] = (), **env: str) -> tuple[int, str, str]:
    """``cleanerd ARGS`` in a subprocess; the timeout is the guard against a hang."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "cleanerd", *args],
        env=cleanerd_env(**env),
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir of two partitions of ``orders``, each with the snapshot ``create`` made."""
    logdir = tmp_path_factory.mktemp("hostile") / "logs"
    code, out, err = cleanerd(
        "gen", str(logdir), "--topic", "orders", "--partitions", "2", "--records", str(END),
        "--keys", "2700", "--segment-bytes", "100000", "--seed", "3",
    )  # fmt: skip
    assert code == 0, err
    code, out, err = cleanerd("snapshot", "create", "--format", "json", str(logdir))
    assert code == 0, err
    for line in out.splitlines():
        made = json.loads(line)
        assert made["records"] == (LIVE_KEYS if made["partition"] == "orders-0" else 2258)
        assert made["end_offset"] == END
    return logdir


@pytest.fixture
def logdir(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "logs", symlinks=True))


def _part(logdir: Path) -> Path:
    return logdir / "orders-0"


def _snapshot(logdir: Path) -> Path:
    return snapshot_dir(_part(logdir)) / f"{SID}.checkpoint"


def _batches(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of each record batch: the v2 length field at byte 8 counts from 12."""
    found, pos = [], 0
    while pos < len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        found.append((pos, size))
        pos += size
    return found


def cut_batch(path: Path, index: int) -> None:
    """Remove batch ``index`` and nothing else: every CRC left stays valid."""
    data = path.read_bytes()
    pos, size = _batches(data)[index]
    path.write_bytes(data[:pos] + data[pos + size :])


def _count_line(output: str) -> str:
    return next(line for line in output.splitlines() if "live keys" in line)


# --- (6) a snapshot that lies ------------------------------------------------------------------
@pytest.mark.slow
def test_a_batch_cut_out_is_refused_by_list_verify_load_and_create(logdir: Path) -> None:
    path = _snapshot(logdir)
    assert len(_batches(path.read_bytes())) == 5  # header, three data batches, footer
    cut_batch(path, 2)  # still framed and checksummed as a snapshot, but 1,000 records short
    with pytest.raises(SnapshotError, match="starts at offset 2001, not 1001: a batch is missing"):
        SnapshotReader(path)

    code, out, err = cleanerd("snapshot", "list", "--format", "json", str(_part(logdir)))
    assert code == 0, err
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert row["valid"] is False
    assert "a batch is missing" in row["problem"]

    code, out, err = cleanerd("verify", str(_part(logdir)))
    assert code == 1
    assert str(path) in out + err

    code, out, err = cleanerd("snapshot", "load", "--count", str(_part(logdir)))
    assert code == 0, err
    assert _count_line(out) == f"orders-0: {LIVE_KEYS} live keys"  # from the log, not 1,300
    assert f"warning: {path}: " in err
    assert "a batch is missing; trying an older snapshot" in err

    # the next snapshot is made from the log, not from the damaged one
    code, out, err = cleanerd("snapshot", "create", "--format", "json", str(_part(logdir)))
    assert code == 0, err
    made = json.loads(out)
    assert (made["records"], made["base_end_offset"]) == (LIVE_KEYS, None)
    with SnapshotReader(path) as reader:
        assert reader.info.records == LIVE_KEYS


@pytest.mark.slow
def test_load_falls_back_to_the_next_older_valid_snapshot(logdir: Path) -> None:
    older = "--upto", "3000"
    code, _, err = cleanerd("snapshot", "create", *older, str(_part(logdir)))
    assert code == 0, err
    cut_batch(_snapshot(logdir), 1)
    heard: list[str] = []
    with ReadOnlyLog(_part(logdir)) as log:
        plan = plan_state(log, END, heard.append)
        assert plan.base is not None
        plan.base.close()
    assert plan.base_id == SnapshotId(3000, 0)
    assert plan.replay_from == 3000
    assert len(heard) == 1
    assert str(_snapshot(logdir)) in heard[0]
    code, out, err = cleanerd("snapshot", "load", "--count", str(_part(logdir)))
    assert code == 0, err
    assert _count_line(out) == f"orders-0: {LIVE_KEYS} live keys"


RECORDS = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v") for i in range(2500)]


def _write(directory: Path, sid: SnapshotId) -> Path:
    with SnapshotWriter(directory, sid, last_contained_timestamp=0) as w:
        w.append(RECORDS)
        return w.finish()


def test_numbering_epoch_and_record_count_must_match_what_was_written(tmp_path: Path) -> None:
    good = _write(tmp_path, SnapshotId(5000, 4))
    data = good.read_bytes()
    batches = _batches(data)
    pos, size = batches[1]
    doubled = tmp_path / "doubled" / "checkpoints" / good.name
    doubled.parent.mkdir(parents=True)
    doubled.write_bytes(data[: pos + size] + data[pos:])  # one batch twice
    with pytest.raises(SnapshotError, match=r"offsets not increasing|offsets overlap"):
        SnapshotReader(doubled)
    # the same bytes under another epoch, or an end offset below their record count
    for name, why in (
        (f"{5000:020d}-{3:010d}.checkpoint", "has leader epoch 4, the name says 3"),
        (f"{2000:020d}-{4:010d}.checkpoint", "2500 records, more than the 2000 offsets"),
    ):
        renamed = good.with_name(name)
        shutil.copy(good, renamed)
        with pytest.raises(SnapshotError, match=why):
            SnapshotReader(renamed)
    # a name that gives no id (a fetched .part, ``snapshot show`` of a copy) checks the rest
    copy = tmp_path / "copy.bin"
    shutil.copy(good, copy)
    with SnapshotReader(copy) as reader:
        assert reader.info.records == len(RECORDS)
    with pytest.raises(SnapshotError, match="the name says 3"):
        SnapshotReader(copy, sid=SnapshotId(5000, 3))


# --- a daemon's snapshot routes, served from a thread ------------------------------------------
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """``app`` on 127.0.0.1 in a thread of its own (the CLI runs its own event loop); its URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = asyncio.run_coroutine_threadsafe(serve_app(app, "127.0.0.1", 0), loop).result(30)
    try:
        yield f"http://127.0.0.1:{srv.port}"
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def daemon_routes(partition: Path) -> web.Application:
    api = OnePartition(partition)
    return make_app(api, DaemonMetrics(api.status))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), e.read()


def fetch(url: str, dest: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["snapshot", "fetch", url, str(dest)])
    return result.exit_code, result.output


def _left_in(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir()) if dest.exists() else []


@pytest.mark.slow
def test_fetch_refuses_a_snapshot_with_a_batch_cut_out(logdir: Path, tmp_path: Path) -> None:
    cut_batch(_snapshot(logdir), 2)
    dest = tmp_path / "got"
    with serving(daemon_routes(_part(logdir))) as base:
        code, output = fetch(base + TP, dest)
    assert code == 1
    assert output.startswith("error: "), output
    assert output.count("\n") == 1, output
    assert "not a valid snapshot" in output
    assert "a batch is missing" in output
    assert _left_in(dest) == []


# --- (7) names that are not files --------------------------------------------------------------
@pytest.mark.slow
def test_a_symlink_named_like_a_snapshot_is_not_listed_read_or_served(
    logdir: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:secret\n")
    outside = tmp_path / "valid-copy.checkpoint"
    shutil.copy(_snapshot(logdir), outside)
    to_secret = snapshot_dir(_part(logdir)) / f"{7000:020d}-{0:010d}.checkpoint"
    to_valid = snapshot_dir(_part(logdir)) / f"{END:020d}-{1:010d}.checkpoint"
    to_secret.symlink_to(secret)
    to_valid.symlink_to(outside)

    assert list_snapshots(_part(logdir)) == [(SnapshotId(END, 0), _snapshot(logdir))]
    with pytest.raises(SnapshotError, match="not a regular file \\(a symbolic link\\)"):
        SnapshotReader(to_valid)
    with serving(daemon_routes(_part(logdir))) as base:
        status, body = _get(base + TP)
        assert status == 200
        assert [row["id"] for row in json.loads(body)] == [SID]
        for link in (to_secret, to_valid):
            status, body = _get(f"{base}{TP}/{link.name.removesuffix('.checkpoint')}")
            assert status == 404, link
            assert b"secret" not in body
    code, out, err = cleanerd("snapshot", "list", "--format", "json", str(_part(logdir)))
    assert code == 0, err
    rows = {json.loads(line)["path"]: json.loads(line) for line in out.splitlines()}
    assert rows[str(_snapshot(logdir))]["valid"] is True
    for link in (to_secret, to_valid):
        assert rows[str(link)]["valid"] is False
        assert rows[str(link)]["problem"] == "a symbolic link, not a snapshot file"
    code, out, err = cleanerd("verify", str(_part(logdir)))
    assert code == 1
    assert str(to_secret) in out + err
    assert secret.read_text() == "root:x:0:0:secret\n"  # nothing followed the link to write


@pytest.mark.slow
def test_a_fifo_named_like_a_snapshot_hangs_no_command(logdir: Path, tmp_path: Path) -> None:
    """Every command returns (the subprocess timeout is the guard); none opens the FIFO."""
    fifo = snapshot_dir(_part(logdir)) / f"{END:020d}-{1:010d}.checkpoint"  # the newest id
    os.mkfifo(fifo)
    part = str(_part(logdir))

    code, out, err = cleanerd("snapshot", "list", part)
    assert code == 0, err
    assert f"{fifo}  end {END} epoch 1  INVALID: a FIFO, not a snapshot file" in out
    code, out, err = cleanerd("snapshot", "load", "--count", part)
    assert code == 0, err
    assert _count_line(out) == f"orders-0: {LIVE_KEYS} live keys"
    code, out, err = cleanerd("verify", part)
    assert code == 1
    assert str(fifo) in out + err
    code, out, err = cleanerd("snapshot", "create", "--format", "json", part)
    assert code == 0, err
    assert json.loads(out)["skipped"] == f"the newest snapshot already ends at {END}"
    code, out, err = cleanerd("snapshot", "show", str(fifo))
    assert code == 1
    assert err.count("\n") == 1, err
    assert "not a regular file (a FIFO)" in err, err
    assert fifo.exists()  # not replaced, not deleted by retention or leftovers cleanup
    with serving(daemon_routes(_part(logdir))) as base:
        assert _get(f"{base}{TP}/{fifo.name.removesuffix('.checkpoint')}")[0] == 404


# --- (8) snapshot fetch against a bad server ---------------------------------------------------
GOOD_ROW = {"id": SID, "end_offset": END, "epoch": 0, "bytes": 1000}


def _listing(body: bytes | str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body if isinstance(body, bytes) else body.encode())

    return handler


def _file(headers: dict[str, str], body: bytes = b"x" * 1000, status: int = 200) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, body=body, headers=headers)

    return handler


SIZE = {"X-Snapshot-Size": "1000"}
BAD_ANSWERS: dict[str, tuple[Handler, str]] = {
    "id not an id": (_listing(json.dumps([{**GOOD_ROW, "id": "../../x"}])), "id '../../x' is not"),
    "listing not JSON": (_listing("<html>oops</html>"), "not a snapshot listing: Expecting value"),
    "listing not an array": (_listing('{"id": 1}'), "a JSON dict, not an array"),
    "row not an object": (_listing("[1]"), "a row is int, not an object"),
    "end offset not the id's": (
        _listing(json.dumps([{**GOOD_ROW, "end_offset": 7000}])),
        "end_offset 7000 does not match id",
    ),
    "epoch a string": (_listing(json.dumps([{**GOOD_ROW, "epoch": "0"}])), "epoch '0' does not"),
    "bytes negative": (_listing(json.dumps([{**GOOD_ROW, "bytes": -1}])), "bytes -1 of"),
    "listing not UTF-8": (_listing(b"\xff\xfe["), "not a snapshot listing"),
    "size lots": (_file({"X-Snapshot-Size": "lots"}), "X-Snapshot-Size 'lots' is not"),
    "size missing": (_file({}), "the answer has no X-Snapshot-Size"),
    "size negative": (_file({"X-Snapshot-Size": "-5"}), "X-Snapshot-Size '-5' is not"),
    "end offset header": (
        _file({**SIZE, "X-Snapshot-End-Offset": "12"}),
        "X-Snapshot-End-Offset 12 does not match the id",
    ),
    "another id": (_file({**SIZE, "X-Snapshot-Id": "other"}), "the server sent snapshot 'other'"),
    "length not the size": (_file({"X-Snapshot-Size": "999"}), "Content-Length 1000 for bytes 0"),
    "206 unasked": (
        _file({**SIZE, "Content-Range": "bytes 0-999/1000"}, status=206),
        "a 206 (part of the file) to a request for all of it",
    ),
    "not a snapshot": (_file(SIZE), "the download is not a valid snapshot"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_fetch_refuses_a_bad_answer_in_one_line_and_leaves_nothing(
    case: str, tmp_path: Path
) -> None:
    handler, why = BAD_ANSWERS[case]
    app = web.Application()
    app.router.add_get(TP, handler)
    app.router.add_get(TP + "/{id}", handler)
    url_path = TP if handler.__qualname__.startswith("_listing") else f"{TP}/{SID}"
    dest = tmp_path / "got"
    with serving(app) as base:
        code, output = fetch(base + url_path, dest)
    assert code == 1
    assert output.count("\n") == 1, output
    assert output.startswith("error: "), output
    assert "Traceback" not in output
    assert why in output, output
    assert _left_in(dest) == []


def test_fetch_stops_reading_at_the_declared_size(tmp_path: Path) -> None:
    """A server that declares 1,000 bytes and streams 32 MB: refused at the first chunk past
    the declared size (the server never gets to send it all), and the part file is gone."""
    sent = {"bytes": 0, "finished": False}

    async def flood(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SIZE)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        chunk = b"y" * 65536
        try:
            for _ in range(512):
                await resp.write(chunk)
                sent["bytes"] += len(chunk)
            sent["finished"] = True
        except (ConnectionError, RuntimeError):
            pass  # the client hung up
        return resp

    app = web.Application()
    app.router.add_get(TP + "/{id}", flood)
    dest = tmp_path / "got"
    dest.mkdir()
    (dest / f"{SID}.checkpoint.part").write_bytes(b"z" * 10)  # an earlier, broken run's
    with serving(app) as base:
        code, output = fetch(f"{base}{TP}/{SID}", dest)
    assert code == 1
    *reports, error = output.splitlines()
    assert reports == [
        f"{base}{TP}/{SID}: the snapshot changed or ranges are off; restarting (200)"
    ]
    assert error.startswith("error: ")
    assert "the server sent more than the 1000 bytes it declared" in error
    assert not sent["finished"]
    assert _left_in(dest) == []


# --- (10) read-only commands on a read-only partition ------------------------------------------
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _inside(path: Any, root: Path) -> bool:
    if not isinstance(path, str | bytes | os.PathLike):
        return False  # a descriptor
    p = Path(os.path.abspath(os.fsdecode(path)))
    return p == root or root in p.parents


def forbid_writes(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    """Every attempt to open for writing, create, rename or delete under ``root`` fails with
    EACCES (what dirs 555 and files 444 give a user who is not root); returns the attempts."""
    tried: list[str] = []

    def deny(what: str, path: Any) -> None:
        tried.append(f"{what} {os.fsdecode(path)}")
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))

    real_open = os.open

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & _WRITE_FLAGS and _inside(path, root):
            deny("os.open", path)
        return real_open(path, flags, *args, **kwargs)

    real_io_open = io.open

    def io_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if set(mode) & set("wax+") and _inside(file, root):
            deny(f"open({mode})", file)
        return real_io_open(file, mode, *args, **kwargs)

    def wrap(name: str) -> None:
        real = getattr(os, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            for path in args[:2]:
                if _inside(path, root):
                    deny(f"os.{name}", path)
            return real(*args, **kwargs)

        monkeypatch.setattr(os, name, call)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.setattr("builtins.open", io_open)
    for name in ("replace", "rename", "unlink", "remove", "mkdir", "rmdir", "truncate", "utime"):
        wrap(name)
    return tried


READ_ONLY_COMMANDS = [
    ("snapshot", "load", "--count", "{part}"),
    ("snapshot", "list", "{part}"),
    ("snapshot", "show", "{snapshot}"),
    ("verify", "{part}"),
]


@pytest.mark.parametrize("args", READ_ONLY_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_read_only_commands_write_nothing(
    args: tuple[str, ...], logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: no file under the log dir is even opened for writing."""
    filled = [a.format(part=_part(logdir), snapshot=_snapshot(logdir)) for a in args]
    tried = forbid_writes(monkeypatch, logdir)
    result = CliRunner().invoke(cli, filled)
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    assert tried == []
    if args[1] == "load":
        assert f"orders-0: {LIVE_KEYS} live keys" in result.stdout


@pytest.fixture
def world_readable_copy(pristine: Path) -> Iterator[Path]:
    """The log dir copied to a dir of its own (a kernel cache beside it), dirs 555, files 444."""
    root = Path(tempfile.mkdtemp(prefix="cleanerd-ro-"))
    root.chmod(0o755)
    cache = root / "numba-cache"
    cache.mkdir()
    cache.chmod(0o777)
    logdir = Path(shutil.copytree(pristine, root / "logs"))
    for p in sorted(logdir.rglob("*"), reverse=True):
        p.chmod(0o555 if p.is_dir() else 0o444)
    logdir.chmod(0o555)
    try:
        yield logdir
    finally:
        for p in (logdir, *logdir.rglob("*")):
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(root)


@pytest.mark.slow
def test_load_and_list_as_an_unprivileged_user_on_a_read_only_partition(
    world_readable_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real thing where permissions apply here (as this user, or as root without the
    capabilities that override them: ``tests/support/permissions.py``); else the same checks with
    the kernel's refusals injected in process (root ignores permission bits)."""
    logdir = world_readable_copy
    part = str(_part(logdir))
    permissions = permissions_prefix(logdir.parent)
    prefix = None if permissions is None else tuple(permissions)
    for args in (("snapshot", "load", "--count", part), ("snapshot", "list", part)):
        if prefix is not None:
            code, out, err = cleanerd(
                *args,
                prefix=prefix,
                HOME=str(logdir.parent),
                NUMBA_CACHE_DIR=str(logdir.parent / "numba-cache"),
            )
        else:
            with monkeypatch.context() as patch:
                tried = forbid_writes(patch, logdir)
                result = CliRunner().invoke(cli, list(args))
            code, out, err = result.exit_code, result.stdout, result.stderr
            assert tried == []
        assert code == 0, err
        if args[1] == "load":
            assert _count_line(out) == f"orders-0: {LIVE_KEYS} live keys"
        else:
            assert "2300 records" in out


# --- (9) one partition's OS error is that partition's --------------------------------------------
def _create(logdir: Path, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["snapshot", "create", "--upto", "3000", *extra, str(logdir)])
    return result.exit_code, result.stdout, result.stderr


def _made_at_3000(partition: Path) -> bool:
    return SnapshotId(3000, 0) in [sid for sid, _ in list_snapshots(partition)]


def test_a_full_disk_fails_one_partition_and_the_others_go_on(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SnapshotWriter._write

    def full(self: SnapshotWriter, batch: bytes) -> None:
        if self.partition_dir.name == "orders-0" and self.bytes > 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, batch)

    monkeypatch.setattr(SnapshotWriter, "_write", full)
    code, _, err = _create(logdir)
    assert code == 1
    assert err == "orders-0: failed: cannot write: No space left on device\n"
    assert not _made_at_3000(logdir / "orders-0")
    assert _made_at_3000(logdir / "orders-1")
    assert [p.name for p in snapshot_dir(logdir / "orders-0").iterdir()] == [f"{SID}.checkpoint"]


def test_an_unreadable_checkpoints_dir_or_read_only_partition_fails_only_that_partition(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoints = snapshot_dir(logdir / "orders-0")
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if _inside(path, checkpoints):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_scandir(path)

    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        code, _, err = _create(logdir)
    assert code == 1
    assert err == f"orders-0: failed: cannot access {checkpoints}: Permission denied\n"
    assert _made_at_3000(logdir / "orders-1")

    with monkeypatch.context() as patch:
        forbid_writes(patch, logdir / "orders-0")
        code, _, err = _create(logdir, "--upto", "2000")
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith("orders-0: failed: cannot access "), err
    assert err.endswith(": Permission denied\n")
    assert str(logdir / "orders-0") in err
    assert SnapshotId(2000, 0) in [sid for sid, _ in list_snapshots(logdir / "orders-1")]


def test_load_of_an_unreadable_partition_dir_is_one_line_and_exit_1(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dir 000 as a non-owner sees it: access(R_OK) false, listing refused (click's own
    readability check made this a usage error, exit 2)."""
    part = _part(logdir)
    real_access, real_scandir = os.access, os.scandir

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        return False if _inside(path, part) else real_access(path, mode, *args, **kwargs)

    def scandir(path: Any = ".") -> Any:
        if _inside(path, part):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "scandir", scandir)
    result = CliRunner().invoke(cli, ["snapshot", "load", "--count", str(part)])
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"error: cleanerd snapshot load: cannot access {part}: Permission denied\n"
    )


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_fetch_writes_through_no_symlink_and_waits_on_no_fifo(
    kind: str, logdir: Path, tmp_path: Path
) -> None:
    """``DIR`` may be a partition's ``checkpoints/``: a symlink or FIFO under the part file's
    name is refused (one line, exit 1), and the file a symlink points at is left as it was."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    dest = tmp_path / "got"
    dest.mkdir()
    part = dest / f"{SID}.checkpoint.part"
    if kind == "symlink":
        part.symlink_to(victim)
    else:
        os.mkfifo(part)
    with serving(daemon_routes(_part(logdir))) as base:
        result = CliRunner().invoke(cli, ["snapshot", "fetch", base + TP, str(dest)])
    assert result.exit_code == 1, result.output
    what = "a symbolic link" if kind == "symlink" else "a FIFO"
    assert result.stderr == (
        f"error: {base}{TP}/{SID}: {part} is {what}, not a file; left as it is\n"
    )
    assert victim.read_text() == "keep me\n"
    assert _left_in(dest) == [part.name]  # not ours to delete, and nothing installed


def test_read_only_load_skips_a_bad_index_and_refuses_an_interrupted_swap(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = _part(logdir)
    load = ["snapshot", "load", "--upto", "5000", str(part)]  # below the snapshot: the log
    good = CliRunner().invoke(cli, load)
    assert good.exit_code == 0, good.output
    assert len(good.stdout.splitlines()) > 1000
    index = sorted(part.glob("*.index"))[1]
    index.write_bytes(b"\xff" * 20)  # not whole entries, offsets falling: fails its check
    with monkeypatch.context() as patch:
        tried = forbid_writes(patch, logdir)
        with ReadOnlyLog(part) as log:
            assert len(log.skipped_indexes) == 1
            assert str(index) in log.skipped_indexes[0]
        result = CliRunner().invoke(cli, load)
    assert tried == []
    assert result.exit_code == 0, result.output
    assert result.stdout == good.stdout  # the segment read from its first byte instead
    assert index.read_bytes() == b"\xff" * 20  # not rebuilt

    swap = part / f"{3000:020d}.log.swap"
    swap.write_bytes(b"")
    result = CliRunner().invoke(cli, ["snapshot", "load", "--count", str(part)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: cleanerd snapshot load: {part}: an interrupted swap ({swap.name}); reading it "
        "needs a writer to finish it first (cleanerd compact or the daemon)\n"
    )
