"""One Kafka log dir (an entry of ``log.dirs``): its partition dirs, checkpoints and ``.lock``.

Locking matters most here: a broker that finds its files rewritten under it corrupts data.
Kafka holds ``<logdir>/.lock`` with Java ``FileChannel.tryLock``, which on Linux is a POSIX
``fcntl`` record lock, so cleanerd takes the same kind of lock (``fcntl.lockf``) and refuses to
run while anyone else holds it. POSIX locks belong to the process and are dropped when *any*
descriptor of the file is closed, so nothing else in this process may open ``.lock``; this
module also refuses to lock the same file twice from one process for the same reason.

``.lock`` cannot say who holds it: Kafka writes nothing in it, and the holder's pid may be
reused or belong to another pid namespace. So a holder that lets writers following the writer
contract append beside it (the daemon) also holds ``.cleanerd-writers.lock`` with ``flock`` for
as long as it holds ``.lock``; the kernel drops both when it dies, so neither can go stale.
:meth:`LogDir.holder` reads both without taking either.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import os
import re
import struct
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cleanerd.storage._checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from cleanerd.storage._errors import LogDirLockedError, StorageError
from cleanerd.storage._topic_partition import (
    MAX_PARTITION,
    TopicPartition,
    is_valid_topic_name,
    validate_topic_name,
)

__all__ = [
    "LOCK_FILE",
    "WRITERS_LOCK_FILE",
    "LogDir",
    "LogDirHolder",
    "TopicPartition",
    "parse_any_partition_dir_name",
    "parse_partition_dir_name",
    "partition_of",
    "validate_topic_name",
]

LOCK_FILE = ".lock"
WRITERS_LOCK_FILE = ".cleanerd-writers.lock"
"""``flock``-held beside ``.lock`` by a holder that welcomes contract writers (module doc)."""
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_SPECIAL_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)
_PARTITION = re.compile(r"0|[1-9][0-9]*")

# Lock files (st_dev, st_ino) this process holds, and whether it welcomes writers beside it;
# see the module docstring for why.
_held: dict[tuple[int, int], bool] = {}
_held_guard = threading.Lock()


KRAFT_METADATA_TOPIC = "__cluster_metadata"
"""The KRaft metadata log's topic: its unkeyed records are the cluster's state, never a log to
compact (Kafka's ``LogManager`` leaves it to the Raft layer)."""


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` -> TopicPartition, or None if this is not a live partition dir.

    Split at the last '-' (topics may contain '-'). Dirs being deleted, moved between log dirs
    or set aside as stray (``...-delete``, ``-future``, ``-stray``) are not ours to touch, and
    neither is anything with an invalid topic or a non-canonical partition number such as
    ``01`` (it would not be the directory ``partition_dir`` names), nor KRaft's metadata log.
    """
    if name.endswith(_SPECIAL_DIR_SUFFIXES):
        return None
    topic, sep, partition = name.rpartition("-")
    if topic == KRAFT_METADATA_TOPIC:
        return None  # KRaft's metadata log: Kafka's LogManager never loads it, nor do we
    if not sep or not is_valid_topic_name(topic) or _PARTITION.fullmatch(partition) is None:
        return None
    number = int(partition)
    if number > MAX_PARTITION:
        return None
    return TopicPartition(topic, number)


def parse_any_partition_dir_name(name: str) -> TopicPartition | None:
    """``parse_partition_dir_name``, and the partition of a dir Kafka is deleting, moving or
    has set aside (``<topic>-<partition>.<id>-delete``, ``-future``, ``-stray``): for readers
    that must see every copy of a partition's data (``cleanerd erasure check``)."""
    if name.endswith(_SPECIAL_DIR_SUFFIXES):
        stem, dot, _ = name.rpartition(".")
        return parse_partition_dir_name(stem) if dot else None
    return parse_partition_dir_name(name)


def partition_of(directory: Path) -> TopicPartition:
    """The partition a dir holds; StorageError naming it when it is not a live partition dir."""
    if not directory.is_dir():
        raise StorageError(f"partition directory {directory} does not exist")
    tp = parse_partition_dir_name(directory.name)
    if tp is None:
        raise StorageError(
            f"{directory} is not a partition directory (expected <topic>-<partition>)"
        )
    return tp


def _lock_holder_pid(fd: int) -> int | None:
    """Ask the kernel (F_GETLK) which process holds a conflicting lock; None if unknown."""
    pid = _conflicting_lock(fd)
    return pid if pid else None


def _conflicting_lock(fd: int) -> int | None:
    """F_GETLK: None when nobody else holds a lock on the file, else the holder's pid (0 when the
    kernel does not say, or this is not 64-bit Linux, where the layout below is not known)."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return 0
    # struct flock on 64-bit Linux: short l_type, short l_whence, off_t l_start, off_t l_len,
    # pid_t l_pid (+ padding). Pass a roomy buffer so the kernel's copy never overruns it.
    layout = "@hhqqi"
    query = struct.pack(layout, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(64, b"\0")
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return 0
    lock_type, _whence, _start, _length, pid = struct.unpack_from(layout, answer)
    if lock_type == fcntl.F_UNLCK:
        return None
    return max(int(pid), 0)  # 0: an OFD lock, or a holder in another pid namespace


def _writers_welcome(path: Path) -> bool:
    """Whether some live process holds ``path`` with ``flock`` (only welcoming holders do).

    The probe asks for a shared lock: two probes never see each other as a holder."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageError(f"{path}: cannot open: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as exc:
        raise StorageError(f"{path}: cannot lock: {exc.strerror}") from exc
    finally:
        os.close(fd)  # closing lets go of the probe's own shared lock
    return False


class Holding(enum.Enum):
    """Who holds a log dir's ``.lock``, as far as writers beside it are concerned."""

    FREE = "free"
    WELCOMING = "welcoming"  # a cleanerd daemon: writers under the writer contract may append
    EXCLUSIVE = "exclusive"  # a broker, ``cleanerd compact``, another ``gen``, or unknown


@dataclass(frozen=True)
class LogDirHolder:
    """:meth:`LogDir.holder`'s answer; ``pid`` when the kernel named the holder."""

    holding: Holding
    pid: int | None = None

    def describe(self) -> str:
        return f"process {self.pid}" if self.pid is not None else "another process"


class LogDir:
    """A log dir root; finding partitions and checkpoint paths, and holding Kafka's lock."""

    def __init__(self, path: Path | str) -> None:
        self._path = Path(path).absolute()
        if not self._path.exists():
            raise StorageError(f"log dir {self._path} does not exist")
        if not self._path.is_dir():
            raise StorageError(f"log dir {self._path} is not a directory")
        self._lock_fd: int | None = None
        self._lock_key: tuple[int, int] | None = None
        self._writers_fd: int | None = None  # WRITERS_LOCK_FILE, while welcoming writers

    def __repr__(self) -> str:
        return f"LogDir({str(self._path)!r})"

    @property
    def path(self) -> Path:
        return self._path

    # ----------------------------------------------------------------------- layout

    def partitions(self) -> list[TopicPartition]:
        """Live partition dirs, sorted by (topic, partition); other entries are ignored."""
        try:
            with os.scandir(self._path) as entries:
                found = [
                    tp
                    for entry in entries
                    if (tp := parse_partition_dir_name(entry.name)) is not None and entry.is_dir()
                ]
        except OSError as exc:
            raise StorageError(f"log dir {self._path}: cannot list: {exc.strerror}") from exc
        return sorted(found)

    def partition_dir(self, tp: TopicPartition) -> Path:
        """Where ``tp`` lives; validating the name keeps ``../x`` and friends out of paths."""
        topic, partition = tp
        validate_topic_name(topic)
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise StorageError(f"invalid partition {partition!r}: not an integer")
        if not 0 <= partition <= MAX_PARTITION:
            raise StorageError(f"invalid partition {partition}: out of range")
        return self._path / TopicPartition(topic, partition).dir_name

    @property
    def lock_file(self) -> Path:
        return self._path / LOCK_FILE

    @property
    def writers_lock_file(self) -> Path:
        return self._path / WRITERS_LOCK_FILE

    @property
    def cleaner_offset_checkpoint(self) -> Path:
        return self._path / CLEANER_OFFSET_CHECKPOINT

    @property
    def recovery_point_checkpoint(self) -> Path:
        return self._path / RECOVERY_POINT_CHECKPOINT

    @property
    def log_start_offset_checkpoint(self) -> Path:
        return self._path / LOG_START_OFFSET_CHECKPOINT

    @property
    def replication_offset_checkpoint(self) -> Path:
        return self._path / REPLICATION_OFFSET_CHECKPOINT

    def leader_epoch_checkpoint(self, tp: TopicPartition) -> Path:
        return self.partition_dir(tp) / LEADER_EPOCH_CHECKPOINT

    def partition_metadata(self, tp: TopicPartition) -> Path:
        return self.partition_dir(tp) / PARTITION_METADATA

    # ----------------------------------------------------------------------- locking

    @property
    def is_locked(self) -> bool:
        """True while this object holds the lock."""
        return self._lock_fd is not None

    def lock(self, *, welcome_writers: bool = False) -> None:
        """Take ``.lock`` exactly like a broker would, or raise LogDirLockedError.

        The file is created if missing and never truncated or deleted: the broker owns it too.
        ``welcome_writers`` (the daemon) also holds :data:`WRITERS_LOCK_FILE`, which tells
        writers following the writer contract that they may append beside this holder.
        """
        with _held_guard:
            if self._lock_fd is not None:
                raise LogDirLockedError(f"log dir {self._path} is already locked by this LogDir")
            # Check before opening: closing a descriptor would drop a lock we already hold.
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(self.lock_file)
                if (st.st_dev, st.st_ino) in _held:
                    raise LogDirLockedError(
                        f"log dir {self._path} is already locked by this cleanerd process"
                    )
            try:
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise StorageError(
                    f"log dir {self._path}: cannot open {LOCK_FILE}: {exc.strerror}"
                ) from exc
            try:
                st = os.fstat(fd)
                key = (st.st_dev, st.st_ino)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _lock_holder_pid(fd) if exc.errno in (errno.EACCES, errno.EAGAIN) else None
                os.close(fd)
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise StorageError(
                        f"log dir {self._path}: cannot lock {LOCK_FILE}: {exc.strerror}"
                    ) from exc
                who = f"process {holder}" if holder is not None else "another process"
                raise LogDirLockedError(
                    f"log dir {self._path} is locked by {who} ({self.lock_file}): a running"
                    " Kafka broker or another cleanerd owns this log dir, and cleanerd must not"
                    " touch it while that process runs; stop it first"
                ) from None
            if welcome_writers:
                try:
                    self._writers_fd = self._welcome()
                except BaseException:
                    os.close(fd)  # drops the lock just taken
                    raise
            self._lock_fd, self._lock_key = fd, key
            _held[key] = welcome_writers

    def _welcome(self) -> int:
        """Hold WRITERS_LOCK_FILE (a probe's shared lock lasts a moment: wait for it)."""
        path = self.writers_lock_file
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(
                f"log dir {self._path}: cannot open {path.name}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(fd)
            raise StorageError(
                f"log dir {self._path}: cannot lock {path.name}: {exc.strerror}"
            ) from exc
        return fd

    def holder(self) -> LogDirHolder:
        """Who holds ``.lock`` now, found without taking it: probing by locking would, for an
        instant, make a broker starting then refuse the dir."""
        with _held_guard:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(self.lock_file)
                welcoming = _held.get((st.st_dev, st.st_ino))
                if welcoming is not None:  # this process: opening .lock would drop its lock
                    kind = Holding.WELCOMING if welcoming else Holding.EXCLUSIVE
                    return LogDirHolder(kind, os.getpid())
            try:
                fd = os.open(self.lock_file, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return LogDirHolder(Holding.FREE)
            except OSError as exc:
                raise StorageError(
                    f"log dir {self._path}: cannot open {LOCK_FILE}: {exc.strerror}"
                ) from exc
            try:
                # The writers' lock first: a welcoming holder takes it after .lock and lets go
                # of it before, so once it is seen held, .lock is held by the same process
                # (and still held when looked at next, unless that process is leaving).
                welcome = _writers_welcome(self.writers_lock_file)
                pid = _conflicting_lock(fd)
            finally:
                os.close(fd)
        if pid is None:
            return LogDirHolder(Holding.FREE)
        return LogDirHolder(Holding.WELCOMING if welcome else Holding.EXCLUSIVE, pid or None)

    def unlock(self) -> None:
        """Release the lock; a no-op when not locked, so it is safe in ``finally`` blocks."""
        with _held_guard:
            fd, key = self._lock_fd, self._lock_key
            if fd is None:
                return
            self._lock_fd = self._lock_key = None
            if key is not None:
                _held.pop(key, None)
            writers, self._writers_fd = self._writers_fd, None
            if writers is not None:  # before .lock: see holder()
                os.close(writers)
            try:
                with contextlib.suppress(OSError):
                    fcntl.lockf(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[LogDir]:
        """``with logdir.locked(): ...`` holds the lock for the block, releasing it on errors."""
        self.lock()
        try:
            yield self
        finally:
            self.unlock()
