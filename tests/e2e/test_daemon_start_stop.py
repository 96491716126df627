"""``cleanerd run`` stopped at any moment of its start: exit 0, never ended by the signal.

The real process is signalled as early as any process can handle a signal (the moment its
SIGTERM handler shows in ``/proc/<pid>/status``; before that the interpreter itself is still
starting) and at several later moments, which fall in the imports, the config load, the lock,
the first survey, the HTTP bind or the running daemon depending on the machine. The phases are
also hit one by one in-process, where the survey can be held still.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cleanerd.config import load_config
from cleanerd.scheduling import Survey
from cleanerd.service import Daemon
from cleanerd.storage import LogDir
from tests.support.e2e_support import DaemonProcess, write_config
from tests.support.logs import two_partitions
from tests.support.polling import poll_until


def _catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler for ``sig`` (``SigCgt`` in /proc), False once gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    line = next(x for x in text.splitlines() if x.startswith("SigCgt:"))
    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)


@pytest.mark.parametrize(
    ("sig", "after_s"),
    [
        (signal.SIGTERM, 0.0),
        (signal.SIGTERM, 0.15),
        (signal.SIGTERM, 0.5),
        (signal.SIGTERM, 1.2),
        (signal.SIGTERM, 2.5),
        (signal.SIGINT, 0.0),
        (signal.SIGINT, 1.2),
    ],
)
def test_a_stop_early_in_the_start_exits_0(tmp_path: Path, sig: int, after_s: float) -> None:
    logdir = two_partitions(tmp_path)
    config = write_config(tmp_path, {"log.dirs": str(logdir), "log.cleanup.policy": "compact"})
    daemon = DaemonProcess(config, tmp_path, ready=False)
    daemon.start()
    try:
        poll_until(
            # SIGTERM's bit: Python catches SIGINT from its own start (KeyboardInterrupt), so
            # only SIGTERM's shows when cleanerd's handler for both is in place
            lambda: _catches(daemon.pid, signal.SIGTERM) or daemon.returncode is not None,
            timeout=60,
            interval=0.0005,
            what="the stop handler",
        )
        assert daemon.returncode is None, daemon.stderr_text()
        time.sleep(after_s)
        daemon.signal(sig)
        code = daemon.wait(timeout=60)
    finally:
        daemon.kill()
    stderr = daemon.stderr_text()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    with LogDir(logdir).locked():  # whatever the moment, the lock went with the process
        pass


# --- one phase at a time, in-process --------------------------------------------------------------
class _HeldSurvey:
    """Stands in for ``manager.scan``: blocks its thread until released, then surveys."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> Survey:
        self.started.set()
        self.release.wait(60)
        result: Survey = self.real()
        return result


def _daemon(logdir: Path, **settings: str) -> tuple[Daemon, _HeldSurvey]:
    overrides = {"log.dirs": str(logdir), "cleanerd.http.listen": "127.0.0.1:0", **settings}
    loaded = load_config(env={}, overrides=overrides)
    daemon = Daemon(loaded, lambda: loaded)
    held = _HeldSurvey(daemon.manager.scan)
    daemon.manager.scan = held  # type: ignore[method-assign]
    return daemon, held


@pytest.mark.asyncio
async def test_sigterm_during_the_first_survey_exits_0_before_binding(tmp_path: Path) -> None:
    daemon, held = _daemon(two_partitions(tmp_path))
    run = asyncio.create_task(daemon.run())
    assert await asyncio.to_thread(held.started.wait, 60)
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the daemon's, by now
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.sleep(0.2)
    assert not run.done()  # waiting for the survey thread, which cannot be interrupted
    held.release.set()
    assert await asyncio.wait_for(run, 60) == 0
    assert daemon.http is None
    assert daemon.pool is None
    assert not daemon.ready
    with LogDir(tmp_path / "logs").locked():
        pass
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back as found


@pytest.mark.asyncio
async def test_a_survey_outliving_the_shutdown_timeout_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Exited(Exception):
        pass

    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr(os, "_exit", fake_exit)
    daemon, held = _daemon(two_partitions(tmp_path), **{"cleanerd.shutdown.timeout.ms": "100"})
    run = asyncio.create_task(daemon.run())
    try:
        assert await asyncio.to_thread(held.started.wait, 60)
        daemon.request_stop("test")
        with pytest.raises(Exited):
            await asyncio.wait_for(run, 60)
        assert codes == [1]
    finally:
        held.release.set()
