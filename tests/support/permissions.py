"""Running ``cleanerd`` where file permissions apply, also when the tests run as root.

As this user when it is not root; as root without the capabilities that override permission
bits (``setpriv`` drops ``dac_override`` and ``dac_read_search`` from its bounding set) when that
works here. Where neither does, ``run_denied`` injects the kernel's ``EACCES`` in process
(``deny``); its ``injected`` variant always does, to keep that fallback honest.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from click.testing import CliRunner

from cleanerd.cli import cli
from tests.support.cli import cleanerd_env
from tests.support.logs import two_partitions


class Run(Protocol):
    def __call__(self, args: list[str], target: Path, mode: int = 0) -> tuple[int, str, str]:
        """Exit code, stdout and stderr of ``cleanerd ARGS`` with ``target`` at ``mode``."""
        ...


def permissions_prefix(workdir: Path) -> list[str] | None:
    """How to run a command with file permissions enforced (tried on a closed dir in
    ``workdir``): no prefix when this user is not root; ``setpriv`` without the overriding
    capabilities when root and that works here; else None."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    closed = workdir / "closed"
    closed.mkdir(mode=0)
    try:
        code = "import os, sys, cleanerd.cli; os.listdir(sys.argv[1])"
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", code, str(closed)],
            env=cleanerd_env(NUMBA_CACHE_DIR=""),
            capture_output=True,
            check=False,
            timeout=120,
        )
    finally:
        closed.rmdir()
    return prefix if b"PermissionError" in probe.stderr else None


def deny(monkeypatch: pytest.MonkeyPatch, target: Path, mode: int) -> None:
    """What ``chmod mode target`` does to a user without the override, for listing and stat:
    0o000 hides the dir and everything in it; 0o444 lists its names but reaches none of them."""

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


def small_log_dir(root: Path) -> Path:
    """Two partitions (``t-0``, ``t-1``) of 12 records and two segments each: one to deny, one
    to go on with."""
    return two_partitions(root, records=12, keys=3, roll_at=5, value=b"v")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``, every dir in it opened again afterwards (a failed run may leave one
    closed)."""
    yield tmp_path
    for p in (tmp_path, *tmp_path.rglob("*")):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)


@pytest.fixture(params=["permissions", "injected"])
def run_denied(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Run:
    """``run(args, target, mode=0)``: ``cleanerd ARGS`` with ``target`` chmod-ed to ``mode``
    (then put back), where permissions apply; or with the same refusals injected."""
    prefix = permissions_prefix(workdir) if request.param == "permissions" else None

    def run(args: list[str], target: Path, mode: int = 0) -> tuple[int, str, str]:
        if prefix is None:
            with monkeypatch.context() as patch:
                deny(patch, target, mode)
                result = CliRunner().invoke(cli, args)
            return result.exit_code, result.stdout, result.stderr
        target.chmod(mode)
        try:
            done = subprocess.run(
                [*prefix, sys.executable, "-m", "cleanerd", *args],
                env=cleanerd_env(NUMBA_CACHE_DIR=""),  # this user's kernel cache: compiled once
                cwd=workdir,
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
        finally:
            target.chmod(0o755)
        return done.returncode, done.stdout, done.stderr

    return run
