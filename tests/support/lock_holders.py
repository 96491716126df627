"""Other processes holding a lock, as the tests need them: a broker (a bare POSIX lock on
``.lock``, the lock Java's ``FileChannel.tryLock`` takes), a cleanerd daemon (``LogDir.lock``
with ``welcome_writers``, as ``cleanerd run`` locks its log dirs), or a cleaning process that
holds a shared throttler's lock (``hold_throttle_lock``, run in a spawned process)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[2]

_BROKER = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("LOCKED", os.getpid(), flush=True)
    sys.stdin.read()
    """
)
_DAEMON = textwrap.dedent(
    """
    import os, sys
    from cleanerd.storage import LogDir
    LogDir(sys.argv[1]).lock(welcome_writers=True)
    print("LOCKED", os.getpid(), flush=True)
    sys.stdin.read()
    """
)


class LockHolder:
    """A running holder; it keeps the lock until :meth:`release` (or the block ends)."""

    def __init__(self, logdir: Path, kind: Literal["broker", "daemon"]) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        script = _BROKER if kind == "broker" else _DAEMON
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, str(logdir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60.0)
        line = self.proc.stdout.readline().strip() if ready else ""
        if line != f"LOCKED {self.proc.pid}":
            self.release()
            raise AssertionError(f"{kind} lock holder did not lock {logdir}: {line!r}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        """Let go (the holder exits when its stdin closes) and wait until it has."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@contextmanager
def holding(logdir: Path, kind: Literal["broker", "daemon"]) -> Iterator[LockHolder]:
    """A process holding ``logdir`` as ``kind`` would, for the block."""
    holder = LockHolder(logdir, kind)
    try:
        yield holder
    finally:
        holder.release()


def hold_throttle_lock(throttler: Any, held: Any) -> None:
    """A spawned process's target: take ``throttler``'s shared lock, say so, and keep it until
    killed (a cleaning process the OOM killer ends between acquire and release)."""
    throttler._lock.acquire()
    held.set()
    threading.Event().wait()
