"""The README's test command works on a fresh machine: it installs what the tests drive, CI runs
exactly it, and a test whose outside program is missing says which package to install."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.tools import debian_packages, require

REPO = Path(__file__).resolve().parents[2]


def _readme_command(number: int) -> str:
    """The command under ``# N.`` in the README's Quick start block (its comment may wrap)."""
    block = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"# {number}."))
    return next(line for line in lines[start + 1 :] if not line.startswith("#"))


def test_ci_runs_exactly_the_readme_test_command() -> None:
    command = _readme_command(2)
    assert command == "tests/run"
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert command in ci  # a line of its own: nothing added before or after it


def test_a_missing_program_fails_its_test_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as failed:
        require("promtool")
    assert "promtool is not installed: apt-get install prometheus" in str(failed.value)
    tool = tmp_path / "promtool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert require("promtool") == str(tool)


def test_no_test_runs_an_outside_program_without_the_guard() -> None:
    """A program named by a string literal as the first item of an argument list bypasses
    ``require`` and fails with a raw FileNotFoundError where it is missing."""
    programs = "|".join(re.escape(p) for p in debian_packages())
    literal = re.compile(rf"""\[\s*["']({programs})["']\s*,""")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert offenders == []


def _packages_step(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """``tests/run --packages`` with only ``bin_dir`` on PATH."""
    return subprocess.run(
        [str(bin_dir / "bash"), str(REPO / "tests" / "run"), "--packages"],
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        check=False,
    )


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def test_the_test_command_installs_the_packages_of_missing_programs(tmp_path: Path) -> None:
    """``tests/run --packages`` as a user who is not root, with every listed program missing
    and a recording sudo and apt-get: it installs each package once, through sudo; nothing
    when all are there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    _script(bin_dir / "sudo", f'echo "sudo $*" >> {calls}\nexec "$@"')
    _script(bin_dir / "apt-get", f'echo "apt-get $*" >> {calls}')
    _script(bin_dir / "id", "echo 1000")  # not root
    for name in ("bash", "dirname", "sort", "tr", "cat"):
        found = shutil.which(name)
        assert found is not None
        (bin_dir / name).symlink_to(found)
    # Debian's own python3: no ensurepip until python3-venv is installed
    _script(bin_dir / "python3", 'if [ "$2" = "import ensurepip" ]; then exit 1; fi')
    _script(bin_dir / "ldconfig", "true")  # no shared library listed: libsnappy.so.1 missing

    result = _packages_step(bin_dir)
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    installs = [line for line in lines if line.startswith("sudo apt-get install")]
    assert len(installs) == 1
    assert "sudo apt-get update -q" in lines
    wanted = sorted({*debian_packages().values(), "python3-venv"})
    assert sorted(installs[0].split("--no-install-recommends")[1].split()) == wanted

    for program in debian_packages():  # now every program is there: nothing is installed
        if not (bin_dir / program).exists():
            _script(bin_dir / program, "true")
    _script(bin_dir / "python3", "true")  # python3-venv installed: ensurepip imports
    listed = [f"\\t{name} (libc6,x86-64) => /usr/lib/{name}" for name in debian_packages()]
    _script(bin_dir / "ldconfig", "\n".join(f'echo -e "{line}"' for line in listed))
    calls.unlink()
    again = _packages_step(bin_dir)
    assert again.returncode == 0, again.stderr
    assert not calls.exists()
