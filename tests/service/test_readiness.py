"""Readiness apart from liveness: ``/readyz`` answers 200, and systemd hears READY=1, only once
the first survey is applied and the kernels are loaded, while ``/healthz`` is already 200; a
failed kernel load leaves the daemon running but unready, saying why."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from cleanerd.service import Daemon, KernelLoad, _daemon as daemon_module
from tests.support.in_process import HeldKernelLoad, RecordingNotifier, compacting_daemon
from tests.support.logs import two_partitions
from tests.support.polling import until


async def _get(daemon: Daemon, path: str) -> tuple[int, Any]:
    assert daemon.http is not None
    url = f"http://127.0.0.1:{daemon.http.port}{path}"
    async with aiohttp.ClientSession() as client, client.get(url) as response:
        if response.content_type == "application/json":
            return response.status, await response.json()
        return response.status, await response.text()


@pytest.mark.asyncio
async def test_ready_only_once_the_kernels_are_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldKernelLoad()
    monkeypatch.setattr(daemon_module, "load_kernels", held)
    notifier = RecordingNotifier()
    daemon = compacting_daemon(two_partitions(tmp_path), notifier=notifier)
    run = asyncio.create_task(daemon.run())
    try:
        await until(held.started.is_set)
        await until(lambda: daemon.healthy()[0])
        assert await _get(daemon, "/healthz") == (200, "ok\n")  # alive meanwhile
        status, body = await _get(daemon, "/readyz")
        assert status == 503
        assert body == {
            "ready": False,
            "pending": ["kernels"],
            "survey": "done",
            "kernels": "loading",
            "health": "ok",
        }
        assert notifier.readies == 0
        assert not daemon.status().ready
        held.release.set()
        await until(lambda: daemon.ready)
        status, body = await _get(daemon, "/readyz")
        assert (status, body["pending"], body["kernels"]) == (200, [], "loaded")
        assert notifier.readies == 1
        daemon.reload()  # a reload ends with READY=1 again, once ready
        assert notifier.readies == 2
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
    assert not daemon.ready


@pytest.mark.asyncio
async def test_a_reload_before_ready_sends_no_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldKernelLoad()
    monkeypatch.setattr(daemon_module, "load_kernels", held)
    notifier = RecordingNotifier()
    daemon = compacting_daemon(two_partitions(tmp_path), notifier=notifier)
    run = asyncio.create_task(daemon.run())
    try:
        await until(held.started.is_set)
        daemon.reload()
        assert notifier.readies == 0
    finally:
        daemon.request_stop("test")  # the held load sees the stop and ends
        assert await asyncio.wait_for(run, 60) == 0
    assert notifier.readies == 0


@pytest.mark.asyncio
async def test_a_failed_kernel_load_leaves_it_running_unready_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_root: Path | None, _abort: Callable[[], bool], _dirs: object) -> KernelLoad:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(daemon_module, "load_kernels", broken)
    notifier = RecordingNotifier()
    daemon = compacting_daemon(two_partitions(tmp_path), notifier=notifier)
    with structlog.testing.capture_logs() as logs:
        run = asyncio.create_task(daemon.run())
        try:
            await until(lambda: daemon.kernels != "loading")
            await until(lambda: daemon.healthy()[0])
            status, body = await _get(daemon, "/readyz")
            assert status == 503
            assert body["pending"] == ["kernels"]
            assert body["kernels"].startswith("failed: ")
            assert "No space left on device" in body["kernels"]
            assert (await _get(daemon, "/healthz"))[0] == 200
            await until(lambda: daemon.manager.totals.cleanings == 2)  # it cleans all the same
        finally:
            daemon.request_stop("test")
            assert await asyncio.wait_for(run, 60) == 0
    assert notifier.readies == 0
    assert [e["log_level"] for e in logs if e["event"].startswith("loading the kernels")] == [
        "error"
    ]


@pytest.mark.asyncio
async def test_the_real_kernel_load_makes_it_ready(tmp_path: Path) -> None:
    notifier = RecordingNotifier()
    daemon = compacting_daemon(two_partitions(tmp_path), notifier=notifier)
    with structlog.testing.capture_logs() as logs:
        run = asyncio.create_task(daemon.run())
        try:
            await until(lambda: daemon.ready)
            assert (await _get(daemon, "/readyz"))[0] == 200
        finally:
            daemon.request_stop("test")
            assert await asyncio.wait_for(run, 60) == 0
    (loaded,) = [e for e in logs if e["event"] == "kernels loaded"]
    assert loaded["seconds"] > 0
    assert notifier.readies == 1


@pytest.mark.asyncio
async def test_the_kernel_load_writes_nothing_in_a_log_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No temporary dir but the log dir (a read-only root, the working dir in the log dir):
    the load refuses, and the daemon stays unready saying how to fix it."""
    logdir = two_partitions(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(logdir))
    daemon = compacting_daemon(logdir)
    run = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.kernels != "loading")
        assert daemon.kernels.startswith("failed: RuntimeError(")
        assert "set TMPDIR" in daemon.kernels
        assert not daemon.readiness()[0]
        assert sorted(p.name for p in logdir.iterdir() if p.is_dir()) == ["t-0", "t-1"]
    finally:
        daemon.request_stop("test")
        assert await asyncio.wait_for(run, 60) == 0
