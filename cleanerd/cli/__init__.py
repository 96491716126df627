"""The ``cleanerd`` command line: one click group, one module per command."""

from __future__ import annotations

import click

from cleanerd import __version__
from cleanerd.cli.compact import compact
from cleanerd.cli.config_cmd import config_group
from cleanerd.cli.demo import demo
from cleanerd.cli.dump import dump
from cleanerd.cli.gen import gen
from cleanerd.cli.plan import plan_command
from cleanerd.cli.run import ctl, run
from cleanerd.cli.verify import verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cleanerd")
def cli() -> None:
    """Log compaction for Apache Kafka-format partition logs."""


cli.add_command(dump)
cli.add_command(verify)
cli.add_command(gen)
cli.add_command(compact)
cli.add_command(plan_command)
cli.add_command(run)
cli.add_command(ctl)
cli.add_command(demo)
cli.add_command(config_group)


def main() -> None:
    """Console-script entry point."""
    cli()
