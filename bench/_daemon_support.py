"""Helpers of ``bench/daemon.py``: the data sets and a ``cleanerd run`` subprocess to drive.

``Daemon`` starts ``python -m cleanerd run`` with JSON logs on stderr (read by a thread, each line
stamped with its arrival time), ``NOTIFY_SOCKET`` pointing at a datagram socket of ours (READY is
the daemon's own ``READY=1``) and the HTTP port 0 (the port is read from the "cleanerd ready"
line). CPU time and RSS come from ``/proc/<pid>``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    PartitionLog,
    TopicPartition,
    write_offset_checkpoint,
)
from cleanerd.workload import WorkloadSpec, generate

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_VERSION = 1  # bump when the template layout changes, so old caches are not reused
TICK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[daemon] {msg}", file=sys.stderr, flush=True)


def filesystem_of(path: Path) -> str:
    """The file system type of the mount holding ``path`` (``tmpfs``, ``ext4``, ...)."""
    best, fstype = "", "unknown"
    real = str(path.resolve())
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mount = parts[1]
            inside = real == mount or real.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) > len(best):
                best, fstype = mount, parts[2]
    return fstype


# --- data ----------------------------------------------------------------------------------------


def write_rolled(log_dir: Path, spec: WorkloadSpec) -> list[Path]:
    """Generate ``spec`` into ``log_dir`` and roll every partition: all its data is cleanable."""
    result = generate(log_dir, spec)
    dirs = []
    for p in result.partitions:
        directory = log_dir / p.directory
        plog = PartitionLog(directory, spec.log_config())
        plog.roll()
        plog.close()
        dirs.append(directory)
    (log_dir / ".lock").unlink(missing_ok=True)
    return dirs


def cached_template(out: Path, name: str, spec: WorkloadSpec) -> Path:
    """A log dir of ``spec`` (rolled), built once in ``out`` and reused."""
    root = out / f"daemon-t{TEMPLATE_VERSION}-{name}"
    if (root / "done").exists():
        return root / "logs"
    if root.exists():
        shutil.rmtree(root)
    log(f"building {root.name} ({spec.partitions} x {spec.records:,} records)")
    t0 = time.perf_counter()
    write_rolled(root / "logs", spec)
    (root / "done").write_text(f"{time.perf_counter() - t0:.1f} s\n")
    return root / "logs"


def fill_log_dir(log_dir: Path, template: Path, topic: str, n: int) -> dict[TopicPartition, int]:
    """``n`` copies of the partition dir ``template`` as ``topic-0`` .. ``topic-{n-1}``; returns
    each partition's log end offset (for a cleaner checkpoint that says "all clean")."""
    log_dir.mkdir(parents=True, exist_ok=True)
    leo = max(offset_of(p) for p in template.glob("*.log"))
    for i in range(n):
        shutil.copytree(template, log_dir / f"{topic}-{i}")
    return {TopicPartition(topic, i): leo for i in range(n)}


def offset_of(log_file: Path) -> int:
    return int(log_file.name.split(".")[0])


def mark_clean(log_dir: Path, ends: dict[TopicPartition, int]) -> None:
    write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, ends)


def build_count_dir(
    work: Path, name: str, n: int, records: int, *, clean: bool = True
) -> tuple[Path, dict[Any, int]]:
    """``n`` copies of one rolled partition of ``records`` records (256 KiB segments) as topic
    ``t`` in ``work/name``, marked clean to its end unless ``clean`` is False (then every one
    is dirty); returns the dir and its shape."""
    spec = WorkloadSpec(topic="t", records=records, keys=min(10_000, records), seed=1)
    template = write_rolled(work / f"tpl-{name}", spec)[0]
    t0 = time.perf_counter()
    log_dir = work / name
    ends = fill_log_dir(log_dir, template, "t", n)
    if clean:
        mark_clean(log_dir, ends)
    size = sum(f.stat().st_size for f in template.glob("*.log"))
    segs = len(list(template.glob("*.log")))
    log(
        f"{name}: {n} partitions x {records} records ({size * n / 1e6:.0f} MB, {segs} segments "
        f"each) in {time.perf_counter() - t0:.1f} s"
    )
    return log_dir, {
        "partitions": n,
        "records_each": records,
        "log_bytes_each": size,
        "segments_each": segs,
        "log_bytes_total": size * n,
    }


# --- the daemon process --------------------------------------------------------------------------


