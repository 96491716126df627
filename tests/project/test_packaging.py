"""The release artefacts as a user gets them: ``python -m build`` makes an sdist and a wheel that
pass ``twine check``; the wheel, installed (not editable) into a fresh venv that is then made
read-only, runs without the source tree as a non-root user with ``HOME=/`` and no
``NUMBA_CACHE_DIR`` (``docker run --user``, a system user with no home): ``--version``,
``verify`` and ``compact`` work without a warning, their kernels kept in the user's own dir in
``$TMPDIR``, so a second cleaning compiles nothing.

One build and one venv for the module: installing the dependencies (numba, numpy, aiohttp, ...)
is most of its time, and pip's cache keeps that short after the first run.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cleanerd import __version__
from tests.support.nobody import NOBODY, as_nobody, give_to_nobody, public_dir, unprivileged_uid

REPO = Path(__file__).resolve().parents[2]


def _run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _base_python() -> str:
    """An interpreter (3.11+) the unprivileged user can run: this one may live under /root."""
    candidates = [getattr(sys, "_base_executable", sys.executable), sys.executable]
    candidates += [p for p in (shutil.which("python3"), "/usr/bin/python3") if p]
    probe = "import sys, venv, ensurepip; assert sys.version_info >= (3, 11)"
    for python in dict.fromkeys(candidates):
        done = subprocess.run(as_nobody(python, "-c", probe), capture_output=True, check=False)
        if done.returncode == 0:
            return python
    raise AssertionError(f"no Python 3.11+ with venv that uid {NOBODY} can run: {candidates}")


@dataclass(frozen=True)
class Install:
    dist: Path
    venv: Path
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def install() -> Iterator[Install]:
    """Build once, check, install the wheel into a fresh venv, make the venv read-only."""
    work = public_dir("cleanerd-packaging-")
    try:
        dist = work / "dist"
        _run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], cwd=work)
        (sdist,) = dist.glob("cleanerd-*.tar.gz")
        (wheel,) = dist.glob("cleanerd-*.whl")
        _run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
        venv = work / "venv"
        _run([_base_python(), "-m", "venv", str(venv)])
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        # not this checkout on PYTHONPATH: its cleanerd.egg-info would look installed to pip,
        # which would then install the dependencies and skip the wheel
        clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        _run([*pip, str(wheel)], cwd=work, env=clean)
        _run(["chmod", "-R", "a-w", str(venv)])
        yield Install(dist, venv, sdist, wheel)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(work)], check=False)
        shutil.rmtree(work, ignore_errors=True)


def test_wheel_holds_the_package_its_type_hints_and_the_entry_point(install: Install) -> None:
    names = zipfile.ZipFile(install.wheel).namelist()
    assert "cleanerd/py.typed" in names
    assert "cleanerd/cli/_warmup.py" in names
    assert "pyspark_cleanerd.py" in names  # top-level: Spark's lookup of data sources finds it
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(install.wheel).read(entry_points).decode()
    assert "cleanerd = cleanerd.cli:main" in text


_SPARK_LOOKUP = """
import json, pkgutil
import pyspark_cleanerd
found = [m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")]
error = pyspark_cleanerd.LOAD_ERROR
print(json.dumps([found, type(error).__name__, hasattr(pyspark_cleanerd, "DefaultSource")]))
"""


def test_spark_finds_the_entry_module_which_imports_even_without_the_extra(
    install: Install,
) -> None:
    """Spark lists ``pyspark_*`` modules with ``pkgutil.iter_modules`` and imports each: the
    installed one is listed, and in this venv, without the spark extra, its import does not raise
    (a raise would fail Spark's lookup of every other data source too)."""
    python = str(install.venv / "bin" / "python")
    out = _run([python, "-c", _SPARK_LOOKUP], cwd=install.venv).stdout
    found, error, has_source = json.loads(out)
    assert found == ["pyspark_cleanerd"]
    assert error == "ModuleNotFoundError"  # pyspark
    assert has_source is False


@pytest.fixture
def locked_down(install: Install) -> Iterator[tuple[dict[str, str], Path]]:
    """The environment of a locked-down service: HOME=/, no NUMBA_CACHE_DIR, no XDG dirs, cwd
    away from the source tree; TMPDIR is a dir of ours, so the kernel cache the runs keep and
    any leftovers can be seen."""
    home = public_dir("cleanerd-nobody-")
    tmp = home / "tmp"
    tmp.mkdir()
    give_to_nobody(home)
    env = {"HOME": "/", "PATH": f"{install.venv / 'bin'}:/usr/bin:/bin", "TMPDIR": str(tmp)}
    env["LANG"] = "C.UTF-8"
    try:
        yield env, home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _cleanerd(install: Install, env: dict[str, str], cwd: Path, *args: str) -> tuple[str, str]:
    done = _run(as_nobody(str(install.venv / "bin" / "cleanerd"), *args), env=env, cwd=cwd)
    return done.stdout, done.stderr


def test_read_only_install_runs_as_nobody_and_keeps_its_kernels(
    install: Install, locked_down: tuple[dict[str, str], Path]
) -> None:
    env, home = locked_down
    out, err = _cleanerd(install, env, home, "--version")
    assert out.strip() == f"cleanerd, version {__version__}"
    assert err == ""

    # the installed package, not the source tree, is what runs
    where = _run(
        as_nobody(
            str(install.venv / "bin" / "python"), "-c", "import cleanerd; print(cleanerd.__file__)"
        ),
        env=env,
        cwd=home,
    ).stdout.strip()
    assert where.startswith(str(install.venv)), where

    # the log is written by this checkout (its kernel cache is warm) and handed to nobody, with
    # a copy to clean a second time
    logdir, again, expected_file = home / "logs", home / "again", home / "expected.json"
    gen = ["gen", str(logdir), "--records", "3000", "--keys", "200", "--codec", "lz4"]
    gen += ["--segment-bytes", "32768", "--expected", str(expected_file), "--format", "json"]
    _run([sys.executable, "-m", "cleanerd", *gen], cwd=REPO)
    shutil.copytree(logdir, again)
    give_to_nobody(home)
    expected = json.loads(expected_file.read_text())["partitions"]["0"]

    out, err = _cleanerd(install, env, home, "verify", str(logdir))
    assert err == ""
    assert "demo-0" in out

    args = ("--roll-active", "--delete-retention-ms", "0", "--format", "json")
    out, err = _cleanerd(install, env, home, "compact", str(logdir), *args)
    assert err == ""
    (summary,) = [json.loads(line) for line in out.splitlines()]
    assert summary["records_in"] == 3000
    assert summary["records_out"] == expected["expected_survivors_drop_tombstones"]
    # a cold cache: the kernels were compiled, and that is reported apart from cleaning time
    assert summary["kernels_compiled"] > 0
    assert summary["compile_seconds"] > 0

    # kept in nobody's own dir in $TMPDIR, so the same cleaning again compiles nothing
    out, err = _cleanerd(install, env, home, "compact", str(again), *args)
    assert err == ""
    (summary,) = [json.loads(line) for line in out.splitlines()]
    assert summary["records_out"] == expected["expected_survivors_drop_tombstones"]
    assert (summary["kernels_compiled"], summary["compile_seconds"]) == (0, 0.0)
    cache = home / "tmp" / f"cleanerd-numba-{unprivileged_uid()}"
    assert list((home / "tmp").iterdir()) == [cache]  # no temporary cache left behind
    assert (cache.stat().st_uid, stat.S_IMODE(cache.stat().st_mode)) == (unprivileged_uid(), 0o700)
