"""A partition's writer lock: reentrant inside a process, exclusive between processes.

Writers in other processes (``cleanerd gen``, an application using PartitionLog) and the daemon,
which rolls idle segments and swaps cleaned ones, must not change a partition dir at the same
time. Between processes the lock is ``flock(LOCK_EX)`` on a descriptor of the partition dir
itself: no lock file appears in the dir, so Kafka's loader and ``cleanerd verify`` see nothing
new. ``flock`` locks belong to an open file description, so two descriptors of one dir in one
process would exclude each other and a thread nesting two PartitionLogs of the same dir would
deadlock; hence every lock object of one dir in a process shares one ``RLock`` and one flock
(keyed by the dir's device and inode). The dir is opened on the outermost acquire and closed on
the last release, so an idle lock holds no descriptor and a forked child never shares one.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from cleanerd.storage._errors import StorageError

Hook = Callable[[], None]


class _DirLock:
    """The per-process state of one directory: the RLock, the flock fd and the hold depth."""

    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self.depth = 0  # changed only by the thread holding ``rlock``
        self.owner: int | None = None  # thread ident while held
        self.fd: int | None = None

    def lock(self, directory: Path, blocking: bool) -> bool:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"{directory}: cannot open to lock: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"{directory}: cannot lock: {exc.strerror}") from exc
        self.fd = fd
        return True

    def unlock(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


_registry: weakref.WeakValueDictionary[tuple[int, int], _DirLock] = weakref.WeakValueDictionary()
_registry_guard = threading.Lock()


def _dir_lock(directory: Path) -> _DirLock:
    try:
        st = os.stat(directory)
    except OSError as exc:
        raise StorageError(f"{directory}: cannot stat to lock: {exc.strerror}") from exc
    key = (st.st_dev, st.st_ino)
    with _registry_guard:
        shared = _registry.get(key)
        if shared is None:
            shared = _registry[key] = _DirLock()
        return shared


class PartitionWriterLock:
    """``with lock:`` holds the partition dir against every other writer, here or elsewhere.

    ``on_acquire`` runs on this object's outermost acquire (after the flock is taken) and
    ``on_release`` on its outermost release (before the flock is let go): PartitionLog uses them
    to pick up what other processes changed and to publish what it changed. Do not fork while
    holding the lock.
    """

    def __init__(
        self,
        directory: Path,
        *,
        on_acquire: Hook | None = None,
        on_release: Hook | None = None,
    ) -> None:
        self.directory = Path(directory)
        self._shared: _DirLock | None = _dir_lock(self.directory)
        self._on_acquire = on_acquire
        self._on_release = on_release
        self._depth = 0  # this object's holds; changed only by the thread holding the RLock

    @property
    def depth(self) -> int:
        """How many times this object is held (0 when free)."""
        return self._depth

    def _get_shared(self) -> _DirLock:
        if self._shared is None:  # closed: lock again on demand, as before the close
            self._shared = _dir_lock(self.directory)
        return self._shared

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; with ``blocking=False`` return False instead of waiting."""
        shared = self._get_shared()
        if not shared.rlock.acquire(blocking):
            return False
        try:
            if shared.depth == 0 and not shared.lock(self.directory, blocking):
                shared.rlock.release()
                return False
        except BaseException:
            shared.rlock.release()
            raise
        shared.depth += 1
        shared.owner = threading.get_ident()
        self._depth += 1
        if self._depth == 1 and self._on_acquire is not None:
            try:
                self._on_acquire()
            except BaseException:
                self._let_go(shared)
                raise
        return True

    def release(self) -> None:
        shared = self._shared
        if shared is None or self._depth == 0 or shared.owner != threading.get_ident():
            raise RuntimeError(f"writer lock of {self.directory} released but not held")
        try:
            if self._depth == 1 and self._on_release is not None:
                self._on_release()
        finally:
            self._let_go(shared)

    def _let_go(self, shared: _DirLock) -> None:
        self._depth -= 1
        shared.depth -= 1
        try:
            if shared.depth == 0:
                shared.owner = None
                shared.unlock()
        finally:
            shared.rlock.release()

    def close(self) -> None:
        """Forget the shared state (PartitionLog.close); a later acquire locks again."""
        if self._depth == 0:
            self._shared = None

    def __enter__(self) -> PartitionWriterLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"PartitionWriterLock({str(self.directory)!r}, depth={self._depth})"
