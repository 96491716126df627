"""The daemon run in the test's own event loop: built from ``--set``-style settings, with a
systemd notifier that records what it would have sent."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from cleanerd.compaction import CleaningAbortedError
from cleanerd.config import load_config
from cleanerd.service import Daemon, KernelLoad
from cleanerd.service._systemd import SystemdNotifier


class RecordingNotifier(SystemdNotifier):
    """Keeps each notification's lines instead of sending them."""

    def __init__(self) -> None:
        super().__init__("/nonexistent/notify")
        self.sent: list[tuple[str, ...]] = []

    def notify(self, *lines: str) -> bool:
        self.sent.append(lines)
        return True

    @property
    def readies(self) -> int:
        """How many READY=1 were sent."""
        return sum("READY=1" in lines for lines in self.sent)


IN_THREADS = {"cleanerd.cleaner.processes": "false"}
"""Settings that run cleanings in the daemon's threads, where a test's stand-in for
``run_clean`` (monkeypatched in ``service._workers``) reaches them; a process would not see it."""


def compacting_daemon(
    logdir: Path,
    settings: Mapping[str, str] | None = None,
    notifier: SystemdNotifier | None = None,
) -> Daemon:
    """A daemon over ``logdir`` that compacts every topic, its HTTP port on any free port, with
    ``settings`` (Kafka names) besides."""
    overrides = {
        "log.dirs": str(logdir),
        "cleanerd.http.listen": "127.0.0.1:0",
        "log.cleanup.policy": "compact",
        **(settings or {}),
    }
    loaded = load_config(env={}, overrides=overrides)
    return Daemon(loaded, lambda: loaded, notifier=notifier)


class HeldKernelLoad:
    """Stands in for ``load_kernels``: holds its thread until released (or told to stop)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(
        self, _root: Path | None, abort_check: Callable[[], bool], _dirs: object
    ) -> KernelLoad:
        self.started.set()
        while not self.release.wait(0.005):
            if abort_check():
                raise CleaningAbortedError("kernel load")
        return KernelLoad(0.5, 3, 0.4)
