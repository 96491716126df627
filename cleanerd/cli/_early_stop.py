"""SIGTERM/SIGINT for ``cleanerd run`` from the first lines of the entry point.

Until a handler is installed a SIGTERM ends the process by the signal (exit 143), and ``run``
spends its first seconds importing numpy, numba and aiohttp and loading its config. So the entry
point installs this handler before it imports any command: a stop that early leaves at once with
exit 0, since nothing is locked or written yet. The daemon replaces it with its own handlers as
the first step of its start (``Daemon.run``), before it locks a log dir, so from then on a stop
goes through its orderly shutdown instead.

The interpreter's own start (the few tens of milliseconds before the entry point runs) cannot be
covered by any Python code: a signal then still ends the process.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_installed = False  # only the console entry installs; in-process callers keep their handlers


def _stop_now(signum: int, _frame: FrameType | None) -> None:
    """Leave with exit 0: the daemon has not locked or touched anything yet."""
    name = signal.Signals(signum).name
    try:
        sys.stderr.write(f"cleanerd: {name} during start-up, before any log dir was locked\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the exit code says it all
        pass
    os._exit(0)


def install() -> None:
    """Make SIGTERM and SIGINT exit 0 from now until the daemon installs its own handlers; a
    SIGHUP that early is ignored (its default would end the process; there is nothing to
    reload yet, though a config read before it is what the daemon starts with)."""
    global _installed  # noqa: PLW0603 (one process-wide fact, like the handlers themselves)
    _installed = True
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_now)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def ignore() -> None:
    """After the daemon stopped (its loop, and with it its handlers, are gone): the process is
    leaving with the daemon's exit code, so a late signal must not replace it with 143. A no-op
    unless ``install`` ran (a test calling the command in-process keeps its own handlers)."""
    if not _installed:
        return
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
