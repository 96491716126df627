"""Importing cleanerd does nothing but define names: no file, no output, no environment, no exit
handler. Numba's cache dir is the entry points' business (``cleanerd._jitcache``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "cleanerd"

# Runs in a fresh interpreter: an audit hook sees every file opened for writing, every dir made
# or removed and every environment change, from the import's first line to its last.
_PROBE = """
import atexit, io, json, os, sys
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
seen = []
def hook(event, args):
    if event == "open" and args[0] is not None:
        mode, flags = args[1] or "", args[2] or 0
        if any(c in mode for c in "wax+") or flags & WRITE:
            seen.append([event, str(args[0])])
    elif event in ("os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.putenv",
                   "os.unsetenv", "tempfile.mkstemp", "tempfile.mkdtemp", "shutil.rmtree"):
        seen.append([event, repr(args)[:200]])
callbacks, environ = atexit._ncallbacks(), dict(os.environ)
out, err = sys.stdout, sys.stderr
sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
sys.addaudithook(hook)
import {module}
printed = sys.stdout.getvalue() + sys.stderr.getvalue()
sys.stdout, sys.stderr = out, err
found = [e for e in seen]  # copied before anything below opens a file
print(json.dumps({{
    "events": found,
    "printed": printed,
    "new_exit_handlers": atexit._ncallbacks() - callbacks,
    "environ_changed": sorted(k for k in environ.keys() | os.environ.keys()
                              if environ.get(k) != os.environ.get(k)),
}}))
"""


def _tree(*roots: Path) -> dict[str, int]:
    """Every file and dir under ``roots`` with its mtime: a file made and removed again still
    changes its dir's mtime."""
    found: dict[str, int] = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            found[str(path)] = path.stat().st_mtime_ns
    return found


_UNWRITABLE = "/proc/cleanerd-no-such-dir"  # /proc refuses new dirs even to root
_SETUPS = {
    # numba's default would do: nothing to choose
    "fresh": {},
    # the cache dir given cannot be written: the entry points fall back to HOME's cache
    "given-unwritable": {"NUMBA_CACHE_DIR": _UNWRITABLE},
    # nothing can be written: the entry points make a private temp dir, removed at exit
    "nothing-writable": {"NUMBA_CACHE_DIR": _UNWRITABLE, "XDG_CACHE_HOME": _UNWRITABLE},
}


def _env(tmp_path: Path, setup: str) -> dict[str, str]:
    """A fresh HOME and TMPDIR, the setup's cache variables only, and no bytecode writes (they
    are Python's own, not cleanerd's)."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    skip = ("NUMBA_", "XDG_", "CACHE_DIRECTORY", "PYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env |= {"HOME": str(home), "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env | _SETUPS[setup]


@pytest.mark.parametrize("setup", sorted(_SETUPS))
@pytest.mark.parametrize("module", ["cleanerd", "cleanerd.cli"])
def test_import_writes_prints_sets_and_registers_nothing(
    tmp_path: Path, module: str, setup: str
) -> None:
    env = _env(tmp_path, setup)
    before = _tree(PACKAGE, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(module=module)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    report = json.loads(done.stdout)
    assert report["events"] == []
    assert report["printed"] == ""
    assert report["new_exit_handlers"] == 0
    assert report["environ_changed"] == []
    assert _tree(PACKAGE, tmp_path) == before


@pytest.mark.parametrize("setup", sorted(_SETUPS))
def test_plain_import_is_silent_and_leaves_no_file(tmp_path: Path, setup: str) -> None:
    """``python -c "import cleanerd"`` as a user types it, watched from outside."""
    env = _env(tmp_path, setup)
    before = _tree(PACKAGE, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", "import cleanerd"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert _tree(PACKAGE, tmp_path) == before


def _main_then_cache_dir(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = (
        f"import os, sys; sys.argv = ['cleanerd', *{list(args)!r}];"
        "from cleanerd.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('NUMBA_CACHE_DIR'))"
    )
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )


def test_the_cli_entry_point_still_chooses_the_cache_dir(tmp_path: Path) -> None:
    """The side effect moved, not vanished: ``main`` sets ``NUMBA_CACHE_DIR`` to the first
    writable dir when the one given is not, as it looks up the command, before it loads."""
    env = _env(tmp_path, "given-unwritable") | {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = _main_then_cache_dir(env, "verify", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(tmp_path / "xdg" / "cleanerd" / "numba")
    assert f"NUMBA_CACHE_DIR={_UNWRITABLE} is not writable" in done.stderr


def test_version_and_help_choose_no_cache_dir(tmp_path: Path) -> None:
    """They load no kernel: no probe file, no warning, the variable as it was."""
    env = _env(tmp_path, "given-unwritable") | {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    for args in (["--version"], ["--help"]):
        done = _main_then_cache_dir(env, *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == _UNWRITABLE
        assert done.stderr == ""
        assert not (tmp_path / "xdg").exists()
