"""Crash safety of a clean (Kafka test 39, testRecoveryAfterCrash, and more).

A forked child runs ``Cleaner.clean`` and SIGKILLs itself at one step: at each rename of the swap
protocol (``os.replace``), or at a chunk boundary of either pass; with a roll size small enough,
each group's output rolls into several segments and every swap replaces N segments by M
(KAFKA-20036). The parent then reopens the log
(recovery runs) and checks it holds either the old content or the cleaned content, complete: every
record that must survive is there, nothing half-swapped is left behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cleanerd.compaction import Cleaner
from cleanerd.compaction._cleaned import _writer as writer_mod
from cleanerd.format import INT_MAX
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import PartitionLog
from tests.support.cleaning import (
    LARGE_TS,
    OFFSET,
    compacted_config,
    data_records,
    make_plan,
    new_log,
    offset_map,
    rec,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _build(tmp_path: Path) -> PartitionLog:
    log = new_log(tmp_path, segment_bytes=700)
    for i in range(40):
        log.append([rec(i % 6, i), rec(10 + i % 3, i)])
    log.roll()
    return log


def _contents(log: PartitionLog) -> dict[int, tuple[bytes | None, bytes | None]]:
    return {o: (r.key, r.value) for o, r in data_records(log).items()}


def _run_and_kill(
    directory: Path, arm: Callable[[Callable[[], None]], None], roll_bytes: int
) -> bool:
    """Clean in a forked child that ``arm`` makes kill itself; True if it was killed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            writer_mod.MAX_SEGMENT_BYTES = roll_bytes
            arm(lambda: os.kill(os.getpid(), signal.SIGKILL))
            log = PartitionLog(directory, clock=lambda: 0)
            plan = make_plan(log, 0, log.active_segment.base_offset)
            Cleaner(offset_map()).clean(log, plan, compacted_config(), OFFSET, LARGE_TS)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the clean failed in the child"
    return False


def _arm_rename(n: int) -> Callable[[Callable[[], None]], None]:
    def arm(kill: Callable[[], None]) -> None:
        real = os.replace
        calls = [0]

        def replace(*args: Any, **kwargs: Any) -> None:
            calls[0] += 1
            if calls[0] == n:
                kill()
            real(*args, **kwargs)

        os.replace = replace

    return arm


def _arm_chunk(n: int) -> Callable[[Callable[[], None]], None]:
    def arm(kill: Callable[[], None]) -> None:
        real: Callable[..., Any] = Cleaner.clean
        calls = [0]

        def check() -> bool:
            calls[0] += 1
            if calls[0] == n:
                kill()
            return False

        def clean(self: Cleaner, *args: Any, **kwargs: Any) -> Any:
            return real(self, *args, abort_check=check)

        Cleaner.clean = clean  # type: ignore[method-assign]

    return arm


def _expected_after_clean(
    tmp_path: Path, roll_bytes: int
) -> tuple[dict[int, tuple[bytes | None, bytes | None]], int]:
    """The cleaned contents, and how many segments the clean left."""
    log = _build(tmp_path / "reference")
    writer_mod.MAX_SEGMENT_BYTES = roll_bytes
    Cleaner(offset_map()).clean(
        log,
        make_plan(log, 0, log.active_segment.base_offset),
        compacted_config(),
        OFFSET,
        LARGE_TS,
    )
    return _contents(log), len(log.segments)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rename", "chunk"])
@pytest.mark.parametrize("roll_bytes", [INT_MAX, 150])
def test_recovery_after_crash(
    tmp_path: Path, kind: str, roll_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_mod, "MAX_SEGMENT_BYTES", writer_mod.MAX_SEGMENT_BYTES)
    cleaned, count = _expected_after_clean(tmp_path, roll_bytes)
    if roll_bytes < INT_MAX:
        _, plain = _expected_after_clean(tmp_path / "plain", INT_MAX)
        assert count > plain  # the groups' outputs rolled
    killed_any = False
    for n in range(1, 200):
        directory = tmp_path / f"{kind}-{n}"
        log = _build(directory)
        before = _contents(log)
        assert cleaned != before
        log.close()
        arm = _arm_rename(n) if kind == "rename" else _arm_chunk(n)
        if not _run_and_kill(log.directory, arm, roll_bytes):
            break  # the clean finished before step n: every step has been tried
        killed_any = True
        reopened = PartitionLog(log.directory)
        got = _contents(reopened)
        # each group is swapped on its own: a crash leaves some groups cleaned, others not
        assert set(cleaned.items()) <= set(got.items()) <= set(before.items())
        assert verify_partition(log.directory).problems == []
        assert not any(
            p.name.endswith((".cleaned", ".swap", ".deleted")) for p in log.directory.iterdir()
        )
    else:
        pytest.fail("the clean never finished")
    assert killed_any
