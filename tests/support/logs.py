"""Small log dirs the tests build record by record, and what a command left on disk."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cleanerd.format import Record
from cleanerd.storage import PartitionLog, TopicPartition, read_ledger
from cleanerd.topics import LogConfig


def two_partitions(
    root: Path, *, records: int = 40, keys: int = 7, roll_at: int = 20, value: bytes = b"v" * 20
) -> Path:
    """``root/logs`` holding partitions ``t-0`` and ``t-1``: ``records`` one-record batches each
    (keys ``k0`` to ``k<keys - 1>`` in turn, timestamps from 1000), rolled after the one at
    ``roll_at``, so that a compacted topic has something to clean."""
    logdir = root / "logs"
    for partition in (0, 1):
        log = PartitionLog.create(logdir / TopicPartition("t", partition).dir_name, LogConfig())
        try:
            for n in range(records):
                log.append([Record(0, 1_000 + n, f"k{n % keys}".encode(), value)])
                if n == roll_at:
                    log.roll()
        finally:
            log.close()
    return logdir


def tree_hash(path: Path) -> dict[str, str]:
    """Name, content and mtime of every file under ``path``."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        + f":{p.stat().st_mtime_ns}"
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def ledger_counts(logdir: Path) -> dict[str, list[tuple[int, ...]]]:
    """Each partition's erasure ledger without its times and engine names (which differ from
    one run or engine to another by design)."""
    return {
        p.name: [
            (
                e.first_dirty,
                e.end,
                e.records_removed,
                e.tombstones_removed,
                e.bytes_before,
                e.bytes_after,
            )
            for e in read_ledger(p).entries
        ]
        for p in sorted(logdir.iterdir())
        if p.is_dir()
    }
