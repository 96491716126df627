"""One partition dir that cannot be read stops only itself, as in the daemon.

``compact LOGDIR`` reports the partition with the file and the reason and compacts the others
(exit 1 at the end); a partition dir named on the command line that cannot be read is the
data's or the system's problem: one line naming it, exit 1 (not a usage error). ``verify
LOGDIR`` is checked in ``test_os_errors``.

As in ``test_os_errors``, the command runs where file permissions apply: as this user when
it is not root; as root without the capabilities that override them (``setpriv``) when that
works here; else with the kernel's ``EACCES`` injected in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from cleanerd.cli import cli
from tests.cli.test_os_errors import _deny, _env, _log_dir, workdir

__all__ = ["workdir"]  # the fixture, used by name

Run = Callable[[list[str], Path], tuple[int, str, str]]
NOW = "99999999999"


def _without_overrides(workdir: Path) -> list[str] | None:
    """A prefix running a command with file permissions enforced, or None."""
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
            env={**_env(workdir), "NUMBA_CACHE_DIR": ""},
            capture_output=True,
            check=False,
            timeout=120,
        )
    finally:
        closed.rmdir()
    return prefix if b"PermissionError" in probe.stderr else None


@pytest.fixture(params=["permissions", "injected"])
def run_denied(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Run:
    """``run(args, target)``: ``cleanerd ARGS`` with ``target`` at mode 000."""
    prefix = _without_overrides(workdir) if request.param == "permissions" else None

    def run(args: list[str], target: Path) -> tuple[int, str, str]:
        if prefix is None:
            with monkeypatch.context() as patch:
                _deny(patch, target, 0)
                result = CliRunner().invoke(cli, args)
            return result.exit_code, result.stdout, result.stderr
        target.chmod(0)
        try:
            done = subprocess.run(
                [*prefix, sys.executable, "-m", "cleanerd", *args],
                env={**_env(workdir), "NUMBA_CACHE_DIR": ""},  # root's cache: compiled once
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


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.slow
def test_compact_of_a_log_dir_goes_on_past_a_partition_it_cannot_read(
    workdir: Path, run_denied: Run
) -> None:
    logdir = _log_dir(workdir)
    target, other = logdir / "t-0", logdir / "t-1"
    before = files(target)
    args = ["compact", str(logdir), "--format", "json", "--now", NOW]
    code, out, err = run_denied(args, target)
    assert code == 1, err
    denied = f"cannot access {target}{os.sep}leader-epoch-checkpoint: Permission denied"
    assert f"Error: t-0: {denied} (partition left as it was)\n" in err, err
    assert "error: cleanerd compact" not in err  # the command itself did not stop
    lines = [json.loads(line) for line in out.splitlines()]
    assert {"partition": "t-0", "error": denied} in lines
    (done,) = [line for line in lines if line["partition"] == "t-1"]
    assert done["records_out"] < done["records_in"] == 12  # the other partition was compacted
    assert files(target) == before
    assert len(list(other.glob("*.log"))) == 2


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compact", "dump"])
def test_a_partition_dir_named_that_cannot_be_read_is_not_a_usage_error(
    workdir: Path, run_denied: Run, command: str
) -> None:
    target = _log_dir(workdir) / "t-1"
    code, out, err = run_denied([command, str(target)], target)
    assert (code, out) == (1, ""), err
    assert err == f"error: cleanerd {command}: cannot access {target}: Permission denied\n"
