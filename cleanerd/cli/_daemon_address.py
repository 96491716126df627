"""Where a running daemon's HTTP port is, for ``cleanerd ctl``.

The HTTP address is restart-only: after the config file was edited (and SIGHUP'd) the daemon
still listens where it started. So ``run`` records the address it actually bound (port 0
resolved) in ``<log dir>/.cleanerd-http.json`` of each log dir it holds, with its pid, and
removes it when it stops; ``ctl`` without ``--url`` uses the address recorded by a live daemon
on the config's log dirs, else the config's address.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from cleanerd.service import Daemon

ADDRESS_FILE = ".cleanerd-http.json"
"""Where a running daemon records the address it bound, in each of its log dirs."""


async def record_address(daemon: Daemon) -> None:
    """Once the daemon's HTTP port is bound, record its address for ``ctl`` (see the module
    doc). Best effort: a log dir that cannot take the file leaves ``ctl`` the config's address."""
    url = await daemon.http_url()
    if url is None:
        return  # cleanerd.http.listen = off: nothing to record
    record = {"pid": os.getpid(), "url": url}
    for directory in daemon.loaded.config.log_dirs:
        tmp = directory / f"{ADDRESS_FILE}.tmp"
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(record) + "\n")
            tmp.replace(directory / ADDRESS_FILE)


def forget_address(log_dirs: tuple[Path, ...]) -> None:
    """Remove the records this process wrote (not another daemon's, should one have started)."""
    for directory in log_dirs:
        path = directory / ADDRESS_FILE
        record = _read_record(path)
        if record is not None and record[0] == os.getpid():
            with contextlib.suppress(OSError):
                path.unlink()


def _read_record(path: Path) -> tuple[int, str] | None:
    try:
        record = json.loads(path.read_text())
        pid, url = record["pid"], record["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not isinstance(url, str):
        return None
    return pid, url


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (the service account's)
        return True
    return True


def recorded_address(log_dirs: tuple[Path, ...]) -> tuple[int, str] | None:
    """(pid, URL) a live daemon recorded in one of ``log_dirs``; None when none did."""
    for directory in log_dirs:
        record = _read_record(directory / ADDRESS_FILE)
        if record is not None and _alive(record[0]):
            return record
    return None
