"""Where the Kafka-written segments are (see ``tests/fixtures/kafka/README.md``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
_REPO = _TESTS.parent


def find_kafka_fixtures() -> Path:
    """Directory of the Kafka-written segments (see ``tests/fixtures/kafka/README.md``).

    ``CLEANERD_FIXTURES`` wins when set (it must exist); then the copy vendored in the repo;
    then ``<repo>/../shared/fixtures/kafka``. Fails (never skips) when none is there.
    """
    env = os.environ.get("CLEANERD_FIXTURES")
    if env:
        path = Path(env)
        if not path.is_dir():
            pytest.fail(f"CLEANERD_FIXTURES={env!r} is not a directory", pytrace=False)
        return path
    for path in (_TESTS / "fixtures" / "kafka", _REPO.parent / "shared" / "fixtures" / "kafka"):
        if path.is_dir():
            return path
    pytest.fail(
        "Kafka fixtures not found: set CLEANERD_FIXTURES, or restore tests/fixtures/kafka/",
        pytrace=False,
    )
