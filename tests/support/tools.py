"""The outside programs some tests drive: found on PATH, or the test fails naming the package.

Which Debian package brings each program is listed once, in ``tests/debian-packages.txt``, which
``tests/run`` (the README's test command) reads to install what is missing. A test that needs
a program calls ``require`` first: a missing one fails the test with the ``apt-get install``
line, never a raw ``FileNotFoundError`` from subprocess and never a silent skip.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PACKAGE_LIST = Path(__file__).resolve().parents[1] / "debian-packages.txt"


def debian_packages() -> dict[str, str]:
    """Program -> the Debian package that installs it (``tests/debian-packages.txt``)."""
    packages = {}
    for line in PACKAGE_LIST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            program, package = line.split()
            packages[program] = package
    return packages


def require(program: str) -> str:
    """The path of ``program``; fails the calling test, naming its package, when it is missing."""
    package = debian_packages()[program]  # a KeyError here: add the program to the list
    found = shutil.which(program)
    if found is None:
        pytest.fail(
            f"{program} is not installed: apt-get install {package} "
            "(tests/run installs every package the tests need)",
            pytrace=False,
        )
    return found
