"""``cleanerd run``: the daemon, until SIGTERM/SIGINT.

``run`` loads the config (defaults < ``--config`` TOML < ``--kafka-properties`` < ``CLEANERD_*``
environment < ``--set``), configures logging and runs the daemon until SIGTERM/SIGINT.
Exit codes: 0 stopped cleanly (SIGTERM/SIGINT at any moment, start-up included: see
``early_stop``); 1 a log dir is missing, not a directory or locked, the port is taken, the
daemon failed, or a cleaning outlived ``cleanerd.shutdown.timeout.ms``; 2 invalid configuration
(one line per problem), or a log dir's pause record (``cleanerd-paused.json``) that cannot be
read: like a bad config it needs an operator, and a restart cannot help (systemd's unit does not
restart on 2); the daemon does not start without it, as it would clean partitions someone
paused. While it runs, the address it bound is recorded for ``cleanerd ctl``
(``_daemon_address``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from cleanerd._kernel import use_numba
from cleanerd.cli import _early_stop as early_stop
from cleanerd.cli._config import check_engine, config_options, load_from_options, parse_sets
from cleanerd.cli._daemon_address import forget_address, record_address
from cleanerd.cli._errors import print_error
from cleanerd.config import LoadedConfig, load_config
from cleanerd.service import Daemon, StartupError, configure_logging, run_async
from cleanerd.storage import PauseFileError, StorageError


@click.command()
@config_options
def run(config_file: Path | None, kafka_properties: Path | None, sets: tuple[str, ...]) -> None:
    """Run the compaction daemon on the configured log dirs (log.dirs, default ./data).

    Serves /metrics, /healthz, /status and the admin API on cleanerd.http.listen (default
    127.0.0.1:9404). SIGTERM/SIGINT: stop; SIGHUP: reload the config.
    """
    loaded = load_from_options(config_file, kafka_properties, sets)
    check_engine(loaded)
    configure_logging(loaded.config.log_format, loaded.config.log_level)
    for note in loaded.notes:
        click.echo(f"note: {note}", err=True)

    def reload() -> LoadedConfig:
        return load_config(
            config_file=config_file,
            kafka_properties=kafka_properties,
            overrides=parse_sets(sets),
        )

    async def daemon() -> int:
        running = Daemon(loaded, reload)
        recorder = asyncio.create_task(record_address(running))
        try:
            return await running.run()
        finally:  # stopped: the process leaves with this code, whatever signal comes now
            early_stop.ignore()
            recorder.cancel()
            forget_address(loaded.config.log_dirs)

    # a daemon calls kernels all its life: numba's dispatcher checks their arguments' types in C
    # (under 1 us a call, the kept copies' check in Python 2 to 3 us: cleanerd/_kernel.py), and
    # numba's start-up is paid once
    use_numba()
    try:
        code = run_async(daemon)
    except PauseFileError as e:
        click.echo(f"error: {e}; fix or remove it (each pause in it is then lost)", err=True)
        raise SystemExit(2) from None
    except (StartupError, StorageError) as e:
        print_error(f"{e}")
        raise SystemExit(1) from None
    raise SystemExit(code)
