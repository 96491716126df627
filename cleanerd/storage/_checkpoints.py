"""Kafka's text checkpoint files and ``partition.metadata``, read and written byte-compatibly.

The broker reads these files after we write them, so the writers produce exactly Kafka's bytes
(version line, count line, one entry per line, ``\\n`` endings) and replace files atomically.
The readers follow Kafka's parsing rules (Java ``readLine`` line breaks, fields split on runs of
Java whitespace, Java-style integers) but every failure becomes a :class:`CheckpointError` that
names the file and the 1-based line, never a bare ``ValueError``.

The log-dir offset checkpoints hold one line per partition, and the cleaner rewrites its file
after every cleaning (as Kafka's ``LogCleanerManager.updateCheckpoints`` does). Parsing and
formatting every line each time made a cleaning cost O(partitions); so each file's last parse is
kept with the exact bytes it came from (``_OffsetFile``): a read whose bytes are the same reuses
it, and an update changes only its own lines. The bytes are always read and compared, so a file
another process rewrote is parsed again; the write itself is unchanged (temp, fsync, rename).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import fcntl
import operator
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import SupportsIndex, TypeVar, cast

from cleanerd.format import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN
from cleanerd.storage._errors import CheckpointError, StorageError
from cleanerd.storage._regular import read_regular
from cleanerd.storage._topic_partition import MAX_PARTITION, TopicPartition, validate_topic_name

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

OFFSET_CHECKPOINTS = (
    CLEANER_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
"""Log-dir-level files sharing the ``<topic> <partition> <offset>`` entry format."""

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"

_INT32 = (INT_MIN, INT_MAX)
_INT64 = (LONG_MIN, LONG_MAX)
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # what Integer.parseInt / Long.parseLong accept
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine terminators
_FIELD_SEP = re.compile(r"[ \t\n\x0b\f\r]+")  # Java regex \s+
_METADATA_SEP = re.compile(r":[ \t\n\x0b\f\r]+")  # partition.metadata "key: value"
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")
_SHOW_MAX = 120
MAX_CHECKPOINT_BYTES = 64 << 20
"""The longest checkpoint file read (a line is a topic of at most 249 characters, a partition
and an offset: this holds hundreds of thousands of partitions); a longer one is refused
without being read whole."""

T = TypeVar("T")
Row = dict[str, int | str]


def fsync_dir(path: Path) -> None:
    """Make a rename or create inside ``path`` durable; without it a crash can undo the rename."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise StorageError(f"{path}: cannot open directory to fsync: {exc.strerror}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StorageError(f"{path}: cannot fsync directory: {exc.strerror}") from exc
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never a mix.

    Same protocol as Kafka's checkpoint writer: write ``<name>.tmp``, fsync it, rename it over
    the target, fsync the directory. On any failure the ``.tmp`` is removed and the old file is
    left untouched; OS errors surface as :class:`StorageError` naming the file.
    """
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o644)
    except OSError as exc:
        raise StorageError(f"{tmp}: cannot create: {exc.strerror}") from exc
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise StorageError(f"{path}: cannot write: {exc.strerror or exc}") from exc
        raise
    fsync_dir(path.parent)


class _BadLineError(Exception):
    """Internal: an entry parser's reason, turned into a CheckpointError with file and line."""


def _error(path: Path, line: int | None, reason: str) -> CheckpointError:
    where = f"{path} line {line}" if line is not None else str(path)
    return CheckpointError(f"{where}: {reason}")


def _show(text: str) -> str:
    """Quote a line for an error message without flooding the log with a huge one."""
    return repr(text[:_SHOW_MAX]) + ("..." if len(text) > _SHOW_MAX else "")


def _read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None if it does not exist."""
    try:
        # a FIFO or symlink under a checkpoint's name is refused
        data = read_regular(path, MAX_CHECKPOINT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _error(path, None, f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise _error(path, None, f"longer than {MAX_CHECKPOINT_BYTES} bytes: not a checkpoint")
    return data


def _read_text(path: Path) -> str | None:
    """The file as text, or None if it does not exist."""
    data = _read_bytes(path)
    return None if data is None else _decode(path, data)


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _error(path, line, f"not valid UTF-8 at byte {exc.start}") from exc


def _lines(text: str) -> list[str]:
    """Split like repeated Java ``readLine``: a final terminator does not start a new line."""
    if not text:
        return []
    parts = _LINE_BREAK.split(text)
    if parts[-1] == "":
        parts.pop()
    return parts


def _fields(line: str, sep: re.Pattern[str] = _FIELD_SEP) -> list[str]:
    """Java ``String.split``: a leading empty field is kept, trailing empty fields are dropped."""
    parts = sep.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _java_int(text: str, bounds: tuple[int, int]) -> int | None:
    """Parse like Java ``parseInt``/``parseLong`` (optional sign, ASCII digits, in range)."""
    if _JAVA_INT.fullmatch(text) is None:
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def _read_entries(path: Path, parse: Callable[[str, list[str]], T]) -> list[T]:
    """Kafka's common layout: version, count, entries. Missing or empty file = no entries."""
    text = _read_text(path)
    return [] if text is None else _parse_entries(path, text, parse)


