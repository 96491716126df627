"""SIGKILL at random moments of a real ``cleanerd compact`` never loses or resurrects a record.

The campaign behind issue 9 killed ``compact`` 207 times; this keeps a seeded handful of those
kills in the suite: after each kill the partition reopens (recovery finishes or rolls back the
swap), every record a full compaction keeps is still there, and nothing else has come back; a
final uninterrupted run then leaves exactly the expected survivors.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cleanerd.storage import PartitionLog
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


def _timed_run(source: Path, target: Path) -> float:
    """Seconds an uninterrupted ``compact`` of a copy of ``source`` takes."""
    shutil.copytree(source, target)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "cleanerd", "compact", str(target), *ARGS],
        capture_output=True,
        check=True,
    )
    return time.monotonic() - started


@pytest.mark.slow
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
    pristine = tmp_path / "pristine"
    shutil.copytree(logdir, pristine)
    # how long an uninterrupted run takes here (the fastest of two, on copies): kills are then
    # drawn inside it, so they land in start-up, the passes or the swaps whatever the machine
    # speed, and a run that ends first is simply drawn again (no wall-clock assertion)
    duration = min(_timed_run(pristine, tmp_path / f"probe{i}") for i in range(2))
    rng = random.Random(5)
    kills = 0
    for _ in range(40):
        if kills == 6:
            break
        shutil.rmtree(logdir)
        shutil.copytree(pristine, logdir)
        proc = subprocess.Popen(
            [sys.executable, "-m", "cleanerd", "compact", str(logdir), *ARGS],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.2, 0.8) * duration)
        if proc.poll() is not None:
            continue  # finished before the kill: draw again
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        now = data(part)
        for key, offset in want.items():
            assert offset in now.get(key, set()), f"{key!r}@{offset} lost after a kill"
        for key, offsets in now.items():  # nothing that was not there comes back
            assert offsets <= before.get(key, set()), f"{key!r}: records came back"
    assert kills == 6, f"only {kills} of 40 runs were caught before they ended"
    done = subprocess.run(
        [sys.executable, "-m", "cleanerd", "compact", str(logdir), *ARGS],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert {k: max(v) for k, v in data(part).items()} == want
    assert all(len(v) == 1 for v in data(part).values())
