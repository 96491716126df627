"""SIGKILL at random moments of a real ``cleanerd compact`` never loses or resurrects a record.

The campaign behind issue 9 killed ``compact`` 207 times; this keeps a seeded handful of those
kills in the suite: after each kill the partition reopens (recovery finishes or rolls back the
swap), every record a full compaction keeps is still there, and nothing else has come back; a
final uninterrupted run then leaves exactly the expected survivors.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from cleanerd.storage.partition import PartitionLog
from cleanerd.workload import WorkloadSpec, expected_survivors, generate

ARGS = ["--delete-retention-ms", "0", "--now", "9999999999999", "--dedupe-buffer-bytes", "65536"]


def data(part: Path) -> dict[bytes, set[int]]:
    """Key -> offsets of its data records with a value, as the partition reads after recovery."""
    log = PartitionLog(part)
    try:
        out: dict[bytes, set[int]] = {}
        for batch in log.read(0):
            if not batch.header.is_control:
                for r in batch.records():
                    if r.key is not None and r.value is not None:
                        out.setdefault(r.key, set()).add(r.offset)
        return out
    finally:
        log.close()


def test_sigkill_during_compact_loses_and_resurrects_nothing(tmp_path: Path) -> None:
    logdir = tmp_path / "L"
    spec = WorkloadSpec(
        records=30_000,
        keys=2_000,
        records_per_batch=50,
        segment_bytes=200_000,
        transactional_producers=2,
        abort_ratio=0.3,
        tombstone_ratio=0.1,
        seed=21,
    )
    generate(logdir, spec)
    part = logdir / "demo-0"
    log = PartitionLog(part)
    log.roll()
    want = {k: s.offset for k, s in expected_survivors(log.read()).items() if not s.tombstone}
    log.close()
    before = data(part)
    rng = random.Random(5)
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-m", "cleanerd", "compact", str(logdir), *ARGS],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.3, 2.5))  # when to kill: any moment of start-up or cleaning
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        now = data(part)
        for key, offset in want.items():
            assert offset in now.get(key, set()), f"{key!r}@{offset} lost after a kill"
        for key, offsets in now.items():  # a removed record never comes back
            assert offsets <= before.get(key, set()), f"{key!r}: records came back"
        before = now
    assert kills, "no run was killed: the log is too small to be caught mid-way"
    done = subprocess.run(
        [sys.executable, "-m", "cleanerd", "compact", str(logdir), *ARGS],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert {k: max(v) for k, v in data(part).items()} == want
    assert all(len(v) == 1 for v in data(part).values())
