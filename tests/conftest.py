"""Shared test fixtures."""

from __future__ import annotations

import fnmatch
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support.kafka_fixtures import find_kafka_fixtures
from tests.support.tools import require

_TESTS = Path(__file__).resolve().parent

# Hypothesis: no wall-clock deadline anywhere (a loaded CI machine makes fsync-heavy examples slow,
# and a deadline is a timed assertion). "ci" also derandomizes, so a CI failure replays exactly;
# .ci/run selects it through HYPOTHESIS_PROFILE. Tests set max_examples and health checks only.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Spark's Python workers run this interpreter (cleanerd.spark._session sets it too, but here it is
# set before any test, so the environment check below sees it unchanged).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# Variables pytest itself sets and clears around each test.
_PYTEST_OWNED_ENV = frozenset({"PYTEST_CURRENT_TEST"})


@pytest.fixture(autouse=True)
def _environment_unchanged() -> Iterator[None]:
    """Fail a test that leaves ``os.environ`` changed: a leak couples later tests to it.

    Runs outermost (before ``monkeypatch`` is set up, after it is undone), so what monkeypatch
    restores does not count; the environment is put back before failing, so one leak does not
    fail every later test.
    """
    before = {k: v for k, v in os.environ.items() if k not in _PYTEST_OWNED_ENV}
    yield
    after = {k: v for k, v in os.environ.items() if k not in _PYTEST_OWNED_ENV}
    if after == before:
        return
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    for key in changed:
        if key in before:
            os.environ[key] = before[key]
        else:
            del os.environ[key]
    pytest.fail(f"the test left os.environ changed: {', '.join(changed)}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_fixtures() -> Path:
    """Path of the directory holding the Kafka-written partition fixtures."""
    return find_kafka_fixtures()


@pytest.fixture(autouse=True)
def _spark_needs_java(request: pytest.FixtureRequest) -> None:
    """A test marked ``spark`` starts a JVM: without Java it fails naming the package to install
    (pyspark's own error is a gateway exit code)."""
    if request.node.get_closest_marker("spark") is not None:
        require("java")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One ``local[2]`` SparkSession for the whole run: a session takes about 10 s to start."""
    from cleanerd.spark._session import build_session  # noqa: PLC0415 (pyspark loads on use)

    require("java")
    session = build_session("local[2]", app_name="cleanerd-tests")
    yield session
    session.stop()


# Markers applied from where a test lives and what it uses, so a new test in these files, or one
# taking these fixtures, is marked without remembering to. ``slow`` is written on each slow test.
# The patterns match a test file's path below tests/ (fnmatch: ``*`` crosses ``/``).
_FILE_MARKERS = {
    "spark/test_*.py": ("spark",),  # a SparkSession or spark-submit
    "e2e/test_daemon_spark.py": ("spark",),
    "e2e/test_daemon_*.py": ("e2e",),  # a real daemon process
    "deploy/test_container.py": ("container",),  # buildah builds and runs the image
    "project/test_packaging.py": ("packaging",),  # sdist and wheel builds
}
_FIXTURE_MARKERS = {"spark": ("spark",)}
# a test, or a fixture it takes, that constructs one of these starts a real daemon process
_E2E_CALLS = ("DaemonProcess(",)


def _source_calls(function: Callable[..., Any], cache: dict[Any, bool]) -> bool:
    if function not in cache:
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            source = ""
        cache[function] = any(call in source for call in _E2E_CALLS)
    return cache[function]


def _starts_a_daemon(item: pytest.Function, cache: dict[Any, bool]) -> bool:
    if _source_calls(item.function, cache):
        return True
    fixtures = item._fixtureinfo.name2fixturedefs
    return any(_source_calls(d.func, cache) for defs in fixtures.values() for d in defs)


def _below_tests(path: Path) -> str:
    """``path`` relative to tests/ (``spark/test_read.py``); its name when it is elsewhere."""
    resolved = path.resolve()
    return resolved.relative_to(_TESTS).as_posix() if resolved.is_relative_to(_TESTS) else path.name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    cache: dict[Any, bool] = {}
    for item in items:
        names: set[str] = set()
        where = _below_tests(item.path)
        for pattern, markers in _FILE_MARKERS.items():
            if fnmatch.fnmatchcase(where, pattern):
                names.update(markers)
        for fixture in getattr(item, "fixturenames", ()):
            names.update(_FIXTURE_MARKERS.get(fixture, ()))
        if isinstance(item, pytest.Function) and _starts_a_daemon(item, cache):
            names.add("e2e")
        for name in sorted(names - {m.name for m in item.iter_markers()}):
            item.add_marker(name)
