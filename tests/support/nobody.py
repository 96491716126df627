"""Running commands as an unprivileged user: nobody (uid 65534, no groups) when the tests run as
root, as on CI; this user, unchanged, when it is not root already."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tests.support.tools import require

NOBODY = 65534


def as_nobody(*cmd: str) -> list[str]:
    """``cmd`` run as nobody:nogroup with no supplementary groups (as is when not root)."""
    if os.geteuid() == 0:
        prefix = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        return [require("setpriv"), *prefix, *cmd]
    return list(cmd)


def unprivileged_uid() -> int:
    """The uid ``as_nobody`` runs commands as."""
    return NOBODY if os.geteuid() == 0 else os.geteuid()


def give_to_nobody(path: Path) -> None:
    """Make ``path`` and everything in it nobody's (a no-op when not root)."""
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(path)], check=True)


def public_dir(prefix: str) -> Path:
    """A fresh dir outside pytest's (root-only) tmp dirs, readable by everyone."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def nobody_python(repo: Path) -> tuple[str, str]:
    """An interpreter nobody can run that imports ``repo``'s cleanerd with this environment's
    packages, and the ``PYTHONPATH`` it needs: this interpreter may live under /root, so another
    of the same version (its compiled packages load there) is tried too."""
    pythonpath = f"{repo}{os.pathsep}{sysconfig.get_paths()['purelib']}"
    candidates = [sys.executable, getattr(sys, "_base_executable", sys.executable)]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates += [p for p in (shutil.which(version), f"/usr/bin/{version}") if p]
    probe = f"import sys, numba, cleanerd; assert sys.version_info[:2] == {sys.version_info[:2]}"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath}
    for python in dict.fromkeys(candidates):
        cmd = as_nobody(python, "-c", probe)
        done = subprocess.run(cmd, env=env, cwd="/", capture_output=True, check=False)
        if done.returncode == 0:
            return python, pythonpath
    raise AssertionError(f"no {version} with cleanerd's packages that uid {NOBODY} can run")