def _parse_entries(path: Path, text: str, parse: Callable[[str, list[str]], T]) -> list[T]:
    """``_read_entries`` of the file's text."""
    lines = _lines(text)
    if not lines:
        return []
    version = _java_int(lines[0], _INT32)
    if version is None:
        raise _error(path, 1, f"expected a version number, got {_show(lines[0])}")
    if version != CHECKPOINT_VERSION:
        raise _error(path, 1, f"unsupported version {version}, expected {CHECKPOINT_VERSION}")
    if len(lines) == 1:
        return []  # Kafka also reads a file without a count line as empty
    count = _java_int(lines[1], _INT32)
    if count is None or count < 0:
        raise _error(path, 2, f"expected an entry count, got {_show(lines[1])}")
    entries: list[T] = []
    for number, line in enumerate(lines[2:], start=3):
        try:
            entries.append(parse(line, _fields(line)))
        except _BadLineError as exc:
            raise _error(path, number, str(exc)) from None
    if len(entries) != count:
        raise _error(path, 2, f"count says {count} entries but the file has {len(entries)}")
    return entries


def _as_int(value: object, bounds: tuple[int, int], what: str, path: Path) -> int:
    """Validate a value we are about to write, so we never produce a file Kafka rejects."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):  # int, numpy ints; not 1.0
        raise _error(path, None, f"cannot write {what} {value!r}: not an integer")
    number = operator.index(cast("SupportsIndex", value))
    if not bounds[0] <= number <= bounds[1]:
        raise _error(path, None, f"cannot write {what} {number}: out of range {bounds}")
    return number


def _checkpoint_bytes(entries: list[str]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries)), *entries]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _offset_line(tp: TopicPartition, offset: int) -> str:
    return f"{tp.topic} {tp.partition} {offset}\n"


@dataclass(frozen=True, slots=True)
class _OffsetFile:
    """One offset checkpoint as last read or written here: its exact bytes, its entries, and
    (once written or updated here) its entry lines in the order they are written (sorted)."""

    raw: bytes
    entries: dict[TopicPartition, int]  # never changed once kept: callers get copies
    keys: tuple[TopicPartition, ...] | None = None
    lines: tuple[str, ...] | None = None

    def sorted_lines(self) -> tuple[list[TopicPartition], list[str]]:
        """The sorted keys and their lines, as lists to change."""
        if self.keys is not None and self.lines is not None:
            return list(self.keys), list(self.lines)
        keys = sorted(self.entries)
        return keys, [_offset_line(tp, self.entries[tp]) for tp in keys]

    @classmethod
    def of_lines(
        cls, keys: list[TopicPartition], lines: list[str], entries: dict[TopicPartition, int]
    ) -> _OffsetFile:
        raw = f"{CHECKPOINT_VERSION}\n{len(lines)}\n{''.join(lines)}".encode()
        return cls(raw, entries, tuple(keys), tuple(lines))


_KEPT_FILES = 64
"""Offset checkpoint files whose last parse is kept (a daemon has four per log dir)."""

_OFFSET_FILES: OrderedDict[str, _OffsetFile] = OrderedDict()
_OFFSET_FILES_GUARD = threading.Lock()


def _kept(path: Path) -> _OffsetFile | None:
    with _OFFSET_FILES_GUARD:
        return _OFFSET_FILES.get(os.path.abspath(path))


def _keep(path: Path, parsed: _OffsetFile) -> None:
    key = os.path.abspath(path)
    with _OFFSET_FILES_GUARD:
        _OFFSET_FILES[key] = parsed
        _OFFSET_FILES.move_to_end(key)
        while len(_OFFSET_FILES) > _KEPT_FILES:
            _OFFSET_FILES.popitem(last=False)


def _offset_file(path: Path) -> _OffsetFile | None:
    """The file's entries (None: no file): the kept parse when its bytes are the same."""
    raw = _read_bytes(path)
    if raw is None:
        return None
    kept = _kept(path)
    if kept is not None and kept.raw == raw:
        return kept
    entries = dict(_parse_entries(path, _decode(path, raw), _parse_offset_entry))
    parsed = _OffsetFile(raw, entries)
    _keep(path, parsed)
    return parsed


