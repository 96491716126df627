"""The erasure ledger: one JSON line per cleaning, in ``<partition dir>/cleanerd-erasure.jsonl``.

Proof of erasure needs to say when a value left the disk. After each cleaning's last swap the
driver appends one line saying when the swap happened, which offsets the cleaning covered and
what it removed::

    {"v":1,"time":"2027-01-15T08:00:00.000Z","time_ms":1800000000000,"first_dirty":0,
     "end":3000,"records_removed":2650,"tombstones_removed":410,"bytes_before":181234,
     "bytes_after":19020,"engine":"local","strategy":"offset","cleanings":1}

(one line in the file). ``time_ms`` is the wall clock when the line was written, right after the
swap; ``time`` is the same instant for people. ``[first_dirty, end)`` is the dirty range the
cleaning covered: it rewrote every segment below ``end``, so older values of any key written in
that range are gone from the segments. ``bytes_before`` and ``bytes_after`` are the sizes of the
segments below ``end``, before the cleaning and after its swap. An entry merged by rotation (see
below) has ``cleanings`` > 1 and a ``since_ms`` (and ``since``): the time of its first cleaning.

Where: a file in the partition dir, because a Kafka broker takes every directory of a log dir
for a partition (a stray one stops it) but ignores files of a partition dir it does not know.

Crash safety: a line is written with one ``pwrite`` and fsynced (the dir too when the file is
new), under an ``flock`` of the file. A crash mid-write leaves a torn last line (no ``\\n``):
readers ignore it, and the next writer cuts it off before appending.

Bounded: when an append would take the file past ``MAX_LEDGER_BYTES``, the file is rewritten
(``atomic_write``: temp file, fsync, rename, fsync of the dir) with the newest entries as they
are and the older ones merged pairwise until the rewrite is at most half the bound. A merged
entry spans the ranges and times of the cleanings it replaces and sums their counts: the ledger
loses precision about old cleanings, never the fact that a range was cleaned.

Reading never raises on content: a line that is not an entry is reported (file and line) and
skipped, a file larger than any ledger cleanerd writes is read from its last ``READ_LIMIT``
bytes only, and a symlink or FIFO under the name is refused as a problem.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cleanerd.format import LONG_MAX
from cleanerd.storage._checkpoints import atomic_write, fsync_dir
from cleanerd.storage._errors import StorageError
from cleanerd.storage._regular import open_regular

LEDGER_FILE = "cleanerd-erasure.jsonl"
"""The ledger's name inside each partition dir."""
LEDGER_VERSION = 1
MAX_LEDGER_BYTES = 256 << 10
"""An append that would pass this size rewrites the file to at most half of it."""
MAX_LINE_BYTES = 4096
"""A longer line is not an entry (ours are about 300 bytes)."""
READ_LIMIT = 4 * MAX_LEDGER_BYTES
"""A larger file is read from its last this many bytes only."""
_LABEL = re.compile(r"[a-z][a-z0-9_,-]{0,63}")
_INTS = (
    "time_ms",
    "first_dirty",
    "end",
    "records_removed",
    "tombstones_removed",
    "bytes_before",
    "bytes_after",
)


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as UTC ISO 8601 (``2027-01-15T08:00:00.000Z``); a value
    no date has (``-1``: a record without a timestamp) as its number."""
    if ms < 0:
        return str(ms)
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return str(ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One cleaning (or, ``cleanings`` > 1, several merged by rotation); see the module doc."""

    time_ms: int
    first_dirty: int
    end: int
    records_removed: int
    tombstones_removed: int
    bytes_before: int
    bytes_after: int
    engine: str
    strategy: str
    cleanings: int = 1
    since_ms: int | None = None

    def covers(self, offset: int) -> bool:
        """Whether ``offset`` lies in the cleaned range ``[first_dirty, end)``."""
        return self.first_dirty <= offset < self.end

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"v": LEDGER_VERSION, "time": iso_ms(self.time_ms)}
        doc.update({name: getattr(self, name) for name in _INTS})
        doc.update(engine=self.engine, strategy=self.strategy, cleanings=self.cleanings)
        if self.since_ms is not None:
            doc.update(since=iso_ms(self.since_ms), since_ms=self.since_ms)
        return doc

    def line(self) -> bytes:
        """The entry as the file holds it: compact JSON and ``\\n``."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_json(cls, doc: object) -> LedgerEntry:
        """An entry from a parsed line; ValueError says what is wrong. Unknown keys are
        ignored, so a later version may add fields."""
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("v") != LEDGER_VERSION:
            raise ValueError(f"not a version {LEDGER_VERSION} entry")
        ints = {name: _int(doc, name) for name in _INTS}
        labels = {name: _label(doc, name) for name in ("engine", "strategy")}
        cleanings = _int(doc, "cleanings", low=1) if "cleanings" in doc else 1
        since = _int(doc, "since_ms") if "since_ms" in doc else None
        if ints["first_dirty"] > ints["end"]:
            raise ValueError("first_dirty is beyond end")
        if since is not None and since > ints["time_ms"]:
            raise ValueError("since_ms is after time_ms")
        return cls(
            time_ms=ints["time_ms"],
            first_dirty=ints["first_dirty"],
            end=ints["end"],
            records_removed=ints["records_removed"],
            tombstones_removed=ints["tombstones_removed"],
            bytes_before=ints["bytes_before"],
            bytes_after=ints["bytes_after"],
            engine=labels["engine"],
            strategy=labels["strategy"],
            cleanings=cleanings,
            since_ms=since,
        )


def _int(doc: dict[str, object], name: str, low: int = 0) -> int:
    value = doc.get(name)
    # bool is an int to Python, not to the file
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= LONG_MAX:
        raise ValueError(f"{name} must be an integer from {low} to {LONG_MAX}")
    return value


def _label(doc: dict[str, object], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or _LABEL.fullmatch(value) is None:
        raise ValueError(f"{name} must be a short lowercase word")
    return value


def merge(entries: Sequence[LedgerEntry]) -> LedgerEntry:
    """One entry standing for consecutive ``entries``: their ranges and times spanned, their
    counts summed, their engines and strategies listed."""
    first, last = entries[0], entries[-1]

    def joined(name: str) -> str:
        words = {w for e in entries for w in getattr(e, name).split(",")}
        return ",".join(sorted(words))[:64]

    def total(name: str) -> int:
        return min(sum(int(getattr(e, name)) for e in entries), LONG_MAX)

    return LedgerEntry(
        time_ms=last.time_ms,
        first_dirty=min(e.first_dirty for e in entries),
        end=max(e.end for e in entries),
        records_removed=total("records_removed"),
        tombstones_removed=total("tombstones_removed"),
        bytes_before=total("bytes_before"),
        bytes_after=total("bytes_after"),
        engine=joined("engine"),
        strategy=joined("strategy"),
        cleanings=total("cleanings"),
        since_ms=first.time_ms if first.since_ms is None else first.since_ms,
    )


def compact_entries(entries: Sequence[LedgerEntry], budget: int) -> list[LedgerEntry]:
    """``entries`` in at most ``budget`` bytes of lines: the newest as they are (half the
    budget), the older ones merged in adjacent pairs until they fit the other half."""
    recent: list[LedgerEntry] = []
    used = 0
    for entry in reversed(entries):
        size = len(entry.line())
        if used + size > budget // 2:
            break
        recent.append(entry)
        used += size
    recent.reverse()
    older = list(entries[: len(entries) - len(recent)])
    while older and sum(len(e.line()) for e in older) > budget - used:
        if len(older) == 1:
            return recent  # one merged line cannot fit: only when the budget is absurd
        older = [merge(older[i : i + 2]) for i in range(0, len(older), 2)]
    return older + recent


@dataclass(frozen=True)
class Ledger:
    """What a partition's ledger says: its entries, oldest first, and what could not be read
    (each problem names the file, and the line when there is one)."""

    path: Path
    entries: tuple[LedgerEntry, ...]
    problems: tuple[str, ...]


def ledger_path(partition_dir: Path) -> Path:
    return Path(partition_dir) / LEDGER_FILE


def read_ledger(partition_dir: Path) -> Ledger:
    """The ledger of ``partition_dir`` (no entries when it has none); never raises for what the
    file holds or for an OS error reading it: those are ``problems``."""
    path = ledger_path(partition_dir)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return Ledger(path, (), ())
    except OSError as e:  # NotRegularFileError included
        return Ledger(path, (), (_os_problem(path, "cannot read", e),))
    try:
        raw, skipped = _tail(fd)
    except OSError as e:
        return Ledger(path, (), (_os_problem(path, "cannot read", e),))
    finally:
        os.close(fd)
    entries, problems = _parse(path, raw, skipped)
    return Ledger(path, tuple(entries), tuple(problems))


def _os_problem(path: Path, what: str, e: OSError) -> str:
    return str(e) if isinstance(e, StorageError) else f"{path}: {what}: {e.strerror or e}"


def _tail(fd: int) -> tuple[bytes, int]:
    """The file's last ``READ_LIMIT`` bytes (all of a smaller file), and how many came before."""
    size = os.fstat(fd).st_size
    start = max(0, size - READ_LIMIT)
    chunks = []
    pos = start
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks), start


