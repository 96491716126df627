"""Log dir layout, partition-dir names, topic-name rules and Kafka-compatible locking."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cleanerd.storage import (
    WRITERS_LOCK_FILE,
    Holding,
    LogDir,
    LogDirHolder,
    TopicPartition as TP,
    parse_partition_dir_name,
    validate_topic_name,
    write_offset_checkpoint,
)
from cleanerd.storage._errors import LogDirLockedError, StorageError
from tests.support.lock_holders import holding
from tests.support.tools import require

UUID_HEX = "0123456789abcdef0123456789abcdef"

# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("t-0", TP("t", 0)),
        ("my-topic-12", TP("my-topic", 12)),
        ("a-b-c-3", TP("a-b-c", 3)),
        ("__consumer_offsets-49", TP("__consumer_offsets", 49)),
        ("t.with.dots-7", TP("t.with.dots", 7)),
        ("t--1", TP("t-", 1)),  # split at the last '-', like Kafka
        ("t-2147483647", TP("t", 2**31 - 1)),
        ("x" * 249 + "-0", TP("x" * 249, 0)),
    ],
)
def test_parse_partition_dir_name_accepts(name: str, expected: TP) -> None:
    assert parse_partition_dir_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        f"t-0.{UUID_HEX}-delete",
        f"t-0.{UUID_HEX}-future",
        f"t-0.{UUID_HEX}-stray",
        f"my-topic-3.{UUID_HEX}-delete",
        "__cluster_metadata-0",  # KRaft's metadata log: Kafka's LogManager never loads it
        "t-delete",
        "t",
        "t-",
        "-0",
        "t-x",
        "t-01",
        "t-+1",
        "t- 1",
        "t-1 ",
        "t-\u0663",
        "t-2147483648",
        "..-0",
        ".-0",
        "../x-0",
        "a/b-0",
        "a b-0",
        "x" * 250 + "-0",
        "lost+found",
        "remote-log-index-cache",
        ".lock",
        "cleaner-offset-checkpoint",
    ],
)
def test_parse_partition_dir_name_rejects(name: str) -> None:
    assert parse_partition_dir_name(name) is None


@pytest.mark.parametrize("name", ["t", "x" * 249, "A.b_c-9", "...", "_"])
def test_validate_topic_name_accepts(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        (".", "'.' and '..' are not allowed"),
        ("..", "'.' and '..' are not allowed"),
        ("x" * 250, "250 characters, at most 249"),
        ("../x", "only ASCII letters"),
        ("a/b", "only ASCII letters"),
        ("a b", "only ASCII letters"),
        ("caf\u00e9", "only ASCII letters"),
        ("t\n", "only ASCII letters"),
    ],
)
def test_validate_topic_name_rejects_with_reason(name: str, reason: str) -> None:
    with pytest.raises(StorageError, match="invalid topic name") as info:
        validate_topic_name(name)
    assert reason in str(info.value)


# --------------------------------------------------------------------------- layout


def test_logdir_requires_an_existing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(StorageError, match=f"{missing} does not exist"):
        LogDir(missing)
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(StorageError, match=f"{file} is not a directory"):
        LogDir(file)


def test_partitions_lists_only_live_partition_dirs_sorted(tmp_path: Path) -> None:
    for name in ["b-0", "a-10", "a-2", "my-topic-1", f"a-3.{UUID_HEX}-delete", "junk", "a-01"]:
        (tmp_path / name).mkdir()
    (tmp_path / "c-0").write_text("a file, not a dir")
    write_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint", {})
    assert LogDir(tmp_path).partitions() == [TP("a", 2), TP("a", 10), TP("b", 0), TP("my-topic", 1)]


def test_paths(tmp_path: Path) -> None:
    logdir = LogDir(str(tmp_path))
    assert logdir.path == tmp_path
    assert logdir.partition_dir(TP("t", 3)) == tmp_path / "t-3"
    assert logdir.lock_file == tmp_path / ".lock"
    assert logdir.cleaner_offset_checkpoint == tmp_path / "cleaner-offset-checkpoint"
    assert logdir.recovery_point_checkpoint == tmp_path / "recovery-point-offset-checkpoint"
    assert logdir.log_start_offset_checkpoint == tmp_path / "log-start-offset-checkpoint"
    assert logdir.replication_offset_checkpoint == tmp_path / "replication-offset-checkpoint"
    assert (
        logdir.leader_epoch_checkpoint(TP("t", 3)) == tmp_path / "t-3" / "leader-epoch-checkpoint"
    )
    assert logdir.partition_metadata(TP("t", 3)) == tmp_path / "t-3" / "partition.metadata"


@pytest.mark.parametrize("tp", [TP("../x", 0), TP("..", 0), TP("a/b", 1), TP("t", -1)])
def test_partition_dir_refuses_path_tricks(tmp_path: Path, tp: TP) -> None:
    with pytest.raises(StorageError, match="invalid"):
        LogDir(tmp_path).partition_dir(tp)


# --------------------------------------------------------------------------- locking

PY_LOCKER = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("BUSY", flush=True)
        sys.exit(0)
    print("LOCKED", os.getpid(), flush=True)
    sys.stdin.read()
    """
)

