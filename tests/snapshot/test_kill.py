"""SIGKILL while a snapshot is written: only a ``.part`` file is left, which no reader takes
for a snapshot and the next ``create`` removes; the previous snapshot still loads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd.compaction import open_log
from cleanerd.format import Record
from cleanerd.snapshot import create_snapshot, load_state
from cleanerd.storage import SNAPSHOT_PART_SUFFIX, PartitionLog, list_snapshots, snapshot_dir
from cleanerd.topics import StrategyConfig

CHILD = """
import sys, time
from pathlib import Path
from cleanerd.snapshot._build import create_snapshot
from cleanerd.snapshot import _format as fmt
from cleanerd.compaction._engine import open_log
from cleanerd.topics._model import StrategyConfig

real_flush = fmt.SnapshotWriter._flush
def flush_then_stall(self):
    real_flush(self)
    self._file.flush()
    print("writing", flush=True)
    time.sleep(600)  # killed here, with data batches on disk and no footer
fmt.SnapshotWriter._flush = flush_then_stall
with open_log(Path(sys.argv[1])) as log:
    create_snapshot(log, StrategyConfig())
"""


def _records(start: int, n: int) -> list[Record]:
    return [Record(0, 1000 + i, b"k%d" % (i % 50), b"v%d" % (start + i)) for i in range(n)]


@pytest.mark.slow
def test_kill_mid_write_leaves_a_part_file_only(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.create(directory)
    log.append(_records(0, 500))
    first = create_snapshot(log, StrategyConfig())
    assert first.path is not None
    log.append(_records(500, 500))
    before = {r.key: r.value for r in load_state(log, StrategyConfig())}
    log.close()

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "writing"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    parts = [p for p in snapshot_dir(directory).iterdir() if p.name.endswith(SNAPSHOT_PART_SUFFIX)]
    assert len(parts) == 1
    assert parts[0].stat().st_size > 0
    assert [p for _, p in list_snapshots(directory)] == [first.path]

    # load_state takes a partition dir too (opened and closed around the walk)
    assert {r.key: r.value for r in load_state(directory)} == before
    with open_log(directory) as log:
        assert {r.key: r.value for r in load_state(log, StrategyConfig())} == before
        again = create_snapshot(log, StrategyConfig())
        assert again.path is not None
        assert not parts[0].exists()  # removed by the next run
        assert [p for _, p in list_snapshots(directory)] == [first.path, again.path]
        assert {r.key: r.value for r in load_state(log, StrategyConfig())} == before
