"""Helpers for end-to-end tests that run ``cleanerd run`` as a real process, as a user would.

The daemon's contract the harness relies on: ``python -m cleanerd run --config FILE`` with
repeatable ``--set NAME=VALUE``; ``/readyz``, ``/healthz``, ``/metrics`` and ``/status`` on
``cleanerd.http.listen`` (over TLS with ``cleanerd.http.tls.*``); JSON log lines on stderr when
stderr is not a TTY.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal as signals
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
Samples = dict[str, list[tuple[dict[str, str], float]]]
_names = itertools.count(1)


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now (bind to port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


# --- config files ---------------------------------------------------------------------------------
def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str | Path):
        # a JSON string without ASCII escaping is a valid TOML basic string
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _setting_name(name: str) -> str:
    """``log_cleaner_threads`` -> ``log.cleaner.threads``; dotted names are kept as given."""
    return name if "." in name else name.replace("_", ".")


def toml_text(
    settings: Mapping[str, object], topics: Mapping[str, Mapping[str, object]] | None = None
) -> str:
    """Flat settings as quoted dotted keys at top level, then one ``[topics."<glob>"]`` each.

    Keys are quoted: TOML reads a bare ``log.dirs`` as a nested table.
    """
    lines = [f"{json.dumps(name)} = {_toml_value(v)}" for name, v in settings.items()]
    for glob, table in (topics or {}).items():
        lines += ["", f"[topics.{json.dumps(glob)}]"]
        lines += [f"{json.dumps(name)} = {_toml_value(v)}" for name, v in table.items()]
    return "\n".join(lines) + "\n"


def write_config(
    tmp_path: Path,
    settings: Mapping[str, object] | None = None,
    /,
    *,
    topics: Mapping[str, Mapping[str, object]] | None = None,
    filename: str = "cleanerd.toml",
    **more: object,
) -> Path:
    """Write a TOML config in ``tmp_path`` and return its path.

    Settings are Kafka-named, in ``settings`` (``{"log.dirs": [...]}``) or as keywords with
    underscores for dots (``log_cleaner_backoff_ms=200``); ``topics`` maps a topic glob to its
    Kafka topic settings (``{"live-*": {"cleanup.policy": "compact"}}``).
    """
    flat = {_setting_name(k): v for k, v in {**(settings or {}), **more}.items()}
    path = Path(tmp_path) / filename
    path.write_text(toml_text(flat, topics))
    return path


# --- parsing what the daemon says ---------------------------------------------------------------
def parse_metrics(text: str) -> Samples:
    """Prometheus text -> sample name (``..._total``, ``..._bucket`` included) -> samples."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def sample_value(samples: Samples, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` whose labels include ``labels``."""
    found = [
        v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())
    ]
    if len(found) != 1:
        raise KeyError(f"{name}{labels}: {len(found)} matching samples")
    return found[0]


def parse_log_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects among ``text``'s lines (tracebacks and other noise skipped)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


# --- the daemon as a process --------------------------------------------------------------------
class DaemonProcess:
    """``cleanerd run`` in a subprocess: start, wait for ``/readyz``, talk HTTP, signal, stop.

    Output goes to ``<name>.stdout`` / ``<name>.stderr`` in ``tmp_path``. Leaving the ``with``
    block kills the process if it still runs (tests that want a clean stop send SIGTERM and
    ``wait`` first). ``CLEANERD_*`` variables of the test environment are not passed on: the
    daemon refuses unknown ones; ``env`` adds (or overrides) variables. With ``tls`` (the
    client's context) it talks https to a daemon configured for TLS.
    """

    def __init__(
        self,
        config: Path | None,
        tmp_path: Path,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        ready: bool = True,
        ready_timeout: float = 60.0,
        command: Sequence[str] | None = None,
        name: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.port = free_port() if port is None else port
        self.tls = tls
        self.base_url = f"{'http' if tls is None else 'https'}://{HOST}:{self.port}"
        base = [sys.executable, "-m", "cleanerd", "run"]
        if config is not None:
            base += ["--config", str(config)]
        base += ["--set", f"cleanerd.http.listen={HOST}:{self.port}"]
        self.args = [*(command if command is not None else base), *extra_args]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANERD_")}
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        self.env.update(env or {})
        self.wait_ready_on_enter = ready
        self.ready_timeout = ready_timeout
        stem = name or f"daemon-{next(_names)}"
        self.stdout_path = Path(tmp_path) / f"{stem}.stdout"
        self.stderr_path = Path(tmp_path) / f"{stem}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None
        self._files: list[IO[bytes]] = []

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> DaemonProcess:
        out, err = open(self.stdout_path, "wb"), open(self.stderr_path, "wb")  # noqa: SIM115
        self._files = [out, err]
        self.proc = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self.env, cwd=REPO
        )
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll ``/readyz`` until it answers 200 (surveyed, kernels loaded, healthy); fail early
        when the process exits."""
        deadline = time.monotonic() + (self.ready_timeout if timeout is None else timeout)
        last = "no answer yet"
        while True:
            code = self.process.poll()
            if code is not None:
                raise AssertionError(f"daemon exited with {code} before it was ready{self._tail()}")
            try:
                status, body = self.get("/readyz", timeout=2.0)
                if status == 200:
                    return
                last = f"{status} {body.strip()!r}"
            except OSError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise AssertionError(f"daemon not ready in time (last: {last}){self._tail()}")
            time.sleep(0.05)

    def __enter__(self) -> DaemonProcess:
        self.start()
        try:
            if self.wait_ready_on_enter:
                self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def kill(self) -> None:
        """SIGKILL if still running, reap, close the output files."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for f in self._files:
            f.close()
        self._files = []

    @property
    def process(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise RuntimeError("the daemon was not started")
        return self.proc

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def signal(self, sig: int = signals.SIGTERM) -> None:
        self.process.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        """The exit code; raises ``subprocess.TimeoutExpired`` after ``timeout``."""
        return self.process.wait(timeout=timeout)

    # --- HTTP ------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, str]:
        """(status, body text); error statuses are returned, not raised."""
        req = urllib.request.Request(
            self.base_url + path,
            method=method,
            headers=dict(headers or {}),
            data=b"" if method == "POST" else None,
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.tls) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as e:
            with e:
                return int(e.code), e.read().decode()

    def get(self, path: str, *, timeout: float = 10.0) -> tuple[int, str]:
        return self.request("GET", path, timeout=timeout)

    def healthz(self) -> tuple[int, str]:
        return self.get("/healthz")

    def scrape(self) -> Samples:
        """``/metrics`` parsed with prometheus-client's parser (see :func:`parse_metrics`)."""
        status, body = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}: {body[:500]}")
        return parse_metrics(body)

    def status(self) -> Any:
        """``/status`` as JSON."""
        status, body = self.get("/status")
        if status != 200:
            raise AssertionError(f"/status answered {status}: {body[:500]}")
        return json.loads(body)

    def post(self, path: str, *, token: str | None = None) -> tuple[int, Any]:
        """POST (an admin action); (status, JSON body, or the text when it is not JSON)."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        status, body = self.request("POST", path, headers=headers)
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    # --- output ----------------------------------------------------------------------------------
    def stdout_text(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines the daemon wrote to stderr so far."""
        return parse_log_lines(self.stderr_text())

    def _tail(self, lines: int = 30) -> str:
        tail = self.stderr_text().splitlines()[-lines:]
        return "\nstderr (last lines):\n" + "\n".join(tail) if tail else "\n(stderr empty)"