def _lines(raw: bytes, skipped: int) -> Iterator[tuple[int | None, bytes]]:
    """(1-based line number or None when unknown, line without ``\\n``) of the whole lines;
    the first, partial line of a tail and a torn last line are left out."""
    body = raw
    first_line = 1
    if skipped:
        cut = body.find(b"\n") + 1
        body = body[cut:] if cut else b""
        first_line = 0
    end = body.rfind(b"\n") + 1  # what follows the last \n is a torn line
    for n, line in enumerate(body[:end].split(b"\n")[:-1]):
        yield (n + first_line if first_line else None), line


def _parse(path: Path, raw: bytes, skipped: int) -> tuple[list[LedgerEntry], list[str]]:
    entries: list[LedgerEntry] = []
    problems: list[str] = []
    if skipped:
        problems.append(
            f"{path}: {skipped + len(raw)} bytes, more than a ledger cleanerd writes "
            f"({MAX_LEDGER_BYTES}): only its last {len(raw)} bytes were read"
        )
    for number, line in _lines(raw, skipped):
        where = f"{path}: line {number}" if number is not None else f"{path}: a line"
        if not line.strip():
            continue
        try:
            if len(line) > MAX_LINE_BYTES:
                raise ValueError(f"{len(line)} bytes, longer than an entry can be")
            entries.append(LedgerEntry.from_json(json.loads(line)))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSON errors included
            problems.append(f"{where}: not a ledger entry: {_short(e)}")
    return entries, problems


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def new_ledger_entry(
    time_ms: int,
    first_dirty: int,
    end: int,
    *,
    records_removed: int,
    tombstones_removed: int,
    bytes_before: int,
    bytes_after: int,
    engine: str,
    strategy: str,
) -> LedgerEntry:
    """A new entry for one cleaning, its counts clamped to what the file format allows."""

    def clamp(value: int) -> int:
        return min(max(value, 0), LONG_MAX)

    return LedgerEntry(
        time_ms=clamp(time_ms),
        first_dirty=clamp(first_dirty),
        end=clamp(max(end, first_dirty)),
        records_removed=clamp(records_removed),
        tombstones_removed=clamp(tombstones_removed),
        bytes_before=clamp(bytes_before),
        bytes_after=clamp(bytes_after),
        engine=engine,
        strategy=strategy,
    )