def _process_tree(root: int) -> list[int]:
    """``root`` and every process below it (from each process's parent in /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
    tree, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


class Daemon:
    """One ``cleanerd run`` subprocess; use as a context manager (it is stopped on exit)."""

    def __init__(self, work: Path, log_dir: Path, settings: dict[str, object]) -> None:
        self.work = work
        self.config = work / "cleanerd.toml"
        lines = [f"log.dirs = [{json.dumps(str(log_dir))}]", '"log.cleanup.policy" = "compact"']
        lines += [f'"{k}" = {json.dumps(v)}' for k, v in settings.items()]
        self.config.write_text("\n".join(lines) + "\n")
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.other: list[str] = []
        self.changed = threading.Condition()
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.ready_at: float | None = None
        self.statuses: list[float] = []

    def __enter__(self) -> Daemon:
        path = self.work / "notify.sock"
        path.unlink(missing_ok=True)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(path))
        env = {**os.environ, "NOTIFY_SOCKET": str(path), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "cleanerd", "run", "--config", str(self.config)]
        cmd += ["--set", "cleanerd.http.listen=127.0.0.1:0", "--set", "cleanerd.log.format=json"]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        time.sleep(0.3)  # the drain thread sees the exit and stops reading
        self.notify.close()

    def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            now = time.monotonic()
            try:
                entry = json.loads(raw)
            except ValueError:
                self.other.append(raw.decode(errors="replace").rstrip())
                continue
            with self.changed:
                if entry.get("event") == "cleanerd ready" and entry.get("http"):
                    self.port = int(entry["http"].rsplit(":", 1)[1])
                self.lines.append((now, entry))
                self.changed.notify_all()

    def _drain(self) -> None:
        """Read every notification, as systemd does: the daemon's ``sendto`` on a full socket
        busy-waits up to 1 s on the event loop (``SystemdNotifier.notify``)."""
        self.notify.settimeout(0.2)
        while self.proc is not None and self.proc.poll() is None:
            try:
                data = self.notify.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if data.startswith(b"STATUS="):
                self.statuses.append(time.monotonic())  # one per manager cycle
            if b"READY=1" in data.split(b"\n") and self.ready_at is None:
                with self.changed:
                    self.ready_at = time.monotonic()
                    self.changed.notify_all()

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Seconds from the spawn to the daemon's ``READY=1``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.ready_at is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no READY=1 within {timeout} s")
                self.changed.wait(0.05)
                self._check_alive()
            return self.ready_at - self.started

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = "\n".join(self.other[-20:] + [json.dumps(e) for _, e in self.lines[-5:]])
            raise RuntimeError(f"cleanerd exited with {self.proc.returncode}:\n{tail}")

    def wait_cleaned(self, prefix: str, count: int, timeout: float = 1200.0) -> list[Any]:
        """Wait until ``count`` partitions named ``prefix``-N were cleaned; returns their
        "log cleaned" lines as (arrival time, entry) pairs."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = [
                    (t, e)
                    for t, e in self.lines
                    if e.get("event") == "log cleaned" and e["partition"].startswith(prefix + "-")
                ]
                if len({e["partition"] for _, e in found}) >= count:
                    return found
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(found)}/{count} {prefix} partitions cleaned")
                self.changed.wait(0.2)
                self._check_alive()

    def wait_first_cleanings(self, prefix: str, count: int, timeout: float = 3600.0) -> list[float]:
        """Wait until ``count`` partitions named ``prefix``-N were cleaned once; returns the
        arrival times of each one's first "log cleaned" line, sorted. Reads each line once (a
        rescan of every line at each new one would cost this process O(count^2))."""
        deadline = time.monotonic() + timeout
        seen: dict[str, float] = {}
        read = 0
        with self.changed:
            while len(seen) < count:
                for t, e in self.lines[read:]:
                    if e.get("event") == "log cleaned" and e["partition"].startswith(prefix + "-"):
                        seen.setdefault(e["partition"], t)
                read = len(self.lines)
                if len(seen) >= count:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(seen)}/{count} {prefix} partitions cleaned")
                self.changed.wait(0.5)
                self._check_alive()
        return sorted(seen.values())

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=60) as r:
            return json.loads(r.read())

    def stat(self) -> dict[str, float]:
        """CPU seconds (user + system, all threads) and resident MiB of the daemon now, with
        its cleaning processes (its children, and the CPU of those it has reaped)."""
        assert self.proc is not None
        cpu, rss, threads = 0.0, 0, 0
        for pid in _process_tree(self.proc.pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/status") as f:
                    rss += next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
            except (FileNotFoundError, StopIteration):  # ended meanwhile
                continue
            cpu += sum(int(v) for v in fields[11:15]) / TICK  # utime stime cutime cstime
            threads += int(fields[17])
        return {"cpu_s": cpu, "rss_mib": rss / 1024, "threads": threads}

    def stop(self, timeout: float = 60.0) -> tuple[int | None, float]:
        """SIGTERM and wait; returns (exit code, seconds to exit)."""
        if self.proc is None or self.proc.poll() is not None:
            return (None if self.proc is None else self.proc.returncode), 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return code, time.monotonic() - t0
