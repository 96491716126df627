"""The ``cleanerd`` command line: one click group, one module per command, loaded on use.

A command's module is imported only when that command runs (or ``--help`` lists them all): the
daemon's imports (numba, aiohttp) take seconds, and ``cleanerd run`` must be able to take a
SIGTERM from its first moment (``early_stop``). Each command is wrapped by ``errors.guard`` as it
loads, so an OS error ends every command with one line and exit 1, never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from cleanerd import __version__
from cleanerd.cli import early_stop
from cleanerd.cli.errors import guard

COMMANDS = {
    "compact": ("cleanerd.cli.compact", "compact"),
    "config": ("cleanerd.cli.config_cmd", "config_group"),
    "ctl": ("cleanerd.cli.run", "ctl"),
    "demo": ("cleanerd.cli.demo", "demo"),
    "dump": ("cleanerd.cli.dump", "dump"),
    "gen": ("cleanerd.cli.gen", "gen"),
    "plan": ("cleanerd.cli.plan", "plan_command"),
    "run": ("cleanerd.cli.run", "run"),
    "verify": ("cleanerd.cli.verify", "verify"),
    "warmup": ("cleanerd.cli.warmup", "warmup"),
}
"""Command name -> (module, attribute)."""


class LazyGroup(click.Group):
    """A group whose commands are imported (and guarded) when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        module, attribute = found
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring mistake
            raise TypeError(f"{module}.{attribute} is not a click command")
        return guard(command)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cleanerd")
def cli() -> None:
    """Log compaction for Apache Kafka-format partition logs."""


def _command(args: list[str]) -> str | None:
    """The command named on the command line (the group's own options take no values)."""
    return next((a for a in args if not a.startswith("-")), None)


def main() -> None:
    """Console-script entry point."""
    if _command(sys.argv[1:]) == "run":
        early_stop.install()
    cli()
