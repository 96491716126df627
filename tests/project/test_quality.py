"""The package stays ruff-clean, mypy-strict, and its layers import only downwards."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "cleanerd"
# layer -> packages it must not import (docs/architecture.md: imports only go downwards)
_DRIVERS = ("cleanerd.service", "cleanerd.spark", "cleanerd.cli")
_ENGINE = ("asyncio", "pyspark", *_DRIVERS, "click", "rich")
_ABOVE_STORAGE = (
    "cleanerd.compaction",
    "cleanerd.snapshot",
    "cleanerd.scheduling",
    "cleanerd.inspect",
    "cleanerd.workload",
    *_ENGINE,
)
_ABOVE_TOPICS = ("cleanerd.storage", "cleanerd.config", *_ABOVE_STORAGE)
FORBIDDEN = {
    "format": ("cleanerd.topics", *_ABOVE_TOPICS),
    # the topic settings model and the daemon's configuration: below everything but format
    "topics": _ABOVE_TOPICS,
    "config": ("cleanerd.storage", *_ABOVE_STORAGE),
    "storage": ("cleanerd.config", *_ABOVE_STORAGE),
    "compaction": ("cleanerd.snapshot", "cleanerd.inspect", "cleanerd.workload", *_ENGINE),
    "snapshot": ("cleanerd.scheduling", "cleanerd.inspect", "cleanerd.workload", *_ENGINE),
    "scheduling": _ENGINE,
    # beside the engine: driven by thin CLI wrappers and by tests, never by the daemon's loop
    "inspect": _ENGINE,
    "workload": _ENGINE,
    # the two drivers: each may use everything below it; spark/ is the only pyspark code and runs
    # no event loop, service/ holds the daemon's asyncio code (cli/ may run it)
    "spark": ("asyncio", "cleanerd.service", "cleanerd.cli"),
    "service": ("pyspark", "cleanerd.cli"),
}
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
PUBLIC_MODULES = {
    "cleanerd.format.kernels",  # the numba kernels' building blocks, used as a namespace
    "cleanerd.format.layout",  # byte offsets of a batch's fields, used as a namespace
    "cleanerd.spark.executor",  # run by name by Spark's Python daemon (spark.python.daemon.module)
    "cleanerd.cli.spark_cmd",  # run as a file by spark-submit (docs/spark.md)
}
"""The only modules inside a package whose names do not start with ``_``."""


def _imports(path: Path, *, typing_only: bool = True) -> set[str]:
    """The modules ``path`` imports (``typing_only``: those under ``if TYPE_CHECKING`` too)."""
    names: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    if not typing_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layers_import_only_downwards() -> None:
    assert set(FORBIDDEN) == set(PACKAGES) - {"cli"}  # cli/ is the top: it may import anything
    problems = []
    checks = [
        (p, f) for layer, f in FORBIDDEN.items() for p in sorted((PACKAGE / layer).rglob("*.py"))
    ]
    for path, forbidden in checks:
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert problems == []


def _owner(path: Path) -> str | None:
    """The package a file belongs to (None for bench/ and the package's top-level modules)."""
    parts = path.relative_to(REPO).parts
    return parts[1] if parts[0] == "cleanerd" and len(parts) > 2 else None


def test_other_packages_use_only_front_doors() -> None:
    """A package is used through its ``__init__`` (or a public module named in
    ``PUBLIC_MODULES``), never through a private module: the rest of it can change freely.
    Holds for the package, Spark's entry module and the benchmarks; the tests may reach inside."""
    problems = []
    outside = [REPO / "pyspark_cleanerd.py", *(REPO / "bench").glob("*.py")]
    for path in sorted([*PACKAGE.rglob("*.py"), *outside]):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "cleanerd" or len(parts) < 3 or parts[1] == _owner(path):
                continue
            inside = PACKAGE.joinpath(*parts[1:3])
            exists = inside.with_suffix(".py").is_file() or inside.is_dir()
            # a module that does not exist here is a fallback for an older tree (bench/compare.py)
            if exists and ".".join(parts[:3]) not in PUBLIC_MODULES:
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert problems == []


def test_every_package_has_a_front_door_and_private_insides() -> None:
    """Each package's ``__init__`` has ``__all__``; every other module of it is ``_private``
    unless ``PUBLIC_MODULES`` names it."""
    problems = []
    for package in PACKAGES:
        module = importlib.import_module(f"cleanerd.{package}")
        if not getattr(module, "__all__", None):
            problems.append(f"cleanerd.{package} has no __all__")
        for path in sorted((PACKAGE / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            private = path.name.startswith("_")  # __init__, __main__ and _private modules
            if not private and name not in PUBLIC_MODULES:
                problems.append(f"{name} is neither private nor a named public module")
    assert problems == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_a_front_door_lists_is_there(package: str) -> None:
    """``__all__`` (from ``__init__.pyi`` where the names load lazily) names only real things,
    and each front-door name is one object: no two private modules give a name two meanings."""
    module = importlib.import_module(f"cleanerd.{package}")
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []


def test_no_import_cycles_between_modules() -> None:
    """No module imports itself through others (a cycle makes import order matter, and makes
    a module's meaning depend on who imported first). Imports inside functions count too."""
    graph: dict[str, set[str]] = {}
    modules = {
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    for name, path in modules.items():
        imported = _imports(path, typing_only=False)
        graph[name] = {m for m in imported if m in modules and m != name}
    cycles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in seen and not _is_front_door(nxt):
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert cycles == [], "\n".join(cycles)


def _is_front_door(name: str) -> bool:
    """A package's ``__init__``: it imports its modules only lazily (no edge at import)."""
    return (PACKAGE / name.removeprefix("cleanerd.").replace(".", "/") / "__init__.py").is_file()


# the corrupt-log fuzzer's base logs, mutations and oracle: the tests' own modules, which
# bench/fuzz_compact.py runs at scale (the suite needs nothing from bench/)
_FUZZ_LIBRARY = ("tests.support.fuzz_support", "tests.support.fuzz_mutations")
_FUZZ_PACKAGES = ("tests", "tests.support")  # importing the library runs their __init__.py too
_TEST_SUITE = ("pytest", "_pytest", "hypothesis", "conftest", "tests")


def test_the_bench_needs_only_the_fuzz_library_of_the_tests() -> None:
    """Of tests/, bench/ imports only the fuzz library, and that imports nothing of the suite
    (no pytest, hypothesis, fixtures or test modules), so a benchmark never loads the suite."""
    problems = []
    for path in sorted((REPO / "bench").glob("*.py")):
        for name in _imports(path):
            if (name == "tests" or name.startswith("tests.")) and name not in _FUZZ_LIBRARY:
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    for module in (*_FUZZ_PACKAGES, *_FUZZ_LIBRARY):
        path = REPO / module.replace(".", "/")
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for name in _imports(path):
            suite = name.split(".")[0] in _TEST_SUITE or name.startswith("test_")
            if suite and name not in _FUZZ_LIBRARY:
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert problems == []


def test_every_kernel_is_made_by_the_one_decorator() -> None:
    """``cleanerd._kernel.kernel`` is how a kernel is made (its cache loads without numba's
    compiler); a bare ``njit`` elsewhere would set that compiler up for every command again."""
    bare = [
        str(path.relative_to(REPO))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_kernel.py" and re.search(r"\bnjit\b|numba\.jit\b", path.read_text())
    ]
    assert bare == []


def test_architecture_names_only_real_modules() -> None:
    """docs/architecture.md is a newcomer's map: every module path it names must exist."""
    text = (REPO / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"cleanerd/[\w/]+\.py", text))
    assert len(named) > 20  # the document names modules module by module
    missing = sorted(p for p in named if not (REPO / p).is_file())
    assert missing == []


def test_architecture_names_every_module() -> None:
    """Every module under cleanerd/ has its line in docs/architecture.md ("Every module")."""
    text = (REPO / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"cleanerd/[\w/]+\.py", text))
    modules = {p.relative_to(REPO).as_posix() for p in PACKAGE.rglob("*.py")}
    unnamed = sorted(modules - named)
    assert unnamed == [], "add a line for each to docs/architecture.md: " + ", ".join(unnamed)


def test_package_ships_its_type_hints() -> None:
    """PEP 561: without py.typed in the wheel, mypy treats an installed cleanerd as untyped."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["cleanerd"]
    assert (PACKAGE / "py.typed").is_file()


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is not installed next to {sys.executable} (pip install -e '.[dev]')"
    return found


def _assert_tool_passes(name: str, *args: str) -> None:
    result = subprocess.run(
        [_tool(name), *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_clean() -> None:
    _assert_tool_passes("ruff", "check", "cleanerd", "pyspark_cleanerd.py", "tests", "bench")


def test_ruff_format_clean() -> None:
    """The formatter's output is the only layout: a diff here means run ``ruff format .``."""
    _assert_tool_passes("ruff", "format", "--check", "--diff", ".")


def test_no_test_sets_a_hypothesis_deadline() -> None:
    """Deadlines are wall-clock assertions; the profile in conftest.py turns them off for all."""
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path.name != "conftest.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bdeadline\s*=\s*(None|\d|timedelta)", line)
    ]
    assert not offenders, offenders


def test_mypy_strict_clean() -> None:
    """The package, Spark's entry module, the tests and the benchmarks: pyproject.toml's
    ``[tool.mypy]`` (strict)."""
    _assert_tool_passes("mypy", "cleanerd", "pyspark_cleanerd.py", "tests", "bench")
