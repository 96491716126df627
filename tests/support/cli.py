"""``cleanerd``'s command line in the tests: in process through click's runner (``run``, ``ok``),
or as a subprocess in ``cleanerd_env``."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner, Result

from cleanerd.cli import cli

REPO = Path(__file__).resolve().parents[2]


def run(*args: str | Path | int) -> Result:
    """``cleanerd ARGS`` in process; an exception escapes (it is a bug, not an exit code)."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def ok(*args: str | Path | int) -> Result:
    """``run`` that must exit 0."""
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


def cleanerd_env(**extra: str) -> dict[str, str]:
    """The environment of a ``python -m cleanerd`` subprocess: this repo's package, none of the
    caller's ``CLEANERD_`` settings, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}
