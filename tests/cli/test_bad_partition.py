"""One partition dir that cannot be read stops only itself, as in the daemon.

``compact LOGDIR`` reports the partition with the file and the reason and compacts the others
(exit 1 at the end); a partition dir named on the command line that cannot be read is the
data's or the system's problem: one line naming it, exit 1 (not a usage error). ``verify
LOGDIR`` is checked in ``test_os_errors``.

As in ``test_os_errors``, the command runs where file permissions apply
(``tests/support/permissions.py``): as this user when it is not root; as root without the
capabilities that override them (``setpriv``) when that works here; else with the kernel's
``EACCES`` injected in-process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.permissions import Run, run_denied, small_log_dir, workdir

__all__ = ["run_denied", "workdir"]  # the fixtures, used by name

NOW = "99999999999"


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.slow
def test_compact_of_a_log_dir_goes_on_past_a_partition_it_cannot_read(
    workdir: Path, run_denied: Run
) -> None:
    logdir = small_log_dir(workdir)
    target, other = logdir / "t-0", logdir / "t-1"
    before = files(target)
    args = ["compact", str(logdir), "--format", "json", "--now", NOW]
    code, out, err = run_denied(args, target)
    assert code == 1, err
    denied = f"cannot access {target}{os.sep}leader-epoch-checkpoint: Permission denied"
    assert f"error: t-0: {denied} (partition left as it was)\n" in err, err
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
    target = small_log_dir(workdir) / "t-1"
    code, out, err = run_denied([command, str(target)], target)
    assert (code, out) == (1, ""), err
    assert err == f"error: cleanerd {command}: cannot access {target}: Permission denied\n"
