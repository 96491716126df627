"""Every error line of every command has one style, ``error: ...``: the lines the commands
print themselves and click's usage and command errors alike (click alone prints ``Error:``)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from cleanerd.cli import COMMANDS, cli
from tests.support.cli import run


def every_command() -> list[tuple[str, ...]]:
    """Each command's path, subcommands of the groups included (loading each command)."""
    ctx = click.Context(cli)
    paths: list[tuple[str, ...]] = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        paths.append((name,))
        if isinstance(command, click.Group):
            paths += [(name, sub) for sub in command.commands]
    return paths


@pytest.mark.parametrize("path", every_command(), ids=" ".join)
def test_a_usage_error_says_error_in_lowercase(path: tuple[str, ...]) -> None:
    result = run(*path, "--no-such-option")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "error: No such option '--no-such-option'."
    assert "Error:" not in result.stderr
    assert f"Try 'cli {' '.join(path)} --help' for help." in result.stderr  # runner's name


def test_the_group_own_usage_error_too() -> None:
    result = run("--no-such-option")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "error: No such option '--no-such-option'."


def test_a_command_failure_reported_through_click_says_error(tmp_path: Path) -> None:
    """``gen`` refusing a bad value, and ``compact`` refusing a missing dir (click's checks)."""
    for args in (
        ("gen", tmp_path / "logs", "--records", "-5"),
        ("compact", tmp_path / "missing"),
    ):
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines()[-1].startswith("error: "), result.stderr
        assert "Error:" not in result.stderr
