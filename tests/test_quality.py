"""The package stays ruff-clean, mypy-strict, and its layers import only downwards."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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
FORBIDDEN = {
    "format": ("cleanerd.storage", *_ABOVE_STORAGE),
    "storage": _ABOVE_STORAGE,
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
# top-level modules at the bottom, below every package but format/limits.py: the config tree, its
# sources and the topic-settings model (the engine's and storage's topic values live there)
_BOTTOM = ("cleanerd.storage", *_ABOVE_STORAGE)
_BOTTOM_MODULES = (
    "config.py",
    "config_sources.py",
    "config_topics.py",
    "config_warnings.py",
    "topic_catalog.py",
    "topic_model.py",
)
FORBIDDEN_MODULES = dict.fromkeys(_BOTTOM_MODULES, _BOTTOM)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layers_import_only_downwards() -> None:
    problems = []
    checks = [
        (p, f) for layer, f in FORBIDDEN.items() for p in sorted((PACKAGE / layer).rglob("*.py"))
    ]
    checks += [(PACKAGE / module, f) for module, f in FORBIDDEN_MODULES.items()]
    for path, forbidden in checks:
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert problems == []


# the corrupt-log fuzzer's base logs, mutations and oracle: the tests' own modules, which
# bench/fuzz_compact.py runs at scale (the suite needs nothing from bench/)
_FUZZ_LIBRARY = ("tests.fuzz_support", "tests.fuzz_mutations")
_TEST_SUITE = ("pytest", "_pytest", "hypothesis", "conftest", "tests")


def test_the_bench_needs_only_the_fuzz_library_of_the_tests() -> None:
    """Of tests/, bench/ imports only the fuzz library, and that imports nothing of the suite
    (no pytest, hypothesis, fixtures or test modules), so a benchmark never loads the suite."""
    problems = []
    for path in sorted((REPO / "bench").glob("*.py")):
        for name in _imports(path):
            if (name == "tests" or name.startswith("tests.")) and name not in _FUZZ_LIBRARY:
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    for module in _FUZZ_LIBRARY:
        path = REPO / (module.replace(".", "/") + ".py")
        for name in _imports(path):
            suite = name.split(".")[0] in _TEST_SUITE or name.startswith("test_")
            if suite and name not in _FUZZ_LIBRARY:
                problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert problems == []


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
    _assert_tool_passes("ruff", "check", "cleanerd", "tests", "bench")


def test_ruff_format_clean() -> None:
    """The formatter's output is the only layout: a diff here means run ``ruff format .``."""
    _assert_tool_passes("ruff", "format", "--check", "--diff", ".")


def test_no_test_sets_a_hypothesis_deadline() -> None:
    """Deadlines are wall-clock assertions; the profile in conftest.py turns them off for all."""
    offenders = [
        f"{path.name}:{number}"
        for path in sorted((REPO / "tests").glob("*.py"))
        if path.name != "conftest.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bdeadline\s*=\s*(None|\d|timedelta)", line)
    ]
    assert not offenders, offenders


def test_mypy_strict_clean() -> None:
    """The package, the tests and the benchmarks: pyproject.toml's ``[tool.mypy]`` (strict)."""
    _assert_tool_passes("mypy", "cleanerd", "tests", "bench")
