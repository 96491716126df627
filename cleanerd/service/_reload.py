"""What a SIGHUP changes: the new config's run-time settings, compared with what the daemon runs.

Restart-only settings (``restart_only``: log dirs, the HTTP address, the log format, the Spark
master and conf) keep their running values across a reload. So the config the daemon holds after
a reload is the new file's with those values put back, and the next reload compares with that,
not with the last file read: an HTTP port changed and then put back as it was is no change.
"""

from __future__ import annotations

import dataclasses

from cleanerd.config import (
    FIELDS,
    LISTEN,
    RESTART_SETTINGS,
    LoadedConfig,
    changed_settings,
    restart_only,
)

_LISTEN_FIELDS = ("http_host", "http_port")


def _restart_fields() -> list[str]:
    """The ``CleanerdConfig`` fields that hold the restart-only settings."""
    return [
        field
        for name in sorted(RESTART_SETTINGS)
        for field in (_LISTEN_FIELDS if name == LISTEN else (FIELDS[name],))
    ] + ["spark_conf"]


def keep_restart_settings(running: LoadedConfig, new: LoadedConfig) -> LoadedConfig:
    """``new`` with the running config's restart-only settings and their sources."""
    config = new.config.model_copy(
        update={field: getattr(running.config, field) for field in _restart_fields()}
    )
    origins = {n: o for n, o in new.origins.items() if not restart_only(n)}
    origins.update({n: o for n, o in running.origins.items() if restart_only(n)})
    return dataclasses.replace(new, config=config, origins=origins)


def compare_reload(
    running: LoadedConfig, new: LoadedConfig
) -> tuple[LoadedConfig, list[str], list[str]]:
    """(the config to run with, run-time settings changed, restart-only settings changed)."""
    changed = changed_settings(running, new)
    restart = sorted(name for name in changed if restart_only(name))
    applied = [name for name in changed if not restart_only(name)]
    return keep_restart_settings(running, new), applied, restart
