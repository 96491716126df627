"""The install the documents describe is one that works from this repository: every ``pip
install`` they show installs a path (a clone, a built wheel), never the name ``cleanerd`` from a
package index, where it is not published (anyone could publish something under it). The version
has one home, ``cleanerd.__version__``, and CHANGELOG.md has an entry for it."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from cleanerd import __version__

REPO = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {".git", ".venv", "node_modules", "fixtures", ".hypothesis"}


def documents() -> list[Path]:
    found = [REPO / "Dockerfile"]
    for path in sorted(REPO.rglob("*")):
        if SKIPPED_DIRS & set(path.relative_to(REPO).parts):
            continue
        if path.suffix in {".md", ".sh", ".service", ".toml", ".default"} and path.is_file():
            found.append(path)
    return found


def pip_installs(text: str) -> list[str]:
    """Each ``pip install ...`` command in ``text``, up to the end of its line or a comment,
    backtick or ``&&``, with backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return re.findall(r"pip3? install\b([^`#\n&;|]*)", joined)


def installed_names(arguments: str) -> list[str]:
    """What a ``pip install`` argument list installs (its options and their values dropped)."""
    words = shlex.split(arguments)
    targets, skip = [], False
    takes_value = {"-r", "--requirement", "-c", "--constraint", "--find-links", "-f", "-t"}
    for word in words:
        if skip:
            skip = False
        elif word in takes_value:
            skip = True
        elif not word.startswith("-"):
            targets.append(word)
    return targets


def from_an_index(target: str) -> bool:
    """A requirement naming a project (resolved on an index), not a path or a wheel file."""
    if target.startswith(("/", ".", "$", "~")) or target.endswith(".whl") or ".whl[" in target:
        return False
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[a-z,]+\])?([<>=!~].*)?", target) is not None


def names_from_an_index(arguments: str) -> list[str]:
    """The projects a ``pip install`` resolves on a package index (none with ``--no-index``:
    the Dockerfile installs its own wheels by name from a local dir)."""
    if "--no-index" in shlex.split(arguments):
        return []
    targets = [t for t in installed_names(arguments) if from_an_index(t)]
    return [re.split(r"[\[<>=!~]", t)[0].lower() for t in targets]


def test_no_document_installs_cleanerd_from_a_package_index() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: pip install{arguments}"
        for path in documents()
        for arguments in pip_installs(path.read_text(errors="replace"))
        if "cleanerd" in names_from_an_index(arguments)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("command", "by_name"),
    [
        ("pip install cleanerd", True),
        ("pip install 'cleanerd[spark]'", True),
        ("pip install --upgrade cleanerd", True),
        ("pip install .", False),
        ("pip install './dist/cleanerd-0.1.0-py3-none-any.whl[spark]'", False),
        ("pip install --no-index --find-links /wheels cleanerd", False),
        ("pip install -q -e '.[dev,spark]'", False),
    ],
)
def test_the_check_tells_a_name_from_a_path(command: str, by_name: bool) -> None:
    (arguments,) = pip_installs(command)
    assert ("cleanerd" in names_from_an_index(arguments)) is by_name


def test_the_version_has_one_home() -> None:
    """pyproject.toml reads the version from ``cleanerd.__version__`` and states none itself."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cleanerd.__version__"}


def test_the_changelog_has_an_entry_for_this_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+)", changelog, re.MULTILINE)
    assert releases, "CHANGELOG.md has no '## <version>' heading"
    assert releases[0] == __version__
