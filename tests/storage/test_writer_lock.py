"""PartitionWriterLock across processes and threads, and PartitionLog picking up what another
process (standing in for the daemon) did to the partition dir: idle rolls and cleaner swaps."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cleanerd.format import Record
from cleanerd.inspect._verify import verify_partition
from cleanerd.storage import LogSegment, PartitionLog
from cleanerd.storage._writer_lock import PartitionWriterLock
from cleanerd.topics import LogConfig

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # only against hangs

PROBE = """
import sys
from cleanerd.storage._writer_lock import PartitionWriterLock
lock = PartitionWriterLock(sys.argv[1])
if lock.acquire(blocking=False):
    lock.release()
    print("free")
else:
    print("busy")
"""

WAIT_FOR_LOCK = """
import sys
from pathlib import Path
from cleanerd.storage._writer_lock import PartitionWriterLock
lock = PartitionWriterLock(sys.argv[1])
print("waiting", flush=True)
with lock:
    print("released-first" if Path(sys.argv[2]).exists() else "got-it-while-held", flush=True)
"""

IDLE_ROLL = """
import sys
from cleanerd.storage._partition import PartitionLog
from cleanerd.storage._segment import LogSegment
log = PartitionLog(sys.argv[1])
print(log.roll_if_idle(int(sys.argv[2]), int(sys.argv[3])), log.active_segment.base_offset)
log.close()
"""

COMPACT = """
import sys
from cleanerd.compaction._one_shot import compact_partition
from cleanerd.topics._model import StrategyConfig
from cleanerd.topics._model import TopicCleanerConfig
from cleanerd.topics._model import LogConfig
from cleanerd.storage._partition import PartitionLog
from cleanerd.storage._segment import LogSegment
log = PartitionLog(sys.argv[1], LogConfig(segment_bytes=int(sys.argv[2])))
compact_partition(log, TopicCleanerConfig(compact=True, delete=False), StrategyConfig(), 10**13,
                  map_bytes=1 << 20)
