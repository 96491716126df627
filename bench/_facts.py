"""Machine and source facts every benchmark prints next to its figures, so runs compare."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "numpy",
    "numba",
    "llvmlite",
    "crc32c",
    "lz4",
    "zstandard",
    "cramjam",
    "kafka-python",
    "mmh3",
)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine(load_at_start: tuple[float, float, float]) -> dict[str, Any]:
    """CPU, load, Python and library versions of this run."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "load_average_at_start": [round(x, 2) for x in load_at_start],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{d: _version(d) for d in PACKAGES},
    }


def source_version() -> dict[str, Any]:
    """The commit measured, and whether cleanerd/ had uncommitted changes."""

    def git(*cmd: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain", "--", "cleanerd")
    return {
        "commit": git("rev-parse", "HEAD"),
        "cleanerd_dirty": bool(status) if status is not None else None,
    }


def emit(benchmark: str, load_at_start: tuple[float, float, float], **fields: Any) -> None:
    """Print the benchmark's JSON document on stdout: its name, the date, the machine and the
    source it ran on, then ``fields`` in order."""
    doc = {
        "benchmark": benchmark,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_at_start),
        "source": source_version(),
        **fields,
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