def append_ledger_entry(partition_dir: Path, entry: LedgerEntry) -> None:
    """Append ``entry`` to the partition's ledger, crash-safely, rotating when it is full (see
    the module doc). StorageError names the file when it cannot be written."""
    path = ledger_path(partition_dir)
    line = entry.line()
    created = False
    try:
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            created = True
        except FileExistsError:
            fd = open_regular(path, os.O_RDWR)
        with _locked(path, fd) as fd:
            size = os.fstat(fd).st_size
            whole = _whole_lines_end(fd, size) if size <= MAX_LEDGER_BYTES else -1
            if whole < 0 or whole + len(line) > MAX_LEDGER_BYTES:
                _rotate(path, fd, entry)
                return
            if whole != size:
                os.ftruncate(fd, whole)  # a torn last line: a crash mid-write
            _write_at(fd, line, whole)
            os.fsync(fd)
    except StorageError:
        raise
    except OSError as e:
        raise StorageError(_os_problem(path, "cannot write", e)) from e
    if created:
        fsync_dir(path.parent)


@contextlib.contextmanager
def _locked(path: Path, fd: int) -> Iterator[int]:
    """``fd`` under an exclusive ``flock``, reopened if another writer rotated the file (it
    was replaced while this one waited); closed when the block ends."""
    try:
        while True:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            st = os.fstat(fd)
            if current is not None and (current.st_ino, current.st_dev) == (st.st_ino, st.st_dev):
                break
            os.close(fd)
            fd = -1
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        yield fd
    finally:
        if fd >= 0:
            os.close(fd)


def _whole_lines_end(fd: int, size: int) -> int:
    """Where the file's whole lines end: ``size``, or the end of the last ``\\n`` before a
    torn last line (0 when no line is whole)."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    data = os.pread(fd, size, 0)
    return data.rfind(b"\n") + 1


def _write_at(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, pos)
        if written <= 0:  # pragma: no cover - a regular file takes every byte or raises
            raise OSError(errno.EIO, "short write")
        view = view[written:]
        pos += written


def _rotate(path: Path, fd: int, entry: LedgerEntry) -> None:
    """Rewrite the ledger with ``entry`` appended and everything in half the bound."""
    raw, skipped = _tail(fd)
    entries, _ = _parse(path, raw, skipped)  # lines that are not entries are dropped
    kept = compact_entries([*entries, entry], MAX_LEDGER_BYTES // 2)
    atomic_write(path, b"".join(e.line() for e in kept))