print(" ".join(str(s.base_offset) for s in log.segments))
"""


def run_python(script: str, *args: object) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def partition_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "t-0"
    directory.mkdir()
    return directory


def all_records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in PartitionLog(directory).records()]


def assert_consistent(directory: Path) -> None:
    report = verify_partition(directory)
    assert report.ok, [p.message for p in report.problems]


def _blocked_in_flock(pid: int, directory: Path) -> bool:
    """Whether ``pid`` waits for a flock on ``directory``: ``/proc/locks`` lists each waiter as
    ``N: -> FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF``."""
    inode = directory.stat().st_ino
    waiters = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    return any(
        len(f) >= 7
        and f[1:3] == ["->", "FLOCK"]
        and int(f[5]) == pid
        and int(f[6].rsplit(":", 1)[1]) == inode
        for f in waiters
    )


def _wait_until_blocked_in_flock(pid: int, directory: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not _blocked_in_flock(pid, directory):
        assert time.monotonic() < deadline, f"process {pid} never blocked on {directory}'s lock"
        time.sleep(0.01)


# --- the lock -----------------------------------------------------------------------------------
def test_lock_excludes_another_process_and_adds_no_file(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path)
    lock = PartitionWriterLock(directory)
    assert run_python(PROBE, directory) == "free"
    with lock:
        assert run_python(PROBE, directory) == "busy"
        with lock:  # reentrant: still held after the inner exit
            assert lock.depth == 2
        assert run_python(PROBE, directory) == "busy"
    assert lock.depth == 0
    assert run_python(PROBE, directory) == "free"
    assert list(directory.iterdir()) == []


def test_a_waiting_process_gets_the_lock_only_after_release(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path)
    marker = tmp_path / "released"
    lock = PartitionWriterLock(directory)
    lock.acquire()
    child = subprocess.Popen(
        [sys.executable, "-c", WAIT_FOR_LOCK, str(directory), str(marker)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        _wait_until_blocked_in_flock(child.pid, directory)
        marker.touch()
        lock.release()
        out, err = child.communicate(timeout=TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert out.strip() == "released-first"


def test_reentrant_in_a_thread_shared_by_objects_exclusive_between_threads(
    tmp_path: Path,
) -> None:
    directory = partition_dir(tmp_path)
    calls: list[str] = []
    first = PartitionWriterLock(
        directory, on_acquire=lambda: calls.append("acq"), on_release=lambda: calls.append("rel")
    )
    second = PartitionWriterLock(directory)  # another PartitionLog of the same dir
    results: list[bool] = []

    def try_lock() -> None:
        got = second.acquire(blocking=False)
        results.append(got)
        if got:
            second.release()

    with first, first, second:  # nesting two objects of one dir does not deadlock
        assert (first.depth, second.depth) == (2, 1)
        other = threading.Thread(target=try_lock)
        other.start()
        other.join(TIMEOUT)
    assert calls == ["acq", "rel"]  # hooks on the outermost acquire and release only
    try_lock()
    assert results == [False, True]
    with pytest.raises(RuntimeError, match="not held"):
        first.release()


def test_a_failing_acquire_hook_leaves_the_lock_free(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path)

    def boom() -> None:
        raise OSError("disk gone")

    lock = PartitionWriterLock(directory, on_acquire=boom)
    with pytest.raises(OSError, match="disk gone"), lock:
        pass
    assert lock.depth == 0
    assert run_python(PROBE, directory) == "free"


# --- idle roll ----------------------------------------------------------------------------------
def test_roll_if_idle_rolls_only_a_non_empty_segment_older_than_the_lag(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0")
    assert not log.roll_if_idle(now_ms=10**12, max_lag_ms=1)  # empty
    log.append([Record(0, 5_000, b"k", b"v")])
    log.append([Record(0, 20_000, b"k", b"w")])
    # the first batch's timestamp (5_000) decides, as Kafka's rollingBasedTimestamp
    assert not log.roll_if_idle(now_ms=6_000, max_lag_ms=1_000)  # 5_000 is not < 5_000
    assert log.roll_if_idle(now_ms=6_001, max_lag_ms=1_000)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert not log.roll_if_idle(now_ms=10**12, max_lag_ms=1)  # the new one is empty
    assert log.segments[0].largest_timestamp == 20_000


def test_roll_if_idle_without_timestamps_uses_the_segments_age(tmp_path: Path) -> None:
    now = [1_000_000]
    log = PartitionLog.create(tmp_path / "t-0", clock=lambda: now[0])
    log.append([Record(0, -1, b"k", b"v")])  # NO_TIMESTAMP
    assert not log.roll_if_idle(now_ms=now[0] + 500, max_lag_ms=1_000)
    assert log.roll_if_idle(now_ms=now[0] + 1_001, max_lag_ms=1_000)


def test_roll_if_idle_with_a_lead_rolls_that_much_before_the_lag(tmp_path: Path) -> None:
    """The daemon rolls ``lead_ms`` (the expected cleaning time) before the first batch is the
    lag old, so the cleaning after the roll ends within the lag."""
    log = PartitionLog.create(tmp_path / "t-0")
    log.append([Record(0, 5_000, b"k", b"v")])
    assert not log.roll_if_idle(now_ms=5_700, max_lag_ms=1_000, lead_ms=300)  # at 5_000 + 1_000
    assert log.roll_if_idle(now_ms=5_701, max_lag_ms=1_000, lead_ms=300)  # - 300, and after
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_roll_if_idle_never_doubles_a_writers_roll(tmp_path: Path) -> None:
    """The daemon decided to roll the segment at base 0; a writer rolled it first and went on
    appending old-stamped records to the next one. Re-checked under the writer lock, the roll
    is not done again: no second segment, and above all no empty one."""
    directory = tmp_path / "t-0"
    writer = PartitionLog.create(directory)
    roller = PartitionLog(directory)  # the daemon's, opened before the writer's roll
    writer.append([Record(0, 1_000, b"k", b"v")])
    writer.roll()
    writer.append([Record(0, 1_000, b"k", b"w")])  # old enough to roll by the rule alone
    assert not roller.roll_if_idle(now_ms=10**12, max_lag_ms=1_000, active_base=0)
    assert [s.base_offset for s in roller.segments] == [0, 1]
    # the writer rolled again and has not appended yet: an empty active segment stays alone
    writer.roll()
    assert not roller.roll_if_idle(now_ms=10**12, max_lag_ms=1_000, active_base=1)
    assert not roller.roll_if_idle(now_ms=10**12, max_lag_ms=1_000, active_base=2)
    assert [s.base_offset for s in roller.segments] == [0, 1, 2]
    assert sorted(p.name for p in directory.glob("*.log")) == [
        f"{base:020d}.log" for base in (0, 1, 2)
    ]
    # the segment it was asked about, still active: rolled once
    writer.append([Record(0, 1_000, b"k", b"x")])
    assert roller.roll_if_idle(now_ms=10**12, max_lag_ms=1_000, active_base=2)
    assert [s.base_offset for s in roller.segments] == [0, 1, 2, 3]
    writer.close()
    roller.close()


# --- another process changed the dir ------------------------------------------------------------
@pytest.mark.slow
def test_writer_appends_to_the_segment_another_process_rolled(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path)
    # a small index interval: the last batches lie past the last time-index entry
    writer = PartitionLog(directory, LogConfig(index_interval_bytes=200))
    for i in range(4):
        writer.append([Record(0, 1_000 + i, b"k%d" % i, b"v" * 50)])
    writer_active = writer.active_segment

    assert run_python(IDLE_ROLL, directory, 10**13, 60_000) == "True 4"

    info = writer.append([Record(0, 2_000, b"k9", b"after")])
    assert info.first_offset == 4
    assert [s.base_offset for s in writer.segments] == [0, 4]
    assert writer.active_segment.size > 0
    assert writer.segments[0] is not writer_active  # reopened: the roller finished its index
    # the roller's final time-index entry covers the batches it had not written itself
    assert writer.segments[0].time_index.last_entry == (1_003, 3)
    assert [r.offset for r in writer.records()] == [0, 1, 2, 3, 4]
    assert all_records(directory)[-1] == (4, b"k9", b"after")
    assert_consistent(directory)


@pytest.mark.slow
def test_writer_drops_segments_another_process_swapped_out(tmp_path: Path) -> None:
    directory = partition_dir(tmp_path)
    seg_bytes = 400
    writer = PartitionLog(directory, LogConfig(segment_bytes=seg_bytes, index_interval_bytes=50))
    expected: dict[bytes, bytes] = {}
    for i in range(30):
        key, value = b"k%d" % (i % 3), b"v%d" % i
        writer.append([Record(0, 1_000 + i, key, value)])
        expected[key] = value
    before = [s.base_offset for s in writer.segments]
    assert len(before) > 3

    after = [int(b) for b in run_python(COMPACT, directory, seg_bytes).split()]
    assert len(after) < len(before)

    writer.append([Record(0, 5_000, b"k0", b"last")])
    expected[b"k0"] = b"last"
    bases = [s.base_offset for s in writer.segments]
    assert bases[: len(after)] == after  # (this append may have rolled once more)
    assert all(s.log_path.exists() for s in writer.segments)
    seen = list(writer.records())
    assert seen[-1].offset == 30
    latest = {r.key: r.value for r in seen}
    assert latest == expected
    assert [(r.offset, r.key, r.value) for r in seen] == all_records(directory)
    # a segment replaced under the same name (new inode) was reopened: its index is the new one
    fresh = PartitionLog(directory)
    for ours, theirs in zip(writer.segments, fresh.segments, strict=True):
        assert index_entries(ours) == index_entries(theirs)
    assert_consistent(directory)


def index_entries(seg: LogSegment) -> list[tuple[int, int]]:
    return [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
