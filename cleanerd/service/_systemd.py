"""systemd ``Type=notify`` support in a few lines of stdlib socket code (no libsystemd binding).

The protocol is one datagram of ``KEY=VALUE`` lines to the AF_UNIX socket named by
``$NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace). Without that variable (a
terminal, tests, Docker) every call is a no-op, so the daemon calls it unconditionally. A lost
notification must never stop the daemon: send errors are swallowed and reported as ``False``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Mapping


def _address(raw: str | None) -> str | None:
    """The socket address from ``$NOTIFY_SOCKET``; None when unset or of an unsupported kind."""
    if not raw:
        return None
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # e.g. vsock: (systemd >= 253 in VMs), not supported here


def _watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds, if the watchdog is meant for this process."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    owner = env.get("WATCHDOG_PID")
    if owner:
        try:
            if int(owner) != pid:
                return None
        except ValueError:
            return None
    return usec / 2 / 1_000_000


class SystemdNotifier:
    """Sends READY / STATUS / RELOADING / STOPPING / WATCHDOG notifications to systemd."""

    def __init__(self, address: str | None = None, watchdog_interval_s: float | None = None):
        self.address = address
        self.watchdog_interval_s = watchdog_interval_s
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, pid: int | None = None
    ) -> SystemdNotifier:
        """Read NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (from os.environ by default)."""
        env = os.environ if env is None else env
        return cls(
            _address(env.get("NOTIFY_SOCKET")),
            _watchdog_interval(env, os.getpid() if pid is None else pid),
        )

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *lines: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; False when disabled or the send failed."""
        if self.address is None:
            return False
        message = "\n".join(lines).encode()
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                # never block the event loop: a full socket (systemd not reading) drops the message
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto(message, self.address)
        except OSError:
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """After the log dirs are loaded and the HTTP port is bound (also ends a reload)."""
        lines = ["READY=1"]
        if status is not None:
            lines.append(_status_line(status))
        return self.notify(*lines)

    def status(self, text: str) -> bool:
        """A one-line summary for ``systemctl status``."""
        return self.notify(_status_line(text))

    def reloading(self) -> bool:
        """Start of a SIGHUP reload; ``Type=notify-reload`` needs MONOTONIC_USEC with it."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more time than ``TimeoutStopSec`` (or start/reload timeouts) allow."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={max(0, int(seconds * 1_000_000))}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    async def run_watchdog(self) -> None:
        """Ping every half watchdog interval from the event loop, so a wedged loop stops pinging.

        Returns at once when systemd set no watchdog for this process; otherwise runs until
        cancelled.
        """
        interval = self.watchdog_interval_s
        if interval is None or not self.enabled:
            return
        while True:
            self.watchdog()
            await asyncio.sleep(interval)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _status_line(text: str) -> str:
    """STATUS= takes one line; a newline would start a bogus field."""
    return "STATUS=" + " ".join(text.splitlines())
