"""The ``cleanerd`` command line: one click group, one module per command, loaded on use.

A command's module is imported only when that command runs; ``--help`` lists the short help
kept in ``COMMANDS``. The daemon's imports (numba, aiohttp) take seconds, and ``cleanerd run``
must be able to take a SIGTERM from its first moment (``early_stop``). Each command is wrapped
by ``errors.guard`` as it loads, so an OS error ends every command with one line and exit 1,
never a traceback; and every error line, click's usage errors too, starts ``error:``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NamedTuple

import click

from cleanerd import __version__
from cleanerd.cli import _early_stop as early_stop
from cleanerd.cli._errors import guard, restyled

__all__ = ["COMMANDS", "cli", "main"]


class Entry(NamedTuple):
    """Where a command lives, and the one line ``--help`` lists for it without importing it."""

    module: str
    attribute: str
    short_help: str


COMMANDS = {
    "compact": Entry(
        "cleanerd.cli._compact", "compact", "Compact a log dir or partition dirs, once, now."
    ),
    "config": Entry("cleanerd.cli._config", "config_group", "Check or show the configuration."),
    "ctl": Entry(
        "cleanerd.cli._ctl", "ctl", "Ask a running daemon: status, pause, resume, clean now."
    ),
    "demo": Entry("cleanerd.cli._demo", "demo", "Run the daemon on a fresh demo log dir."),
    "dump": Entry(
        "cleanerd.cli._dump", "dump", "Print Kafka log files, as kafka-dump-log.sh does."
    ),
    "erasure": Entry(
        "cleanerd.cli._erasure",
        "erasure_group",
        "Proof of erasure: is an older value of a key still on disk?",
    ),
    "gen": Entry("cleanerd.cli._gen", "gen", "Write a seeded, reproducible workload log."),
    "plan": Entry("cleanerd.cli._plan", "plan_command", "Print each partition's cleaning plan."),
    "run": Entry("cleanerd.cli._run", "run", "Run the compaction daemon."),
    "snapshot": Entry(
        "cleanerd.cli._snapshot",
        "snapshot_group",
        "KIP-630 snapshots: create, list, show, load, fetch, delete.",
    ),
    "spark": Entry(
        "cleanerd.cli.spark_cmd",
        "spark_group",
        "Compact or read Kafka log dirs on Spark (needs the spark extra).",
    ),
    "verify": Entry(
        "cleanerd.cli._verify", "verify", "Check every file of a log dir, changing nothing."
    ),
    "warmup": Entry(
        "cleanerd.cli._warmup", "warmup", "Compile every numba kernel into the kernel cache."
    ),
}
"""Command name -> where it lives and its short help (``--help`` imports no command module)."""


class LazyGroup(click.Group):
    """A group whose commands are imported (and guarded) when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        _choose_kernel_cache()
        command = getattr(importlib.import_module(found.module), found.attribute)
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring mistake
            raise TypeError(f"{found.module}.{found.attribute} is not a click command")
        return guard(command)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as e:  # the group's own options
            raise restyled(e) from e.__cause__

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as e:  # a command's options, arguments or own report
            raise restyled(e) from e.__cause__

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from ``COMMANDS``: click's own would import every command."""
        rows = [(name, COMMANDS[name].short_help) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cleanerd")
def cli() -> None:
    """Log compaction for Apache Kafka-format partition logs."""


def _choose_kernel_cache() -> None:
    """Numba's cache dir, chosen before a command's module imports numba (importing ``cleanerd``
    does not choose it: ``cleanerd._jitcache``). Not for ``--help`` and ``--version``: they need
    no kernel, and choosing probes the candidate dirs with files."""
    from cleanerd._jitcache import configure_numba_cache  # noqa: PLC0415 (docstring)

    configure_numba_cache()


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def _command(args: list[str]) -> str | None:
    """The command named on the command line (the group's own options take no values)."""
    return next((a for a in args if not a.startswith("-")), None)


def main() -> None:
    """Console-script entry point (``python -m cleanerd`` too).

    Numba's cache dir is chosen when a command is looked up, before its module imports numba
    (``_choose_kernel_cache``). numpy's OpenBLAS gets one thread unless the environment says
    otherwise: no command multiplies matrices, and OpenBLAS starts a thread per core when numpy
    is imported, which then spin waiting for work (0.07 s of CPU, a tenth of ``cleanerd verify``,
    on the 2-core dev VM; bench/startup.py).
    """
    os.environ.setdefault(_BLAS_THREADS, "1")  # read once, when numpy loads OpenBLAS
    if _command(sys.argv[1:]) == "run":
        early_stop.install()
    cli()
