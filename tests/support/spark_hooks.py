"""Plan B's ``before_write`` hooks for the tests.

They run in Spark's Python workers, which import this file by its module name once a test has
shipped it with ``SparkContext.addPyFile`` (``ship``). Each takes the write task's group number
and staging dir; the staging root sits in the test's ``tmp_path``, beside the files they use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

HOLD_SECONDS = 120.0
"""How long a held write task waits for ``go`` at most: a liveness bound, not a timing."""


def ship(spark: Any) -> None:
    """Make this module importable in the session's Python workers (once per session)."""
    sc = spark.sparkContext
    if not getattr(sc, "_cleanerd_hooks_shipped", False):
        sc.addPyFile(__file__)
        sc._cleanerd_hooks_shipped = True


def fail_group_1(group: int, staging: Path) -> None:
    """Group 1's write task fails as it starts writing its ``.cleaned`` segments."""
    if group == 1:
        raise RuntimeError(f"injected failure writing group {group}")


def hold(group: int, staging: Path) -> None:
    """Every write task says it started (``gate/writing-<group>``), then waits for ``gate/go``;
    ``gate`` is the dir of that name beside the staging root."""
    gate = next(p / "gate" for p in staging.parents if (p / "gate").is_dir())
    (gate / f"writing-{group}").touch()
    deadline = time.monotonic() + HOLD_SECONDS
    while not (gate / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
