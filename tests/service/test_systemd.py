"""sd_notify over a real AF_UNIX datagram socket standing in for systemd's notify socket."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleanerd.service._systemd import SystemdNotifier


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket in tmp_path and its NOTIFY_SOCKET value."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    yield sock, str(path)
    sock.close()


def _fields(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.split("\n"))


def test_ready_status_stopping(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": address})
    assert notifier.enabled
    assert notifier.ready("3 partitions, 1 worker")
    assert _fields(sock) == {"READY": "1", "STATUS": "3 partitions, 1 worker"}
    assert notifier.ready()
    assert _fields(sock) == {"READY": "1"}
    assert notifier.status("cleaning orders-0\nsecond line")
    assert _fields(sock) == {"STATUS": "cleaning orders-0 second line"}
    assert notifier.stopping()
    assert _fields(sock) == {"STOPPING": "1"}
    assert notifier.watchdog()
    assert _fields(sock) == {"WATCHDOG": "1"}
    assert notifier.extend_timeout(2.5)
    assert _fields(sock) == {"EXTEND_TIMEOUT_USEC": "2500000"}
    notifier.close()


def test_reloading_carries_monotonic_usec(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": address})
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    fields = _fields(sock)
    assert fields["RELOADING"] == "1"
    assert before <= int(fields["MONOTONIC_USEC"]) <= after
    notifier.close()


def test_abstract_namespace_socket() -> None:
    name = f"cleanerd-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready("up")
        assert _fields(sock) == {"READY": "1", "STATUS": "up"}
        notifier.close()
    finally:
        sock.close()


def test_no_notify_socket_is_a_no_op() -> None:
    notifier = SystemdNotifier.from_env({})
    assert not notifier.enabled
    assert notifier.watchdog_interval_s is None
    assert not notifier.ready("x")
    assert not notifier.stopping()
    assert not SystemdNotifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_send_failure_is_reported_not_raised(tmp_path: Path) -> None:
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notifier.enabled
    assert not notifier.ready()
    notifier.close()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "20000000"}, 10.0),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "4242"}, 1.5),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "999"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "me"}, None),
        ({"WATCHDOG_PID": "4242"}, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": "/run/x", **env}, pid=4242)
    assert notifier.watchdog_interval_s == expected


def test_watchdog_pid_defaults_to_this_process() -> None:
    env = {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier.from_env(env).watchdog_interval_s == 0.5


@pytest.mark.asyncio
async def test_run_watchdog_pings_until_cancelled(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "20000"})
    assert notifier.watchdog_interval_s == 0.01
    sock.setblocking(False)  # for loop.sock_recv
    task = asyncio.create_task(notifier.run_watchdog())
    loop = asyncio.get_running_loop()
    pings = [await asyncio.wait_for(loop.sock_recv(sock, 4096), 5) for _ in range(3)]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pings == [b"WATCHDOG=1"] * 3
    notifier.close()


@pytest.mark.asyncio
async def test_run_watchdog_returns_without_watchdog(listener: tuple[socket.socket, str]) -> None:
    _, address = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": address})
    await asyncio.wait_for(notifier.run_watchdog(), 5)
    assert notifier.watchdog_interval_s is None