def _parse_offset_entry(line: str, fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise _BadLineError(f"expected 'topic partition offset', got {_show(line)}")
    topic, partition_text, offset_text = fields
    try:
        validate_topic_name(topic)
    except StorageError as exc:
        raise _BadLineError(str(exc)) from None
    partition = _java_int(partition_text, (0, MAX_PARTITION))
    if partition is None:
        raise _BadLineError(f"partition must be a non-negative 32-bit integer, got {_show(line)}")
    offset = _java_int(offset_text, _INT64)
    if offset is None:
        raise _BadLineError(f"offset must be a 64-bit integer, got {_show(line)}")
    return TopicPartition(topic, partition), offset


def checkpointed_offset(log_dir: Path, name: str, tp: TopicPartition) -> int | None:
    """``tp``'s entry in the log dir's offset checkpoint ``name`` (None: no file, or no entry)."""
    found = _offset_file(Path(log_dir) / name)
    return None if found is None else found.entries.get(tp)


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Read a log-dir offset checkpoint; a missing or empty file means no entries.

    Duplicate partitions are allowed and the last one wins, as in Kafka.
    """
    found = _offset_file(Path(path))
    return {} if found is None else found.entries.copy()  # a dict's copy: no per-entry work


def _checked_entry(path: Path, key: tuple[str, int], value: object) -> tuple[TopicPartition, int]:
    """An entry about to be written, checked so we never write a file Kafka rejects."""
    topic, partition = key
    try:
        validate_topic_name(topic)
    except StorageError as exc:
        raise _error(path, None, f"cannot write entry: {exc}") from None
    part = _as_int(partition, (0, MAX_PARTITION), "partition", path)
    return TopicPartition(topic, part), _as_int(value, _INT64, "offset", path)


def write_offset_checkpoint(path: Path, entries: Mapping[TopicPartition, int]) -> None:
    """Atomically write ``entries`` sorted by (topic, partition) so output is deterministic."""
    rows = dict(_checked_entry(path, key, value) for key, value in entries.items())
    keys = sorted(rows)
    written = _OffsetFile.of_lines(keys, [_offset_line(tp, rows[tp]) for tp in keys], rows)
    atomic_write(path, written.raw)
    _keep(path, written)


_NOTHING: Mapping[TopicPartition, int] = MappingProxyType({})


def update_offset_checkpoint(
    path: Path,
    set: Mapping[TopicPartition, int] = _NOTHING,
    remove: Iterable[TopicPartition] = (),
) -> dict[TopicPartition, int]:
    """Read-modify-write: drop ``remove``, then apply ``set``; returns what was written.

    Entries for other partitions (the broker's, other cleaners') are preserved. Threads of this
    process (the daemon's workers) are serialised per file, and processes sharing the log dir
    (Spark's plan A tasks, under one driver's log dir lock) by an flock of the directory.
    """
    path = Path(path)
    with _file_lock(path), _dir_flock(path.parent):
        found = _offset_file(path)
        if found is None:
            found = _OffsetFile(b"", {}, (), ())
        current = found.entries.copy()
        keys, lines = found.sorted_lines()  # only the changed lines are made again
        for key in remove:
            tp = TopicPartition(*key)
            if current.pop(tp, None) is not None:
                at = bisect.bisect_left(keys, tp)
                del keys[at], lines[at]
        for key, value in set.items():
            tp, offset = _checked_entry(path, key, value)
            at = bisect.bisect_left(keys, tp)
            if tp in current:
                lines[at] = _offset_line(tp, offset)
            else:
                keys.insert(at, tp)
                lines.insert(at, _offset_line(tp, offset))
            current[tp] = offset
        written = _OffsetFile.of_lines(keys, lines, current)
        atomic_write(path, written.raw)
        _keep(path, written)
        return current.copy()


_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _dir_flock(directory: Path) -> Iterator[None]:
    """An exclusive flock of ``directory`` (not Kafka's ``.lock`` file, not a writer lock)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _file_lock(path: Path) -> threading.Lock:
    """One lock per checkpoint file in this process (Kafka holds its cleaner-manager lock)."""
    key = os.path.abspath(path)
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(key, threading.Lock())


def _parse_epoch_entry(line: str, fields: list[str]) -> tuple[int, int]:
    if len(fields) != 2:
        raise _BadLineError(f"expected 'epoch start_offset', got {_show(line)}")
    epoch = _java_int(fields[0], _INT32)
    if epoch is None:
        raise _BadLineError(f"epoch must be a 32-bit integer, got {_show(line)}")
    start = _java_int(fields[1], _INT64)
    if start is None:
        raise _BadLineError(f"start offset must be a 64-bit integer, got {_show(line)}")
    return epoch, start


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) pairs in file order; a missing or empty file means none."""
    return _read_entries(path, _parse_epoch_entry)


def write_leader_epoch_checkpoint(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    """Atomically write the pairs in the given order (Kafka keeps them ordered by epoch)."""
    lines = [
        f"{_as_int(epoch, _INT32, 'epoch', path)} {_as_int(start, _INT64, 'start offset', path)}"
        for epoch, start in entries
    ]
    atomic_write(path, _checkpoint_bytes(lines))


def topic_id_from_bytes(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    if len(raw) != 16:
        raise ValueError(f"a topic id is 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _topic_id_problem(topic_id: str) -> str | None:
    """Why ``topic_id`` is not a valid, canonical, non-zero Kafka topic id (None if it is)."""
    if _TOPIC_ID.fullmatch(topic_id) is None:
        return f"topic id must be 22 URL-safe base64 characters, got {_show(topic_id)}"
    raw = base64.urlsafe_b64decode(topic_id + "==")
    if topic_id_from_bytes(raw) != topic_id:
        return f"topic id {topic_id!r} is not canonical base64"
    if raw == bytes(16):
        return "the all-zero topic id is reserved and never valid"
    return None


def _parse_partition_metadata(path: Path) -> tuple[int, str]:
    text = _read_text(path)
    if text is None:
        raise _error(path, None, "file does not exist")
    lines = _lines(text)
    if not lines:
        raise _error(path, 1, "file is empty, expected 'version: 0'")
    fields = _fields(lines[0], _METADATA_SEP)
    version = _java_int(fields[1], _INT32) if len(fields) == 2 else None
    if fields[:1] != ["version"] or version is None:
        raise _error(path, 1, f"expected 'version: <number>', got {_show(lines[0])}")
    if version < 0:
        raise _error(path, 1, f"unsupported version {version}, expected 0 or later")
    if len(lines) < 2:
        raise _error(path, 2, "missing 'topic_id: <id>' line")
    fields = _fields(lines[1], _METADATA_SEP)
    if len(fields) != 2 or fields[0] != "topic_id":
        raise _error(path, 2, f"expected 'topic_id: <id>', got {_show(lines[1])}")
    problem = _topic_id_problem(fields[1])
    if problem is not None:
        raise _error(path, 2, problem)
    for number, line in enumerate(lines[2:], start=3):
        if line.strip():
            raise _error(path, number, f"unexpected content after topic_id: {_show(line)}")
    return version, fields[1]


def read_partition_metadata(path: Path) -> str:
    """The topic id from a partition dir's ``partition.metadata`` (missing file is an error)."""
    return _parse_partition_metadata(path)[1]


def write_partition_metadata(path: Path, topic_id: str) -> None:
    """Atomically write Kafka's exact bytes: ``version: 0\\ntopic_id: <id>``, no final newline."""
    problem = _topic_id_problem(topic_id)
    if problem is not None:
        raise _error(path, None, f"cannot write: {problem}")
    atomic_write(path, f"version: 0\ntopic_id: {topic_id}".encode("ascii"))


def read_any_checkpoint(path: Path) -> list[Row]:
    """Parse any known checkpoint (kind chosen by file name, ``.tmp`` allowed) into plain rows.

    Offset rows keep file order and duplicates, since ``cleanerd dump`` shows what is on disk.
    """
    path = Path(path)
    name = path.name.removesuffix(TMP_SUFFIX)
    if name in OFFSET_CHECKPOINTS:
        return [
            {"topic": tp.topic, "partition": tp.partition, "offset": offset}
            for tp, offset in _read_entries(path, _parse_offset_entry)
        ]
    if name == LEADER_EPOCH_CHECKPOINT:
        return [
            {"epoch": epoch, "start_offset": start}
            for epoch, start in read_leader_epoch_checkpoint(path)
        ]
    if name == PARTITION_METADATA:
        version, topic_id = _parse_partition_metadata(path)
        return [{"version": version, "topic_id": topic_id}]
    known = ", ".join((*OFFSET_CHECKPOINTS, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA))
    raise _error(path, None, f"not a known checkpoint file name (expected one of: {known})")
