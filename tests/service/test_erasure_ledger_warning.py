"""A daemon cleaning appends its erasure ledger line; one whose line cannot be written is still a
cleaning done, with a warning naming the file."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from cleanerd.compaction import Throttler
from cleanerd.scheduling import CleanerManager
from cleanerd.service._budget import DedupeBudget
from cleanerd.service._workers import PoolSettings, WorkerPool
from cleanerd.storage import LEDGER_FILE, TopicPartition, read_ledger
from tests.support.polling import until
from tests.support.scheduling import BUDGET, NOW, OLD, RECENT, Clock, _log, _settings


async def clean_all(manager: CleanerManager, count: int) -> list[MutableMapping[str, Any]]:
    """Run one worker until ``count`` cleanings ended; the log lines meanwhile."""
    with structlog.testing.capture_logs() as logs:
        async with asyncio.TaskGroup() as group:
            pool = WorkerPool(
                manager,
                DedupeBudget(BUDGET),
                Throttler(None),
                PoolSettings(threads=1, load_factor=0.9, backoff_s=0.02, processes=False),
                group=group,
                clock_ms=lambda: NOW,
                on_cleaned=lambda _grab, _result: None,
            )
            manager.apply(manager.scan())
            pool.resize(1)
            try:
                await until(lambda: pool.cleanings_ended >= count)
            finally:
                assert await pool.stop(10.0)
    return logs


@pytest.mark.asyncio
async def test_daemon_cleanings_write_the_ledger_or_warn(tmp_path: Path) -> None:
    for topic in ("a", "b"):
        _log(tmp_path, topic, [OLD, OLD, RECENT]).close()
    blocked = tmp_path / TopicPartition("b", 0).dir_name / LEDGER_FILE
    blocked.mkdir()  # in the way of b-0's ledger
    manager = CleanerManager([tmp_path], _settings, budget_bytes=BUDGET, clock_ms=Clock())
    logs = await clean_all(manager, 2)
    [entry] = read_ledger(tmp_path / "a-0").entries
    assert (entry.first_dirty, entry.engine) == (0, "local")
    assert entry.end > 0
    warned = [e for e in logs if e["event"] == "cleaned, but no erasure ledger entry"]
    assert len(warned) == 1
    assert str(blocked) in str(warned[0]["error"])
    assert len([e for e in logs if e["event"] == "log cleaned"]) == 2
    status = manager.status(TopicPartition("b", 0))
    assert status is not None
    assert status.state.value == "idle"  # cleaned, not failed