JAVA_LOCKER = textwrap.dedent(
    """
    import java.io.File;
    import java.io.RandomAccessFile;
    import java.nio.channels.FileLock;

    public class Locker {
        public static void main(String[] args) throws Exception {
            RandomAccessFile file = new RandomAccessFile(new File(args[0], ".lock"), "rw");
            FileLock lock = file.getChannel().tryLock();
            if (lock == null) {
                System.out.println("BUSY");
                return;
            }
            System.out.println("LOCKED " + ProcessHandle.current().pid());
            System.out.flush();
            while (System.in.read() != -1) { }
        }
    }
    """
)


def _first_line(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "locker subprocess did not report in time"
    return proc.stdout.readline().strip()


@contextmanager
def _locker(argv: list[str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run a lock-holding helper; it holds the lock until its stdin is closed."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield _first_line(proc), proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def _python_locker(logdir: Path) -> list[str]:
    return [sys.executable, "-c", PY_LOCKER, str(logdir / ".lock")]


def _other_process_can_lock(logdir: Path) -> bool:
    with _locker(_python_locker(logdir)) as (line, _proc):
        return line.startswith("LOCKED")


def test_lock_refused_while_another_process_holds_it_then_relock(tmp_path: Path) -> None:
    logdir = LogDir(tmp_path)
    with _locker(_python_locker(tmp_path)) as (line, proc):
        assert line == f"LOCKED {proc.pid}"
        with pytest.raises(LogDirLockedError) as info:
            logdir.lock()
        message = str(info.value)
        assert str(tmp_path) in message
        assert f"process {proc.pid}" in message
        assert "Kafka broker or another cleanerd" in message
        assert "must not touch it" in message
        assert not logdir.is_locked
    with logdir.locked():
        assert logdir.is_locked
        assert not _other_process_can_lock(tmp_path)
    assert not logdir.is_locked
    assert _other_process_can_lock(tmp_path)


def test_lock_creates_lock_file_and_never_truncates_or_deletes_it(tmp_path: Path) -> None:
    logdir = LogDir(tmp_path)
    with logdir.locked():
        assert (tmp_path / ".lock").exists()
    (tmp_path / ".lock").write_bytes(b"broker wrote nothing, but keep whatever is here")
    with logdir.locked():
        pass
    assert (tmp_path / ".lock").read_bytes() == b"broker wrote nothing, but keep whatever is here"


def test_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    logdir = LogDir(tmp_path)
    with pytest.raises(RuntimeError), logdir.locked():
        raise RuntimeError("boom")
    assert not logdir.is_locked
    assert _other_process_can_lock(tmp_path)


def test_second_lock_in_same_process_is_refused_without_dropping_the_first(
    tmp_path: Path,
) -> None:
    first, second = LogDir(tmp_path), LogDir(tmp_path)
    with first.locked():
        with pytest.raises(LogDirLockedError, match="already locked by this cleanerd process"):
            second.lock()
        with pytest.raises(LogDirLockedError, match="already locked by this LogDir"):
            first.lock()
        # POSIX locks vanish when any descriptor of the file closes; make sure none did.
        assert not _other_process_can_lock(tmp_path)
        second.unlock()  # not held: a no-op, must not release the first
        assert not _other_process_can_lock(tmp_path)
    with second.locked():
        assert not _other_process_can_lock(tmp_path)


def test_unlock_is_idempotent(tmp_path: Path) -> None:
    logdir = LogDir(tmp_path)
    logdir.unlock()
    logdir.lock()
    logdir.unlock()
    logdir.unlock()
    assert _other_process_can_lock(tmp_path)


def test_unopenable_lock_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / ".lock").mkdir()
    with pytest.raises(StorageError, match=r"cannot open \.lock") as info:
        LogDir(tmp_path).lock()
    assert not isinstance(info.value, LogDirLockedError)


@pytest.fixture(scope="module")
def java_locker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require("java")  # a real FileChannel.tryLock holder
    source = tmp_path_factory.mktemp("java") / "Locker.java"
    source.write_text(JAVA_LOCKER)
    return source


@pytest.mark.slow
def test_real_java_filechannel_lock_is_refused(tmp_path: Path, java_locker: Path) -> None:
    logdir = LogDir(tmp_path)
    with _locker([require("java"), str(java_locker), str(tmp_path)]) as (line, _proc):
        assert line.startswith("LOCKED "), line
        java_pid = int(line.split()[1])
        with pytest.raises(LogDirLockedError, match=f"process {java_pid}"):
            logdir.lock()
    # And the other way round: a broker starting now would see the dir as taken.
    with (
        logdir.locked(),
        _locker([require("java"), str(java_locker), str(tmp_path)]) as (line, _proc),
    ):
        assert line == "BUSY"


def test_lock_file_is_not_inherited_by_child_processes(tmp_path: Path) -> None:
    logdir = LogDir(tmp_path)
    with logdir.locked():
        fd = logdir._lock_fd
        assert fd is not None
        assert not os.get_inheritable(fd)


# --------------------------------------------------------------------------- who holds it


def test_holder_tells_a_welcoming_daemon_from_a_broker_without_taking_the_lock(
    tmp_path: Path,
) -> None:
    logdir = LogDir(tmp_path)
    assert logdir.holder() == LogDirHolder(Holding.FREE)
    with holding(tmp_path, "broker") as broker:
        assert logdir.holder() == LogDirHolder(Holding.EXCLUSIVE, broker.pid)
    assert logdir.holder() == LogDirHolder(Holding.FREE)
    with holding(tmp_path, "daemon") as daemon:
        assert logdir.holder() == LogDirHolder(Holding.WELCOMING, daemon.pid)
        assert not _other_process_can_lock(tmp_path)  # looking did not let go of anything
    # the kernel dropped both locks with the process: nothing stale says "welcoming"
    assert (tmp_path / WRITERS_LOCK_FILE).exists()
    assert logdir.holder() == LogDirHolder(Holding.FREE)
    with holding(tmp_path, "broker") as broker:
        assert logdir.holder() == LogDirHolder(Holding.EXCLUSIVE, broker.pid)


def test_welcome_writers_holds_the_writers_lock_as_long_as_the_dir_lock(tmp_path: Path) -> None:
    logdir = LogDir(tmp_path)

    def writers_lock_held() -> bool:
        fd = os.open(tmp_path / WRITERS_LOCK_FILE, os.O_RDONLY | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    with logdir.locked():
        assert not writers_lock_held()  # compact and gen keep the dir to themselves
        assert logdir.holder() == LogDirHolder(Holding.EXCLUSIVE, os.getpid())
    logdir.lock(welcome_writers=True)
    try:
        assert writers_lock_held()
        assert logdir.holder() == LogDirHolder(Holding.WELCOMING, os.getpid())
        assert not _other_process_can_lock(tmp_path)  # holder() in-process kept the lock
    finally:
        logdir.unlock()
    assert not writers_lock_held()
    assert _other_process_can_lock(tmp_path)
