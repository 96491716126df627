"""An OS error ends any command with one line naming the command, the path and what failed, and
exit 1: no traceback, and nothing printed before it (``plan`` prints no empty table).

Permission cases run the command as an unprivileged user: the test's own user when it is not
root, else ``nobody`` through ``setpriv`` when that works here; otherwise (root, no way to drop
privileges) the same ``EACCES`` the kernel would give is injected in-process. A full disk is
``/dev/full`` as the command's output.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.cli._errors import os_error_line
from cleanerd.format import Record
from cleanerd.storage import PartitionLog, TopicPartition
from cleanerd.topics import LogConfig

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
Run = Callable[[list[str], Path, int], tuple[int, str, str]]


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    env["PYTHONPATH"] = str(REPO)
    env["NUMBA_CACHE_DIR"] = str(workdir / "numba-cache")  # writable by whoever runs it
    return env


def _unprivileged_prefix(workdir: Path) -> list[str] | None:
    """How to run a command without root's override of file permissions, or None."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import cleanerd.cli"],
        env=_env(workdir),
        cwd=workdir,
        capture_output=True,
        check=False,
        timeout=120,
    )
    return prefix if probe.returncode == 0 else None


def _deny(monkeypatch: pytest.MonkeyPatch, target: Path, mode: int) -> None:
    """What ``chmod mode target`` does to an unprivileged user, for listing and stat: 0o000
    hides the dir and everything in it; 0o444 lists its names but reaches none of them."""

    def blocked(path: Any, *, listing: bool) -> bool:
        if not isinstance(path, str | bytes | os.PathLike):
            return False  # a file descriptor
        p = Path(os.path.abspath(os.fsdecode(path)))
        inside = target in p.parents
        return inside or (p == target and listing and mode == 0)

    def wrap(name: str, *, listing: bool) -> None:
        real = getattr(os, name)

        def call(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            if blocked(path, listing=listing):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, call)

    wrap("listdir", listing=True)
    wrap("scandir", listing=True)
    wrap("stat", listing=False)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A dir every user can reach (pytest's tmp_path is root's own when run as root)."""
    path = Path(tempfile.mkdtemp(prefix="cleanerd-perm-"))
    path.chmod(0o755)
    (path / "numba-cache").mkdir(mode=0o777)
    (path / "numba-cache").chmod(0o777)  # whatever the umask
    try:
        yield path
    finally:
        for p in (path, *path.rglob("*")):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(path)


@pytest.fixture(params=["unprivileged", "injected"])
def run_unprivileged(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Run:
    """Run ``cleanerd ARGS`` with ``target`` chmod-ed to ``mode``, as an unprivileged user (the
    "injected" variant keeps the fallback honest where switching users works)."""
    prefix = _unprivileged_prefix(workdir) if request.param == "unprivileged" else None

    def run(args: list[str], target: Path, mode: int) -> tuple[int, str, str]:
        if prefix is None:  # root with no way to drop privileges: the same error, injected
            with monkeypatch.context() as patch:
                _deny(patch, target, mode)
                result = CliRunner().invoke(cli, args)
            return result.exit_code, result.stdout, result.stderr
        target.chmod(mode)
        try:
            done = subprocess.run(
                [*prefix, sys.executable, "-m", "cleanerd", *args],
                env=_env(workdir),
                cwd=workdir,
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
        finally:
            target.chmod(0o755)
        return done.returncode, done.stdout, done.stderr

    return run


def _log_dir(root: Path) -> Path:
    """Two partitions of a compacted-looking topic, a rolled segment each."""
    logdir = root / "logs"
    for partition in (0, 1):
        log = PartitionLog.create(logdir / TopicPartition("t", partition).dir_name, LogConfig())
        try:
            for n in range(12):
                log.append([Record(0, 1_000 + n, f"k{n % 3}".encode(), b"v")])
                if n == 5:
                    log.roll()
        finally:
            log.close()
    for p in (logdir, *logdir.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return logdir


@pytest.mark.slow
def test_verify_of_a_log_dir_with_a_partition_it_cannot_read(
    workdir: Path, run_unprivileged: Run
) -> None:
    """The partition is a problem naming it and the reason; the others are still checked."""
    logdir = _log_dir(workdir)
    target = logdir / "t-0"
    code, out, err = run_unprivileged(["verify", str(logdir)], target, 0o000)
    assert (code, err) == (1, ""), err
    lines = out.splitlines()
    assert f"{target}: unreadable: Permission denied" in lines, out
    assert any(line.startswith("t-0: 1 problem(s): ") for line in lines), out
    assert any(line.startswith("t-1: OK: 2 segment(s), 12 batch(es)") for line in lines), out
    assert lines[-1] == f"verify {logdir}: 1 problem(s) found (2 partition(s))"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["verify", "plan", "dump"])
def test_a_partition_dir_whose_files_cannot_be_reached(
    workdir: Path, run_unprivileged: Run, command: str
) -> None:
    target = _log_dir(workdir) / "t-1"
    code, out, err = run_unprivileged([command, str(target)], target, 0o444)
    assert (code, out) == (1, ""), err  # no table, no partial listing before the error
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: cleanerd {command}: cannot access {target}{os.sep}"), err
    assert err.endswith(": Permission denied\n"), err


@pytest.mark.slow
def test_a_full_disk_under_the_output_is_one_line(workdir: Path) -> None:
    logdir = _log_dir(workdir)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "cleanerd", "verify", str(logdir)],
            env={**_env(workdir), "NUMBA_CACHE_DIR": ""},  # this user's cache: no compiling
            cwd=workdir,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=300,
        )
    assert done.returncode == 1
    assert (
        done.stderr == "error: cleanerd verify: cannot write its output: No space left on device\n"
    )


def test_os_error_lines_name_the_path_and_the_operation() -> None:
    denied = PermissionError(errno.EACCES, "Permission denied", "/d/t-0/0.log")
    assert os_error_line("cleanerd verify", denied) == (
        "cleanerd verify: cannot access /d/t-0/0.log: Permission denied"
    )
    not_dir = NotADirectoryError(errno.ENOTDIR, "Not a directory", "/d/file/x")
    assert os_error_line("cleanerd gen", not_dir) == (
        "cleanerd gen: cannot access /d/file/x: Not a directory"
    )
    moved = OSError(errno.EXDEV, "Invalid cross-device link", "/a/x.swap", None, "/b/x.log")
    assert os_error_line("cleanerd compact", moved) == (
        "cleanerd compact: cannot move /a/x.swap to /b/x.log: Invalid cross-device link"
    )
    full = OSError(errno.ENOSPC, "No space left on device")  # a write names no file
    assert os_error_line("cleanerd compact", full, (Path("/d"),)) == (
        "cleanerd compact /d: cannot write: No space left on device"
    )
    assert os_error_line("cleanerd dump", OSError(errno.EROFS, "Read-only file system", "/d")) == (
        "cleanerd dump: cannot write to /d: Read-only file system"
    )
