"""An OS error ends any command with one line naming the command, the path and what failed, and
exit 1: no traceback, and nothing printed before it (``plan`` prints no empty table).

Permission cases run the command where file permissions apply (``tests/support/permissions.py``):
as the test's own user when it is not root, else as root without the capabilities that override
them, when that works here; otherwise the same ``EACCES`` the kernel would give is injected
in-process. A full disk is ``/dev/full`` as the command's output.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd.cli._errors import os_error_line
from tests.support.cli import cleanerd_env
from tests.support.permissions import Run, run_denied, small_log_dir, workdir

__all__ = ["run_denied", "workdir"]  # the fixtures, used by name


@pytest.mark.slow
def test_verify_of_a_log_dir_with_a_partition_it_cannot_read(
    workdir: Path, run_denied: Run
) -> None:
    """The partition is a problem naming it and the reason; the others are still checked."""
    logdir = small_log_dir(workdir)
    target = logdir / "t-0"
    code, out, err = run_denied(["verify", str(logdir)], target, 0o000)
    assert (code, err) == (1, ""), err
    lines = out.splitlines()
    assert f"{target}: unreadable: Permission denied" in lines, out
    assert any(line.startswith("t-0: 1 problem(s): ") for line in lines), out
    assert any(line.startswith("t-1: OK: 2 segment(s), 12 batch(es)") for line in lines), out
    assert lines[-1] == f"verify {logdir}: 1 problem(s) found (2 partition(s))"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["verify", "plan", "dump"])
def test_a_partition_dir_whose_files_cannot_be_reached(
    workdir: Path, run_denied: Run, command: str
) -> None:
    target = small_log_dir(workdir) / "t-1"
    code, out, err = run_denied([command, str(target)], target, 0o444)
    assert (code, out) == (1, ""), err  # no table, no partial listing before the error
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: cleanerd {command}: cannot access {target}{os.sep}"), err
    assert err.endswith(": Permission denied\n"), err


@pytest.mark.slow
def test_a_full_disk_under_the_output_is_one_line(workdir: Path) -> None:
    logdir = small_log_dir(workdir)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "cleanerd", "verify", str(logdir)],
            env=cleanerd_env(NUMBA_CACHE_DIR=""),  # this user's cache: no compiling
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
