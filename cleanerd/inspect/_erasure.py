"""``cleanerd erasure check``: is an older value of a key still anywhere in a partition dir?

What is read, per partition dir: every segment (``<offset>.log``, the active one included), the
leftovers of an interrupted swap (``.log.cleaned``, ``.log.swap``, ``.log.deleted``), every
KIP-630 snapshot in ``checkpoints/`` (checked whole first) and the leftovers of a snapshot write
or delete (``.checkpoint.part``, ``.checkpoint.deleted``), then the erasure ledger. Each file is
walked in chunks of whole batches (storage's ``iter_chunks``: lengths, CRCs, rising offsets),
each chunk's records indexed with their key hashes in one kernel call (``index_and_hash``,
decompressing within the topic's ``max.decompressed.message.bytes``); only records whose key
hash is a wanted key's reach Python, where the key is compared byte for byte. Control records
are nobody's key. Memory is a chunk's, plus at most ``MAX_LISTED`` copies per key and partition.

The newest record of a key is the one its topic's strategy keeps (KIP-280: by offset, or by
timestamp or header version with the offset breaking ties), among the segments' records that
are not in an aborted transaction (ABORT markers are followed in the segments); with none there,
among the swap leftovers'; with none there either, the newest snapshot's (log truncated below
its snapshots). Every other record of the key on disk is an older value, except the newest
one's own copies: the same offset in a leftover, or the same timestamp, value and headers in a
snapshot that ends past it. A snapshot holds each key's value as of its end offset, so its
value is older as soon as the key has a record at or past that end. Records of aborted
transactions are older values: their bytes are on disk until a cleaning removes them.

A file that cannot be read (corrupt, truncated, not a regular file) is reported with its name
and the byte position of the problem, and the others are still read: the check then cannot
say that no older value is on disk, so it fails.
"""

from __future__ import annotations

import fnmatch
import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import numpy as np

from cleanerd.compaction import compute_versions, control_types, wins
from cleanerd.format import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    I64,
    U8,
    ControlType,
    CorruptRecordError,
    index_and_hash,
    kernels as k,
    limit_decompression,
)
from cleanerd.inspect._files import segment_logs
from cleanerd.snapshot import SnapshotError, SnapshotReader
from cleanerd.storage import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LedgerEntry,
    TopicPartition,
    irregular_segment_files,
    iter_chunks,
    leftover_temp_files,
    map_readonly,
    parse_any_partition_dir_name,
    parse_base_offset,
    read_ledger,
    scan_snapshot_dir,
    snapshot_leftovers,
)
from cleanerd.topics import StrategyConfig

MAX_LISTED = 1000
"""Copies of one key in one partition kept with their details; more are only counted."""
MAX_KEY_FILE_BYTES = 64 << 20
"""A ``--key-file`` larger than this is refused."""
_LEFTOVERS = tuple(LOG_SUFFIX + s for s in (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))


class Place(StrEnum):
    """Where a copy of a key lies."""

    SEGMENT = "segment"
    LEFTOVER = "leftover"  # a .log.cleaned, .log.swap or .log.deleted file
    SNAPSHOT = "snapshot"  # a snapshot, or a .checkpoint.part or .checkpoint.deleted file


@dataclass(slots=True)
class Copy:
    """One record of a wanted key on disk. ``offset`` is the log offset (None in a snapshot,
    whose records are numbered afresh); ``snapshot_end``: the end offset a snapshot's name
    gives, its records all below it; ``digest``: of timestamp, value and headers."""

    file: Path
    place: Place
    offset: int | None
    timestamp: int
    tombstone: bool
    version: int
    has_version: bool
    digest: bytes
    snapshot_end: int | None = None
    aborted: bool = False

    def beats(self, other: Copy) -> bool:
        """The strategy's rule between two log records of the key (``compaction.wins``)."""
        assert self.offset is not None
        assert other.offset is not None
        return bool(
            wins(
                self.offset,
                self.version,
                self.has_version,
                other.offset,
                other.version,
                other.has_version,
            )
        )

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "file": str(self.file),
            "kind": self.place.value,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "tombstone": self.tombstone,
        }
        if self.snapshot_end is not None:
            doc["snapshot_end"] = self.snapshot_end
        if self.aborted:
            doc["aborted"] = True
        return doc


@dataclass(frozen=True)
class ErasureTarget:
    """One partition dir to check, with the topic's strategy and decompression bound."""

    directory: Path
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    max_decompressed_bytes: int | None = None  # None: the reader's default bound


@dataclass(frozen=True)
class KeyInPartition:
    """What one partition holds of one key."""

    partition: str
    directory: Path
    newest: Copy | None
    older: tuple[Copy, ...]  # at most MAX_LISTED
    older_count: int
    removed_by: tuple[LedgerEntry, ...]  # ledger entries whose range holds the newest record

    def to_json(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "directory": str(self.directory),
            "newest": None if self.newest is None else self.newest.to_json(),
            "older": [c.to_json() for c in self.older],
            "older_count": self.older_count,
            "removed_by_ledger": [e.to_json() for e in self.removed_by],
        }


def key_text(key: bytes) -> str | None:
    """The key as text when it is UTF-8 (what ``--key`` takes back), else None."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class KeyReport:
    """One key across the partitions checked: those holding any record of it."""

    key: bytes
    found: tuple[KeyInPartition, ...]

    @property
    def older_on_disk(self) -> bool:
        return any(f.older_count for f in self.found)

    def to_json(self) -> dict[str, object]:
        return {
            "key": key_text(self.key),
            "key_hex": self.key.hex(),
            "older_on_disk": self.older_on_disk,
            "partitions": [f.to_json() for f in self.found],
        }


@dataclass(frozen=True)
class Unreadable:
    """A file (or dir) that could not be read whole; ``message`` names it and, when known,
    the byte position of the problem."""

    file: str
    position: int | None
    message: str

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "position": self.position, "error": self.message}


@dataclass(frozen=True)
class ErasureReport:
    """The whole check: every key, what could not be read, and what was read."""

    keys: tuple[KeyReport, ...]
    unreadable: tuple[Unreadable, ...]
    ledger_problems: tuple[str, ...]
    partitions: int
    files: int
    bytes: int
    seconds: float

    @property
    def ok(self) -> bool:
        """No older value of any key on disk, and every file read."""
        return not self.unreadable and not any(r.older_on_disk for r in self.keys)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "keys": [r.to_json() for r in self.keys],
            "unreadable": [u.to_json() for u in self.unreadable],
            "ledger_problems": list(self.ledger_problems),
            "partitions_checked": self.partitions,
            "files_read": self.files,
            "bytes_read": self.bytes,
            "seconds": round(self.seconds, 3),
        }


# --- keys --------------------------------------------------------------------------------------
def parse_key(text: str) -> bytes:
    """``--key``: UTF-8 text, ``hex:<hex digits>`` for any bytes, ``text:<text>`` for a text
    key that starts with ``hex:`` or ``text:``. ValueError says what is wrong."""
    if text.startswith("hex:"):
        digits = text[4:]
        try:
            return bytes.fromhex(digits)
        except ValueError:
            raise ValueError(f"{text!r}: not hex digits after 'hex:'") from None
    try:
        return text.removeprefix("text:").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from an undecodable argument
        raise ValueError(f"{text!r}: not UTF-8 text; give the key as hex:<digits>") from None


def read_key_file(path: Path) -> list[bytes]:
    """``--key-file``: one key per line as ``--key`` takes it (``\\n`` or ``\\r\\n`` endings,
    blank lines skipped). ValueError names the file and line; OSError passes through."""
    with open(path, "rb") as f:
        raw = f.read(MAX_KEY_FILE_BYTES + 1)
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_KEY_FILE_BYTES} bytes")
    keys = []
    for number, raw_line in enumerate(raw.split(b"\n"), start=1):
        line = raw_line.removesuffix(b"\r")
        if not line:
            continue
        try:
            keys.append(parse_key(line.decode("utf-8")))
        except UnicodeDecodeError:
            raise ValueError(
                f"{path}: line {number}: not UTF-8; write the key as hex:<digits>"
            ) from None
        except ValueError as e:
            raise ValueError(f"{path}: line {number}: {e}") from None
    return keys


# --- what to read ------------------------------------------------------------------------------
def erasure_partitions(
    path: Path, topic: str | None = None, partition: int | None = None
) -> list[tuple[Path, TopicPartition | None]]:
    """The partition dirs ``path`` stands for: itself when it holds segments or is named as a
    partition dir, else its sub-dirs named as partition dirs, those Kafka is deleting, moving
    or has set aside (``-delete``, ``-future``, ``-stray``) included; filtered by ``topic``
    (a glob) and ``partition``. ValueError when there is none to check."""
    named = parse_any_partition_dir_name(path.name)
    if named is not None or segment_logs(path, skip=True) or leftover_temp_files(path):
        found = [(path, named)]
    else:
        found = sorted(
            (p, tp)
            for p in path.iterdir()
            if (tp := parse_any_partition_dir_name(p.name)) is not None and p.is_dir()
        )
        if not found:
            raise ValueError(f"{path} holds no segment and no partition dir")

    def wanted(tp: TopicPartition | None) -> bool:
        if tp is None:
            return topic is None and partition is None
        return (topic is None or fnmatch.fnmatchcase(tp.topic, topic)) and (
            partition is None or tp.partition == partition
        )

    chosen = [(p, tp) for p, tp in found if wanted(tp)]
    if not chosen:
        raise ValueError(f"no partition of {path} matches --topic/--partition")
    return chosen


# --- reading -----------------------------------------------------------------------------------
def _digest(payload: U8, rec: I64) -> bytes:
    """Timestamp, value and headers of a record: equal for a record and its snapshot copy."""
    h = hashlib.blake2b(digest_size=16)
    h.update(int(rec[k.R_TIMESTAMP]).to_bytes(8, "big", signed=True))
    vpos, vlen = int(rec[k.R_VALUE_POS]), int(rec[k.R_VALUE_LEN])
    h.update(vlen.to_bytes(8, "big", signed=True))
    if vlen > 0:
        h.update(payload[vpos : vpos + vlen].tobytes())
    end = int(rec[k.R_POS]) + int(rec[k.R_SIZE])
    h.update(int(rec[k.R_HEADER_COUNT]).to_bytes(8, "big", signed=True))
    h.update(payload[int(rec[k.R_HEADERS_POS]) : end].tobytes())
    return h.digest()


class _Wanted:
    """The keys asked for, by their 128-bit hash (the hash the index kernel computes)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self.by_hash: dict[tuple[int, int], list[bytes]] = {}
        for key in keys:
            arr = np.frombuffer(key, dtype=np.uint8) if key else np.zeros(0, dtype=np.uint8)
            h1, h2 = k.murmur3_128(arr, 0, len(key))
            self.by_hash.setdefault((int(h1), int(h2)), []).append(key)
        self.h1 = np.unique(np.array([h for h, _ in self.by_hash], dtype=np.uint64))

    def rows(self, hashes: np.ndarray, recs: I64) -> np.ndarray:
        """Rows whose first hash word is a wanted key's (the rest is checked per row)."""
        if not self.h1.size or not hashes.shape[0]:
            return np.zeros(0, dtype=np.intp)
        pos = np.searchsorted(self.h1, hashes[:, 0])
        pos[pos >= self.h1.size] = 0
        return np.flatnonzero((self.h1[pos] == hashes[:, 0]) & (recs[:, k.R_KEY_LEN] >= 0))


@dataclass
class _Found:
    """One key in one partition while it is read: the strategy's best log record per place
    (kept whatever the cap), and every other copy up to ``MAX_LISTED``."""

    best: dict[Place, Copy] = field(default_factory=dict)
    copies: list[Copy] = field(default_factory=list)
    dropped: int = 0

    def add(self, copy: Copy) -> None:
        if copy.place is not Place.SNAPSHOT:
            best = self.best.get(copy.place)
            if best is None:
                self.best[copy.place] = copy
                return
            if copy.beats(best):
                self.best[copy.place], copy = copy, best
        self._keep(copy)

    def _keep(self, copy: Copy) -> None:
        if len(self.copies) < MAX_LISTED:
            self.copies.append(copy)
        else:
            self.dropped += 1

    def result(self) -> tuple[Copy | None, list[Copy], int]:
        """(the newest record, the older values, how many older values in all)."""
        pool = [*self.best.values(), *self.copies]
        newest = None
        for place in (Place.SEGMENT, Place.LEFTOVER):
            for c in pool:
                if c.place is place and not c.aborted and (newest is None or c.beats(newest)):
                    newest = c
            if newest is not None:
                break
        if newest is None:
            snaps = [c for c in pool if c.place is Place.SNAPSHOT]
            newest = max(snaps, key=lambda c: c.snapshot_end or 0, default=None)
        older = [c for c in pool if c is not newest and not _same_record(c, newest)]
        older.sort(key=lambda c: (str(c.file), -1 if c.offset is None else c.offset))
        return newest, older[:MAX_LISTED], len(older) + self.dropped


def _same_record(c: Copy, newest: Copy | None) -> bool:
    """Whether ``c`` is a copy of the newest record rather than an older value."""
    if newest is None or c.aborted:
        return False
    if c.offset is not None:
        return newest.offset is not None and c.offset == newest.offset
    if c.digest != newest.digest:
        return False
    if newest.offset is None:
        return True
    return c.snapshot_end is not None and c.snapshot_end > newest.offset


class _Transactions:
    """Which wanted records of the segments were aborted: each transactional one waits for its
    producer's next marker; an ABORT marks it. A transaction still open at the end (or whose
    marker a cleaning removed after it committed) counts as committed."""

    def __init__(self) -> None:
        self.pending: dict[int, list[Copy]] = {}

    def feed(self, arr: U8, batches: I64, hits: list[tuple[int, Copy]], path: str) -> None:
        attrs = batches[:, k.B_ATTRIBUTES]
        pids = batches[:, k.B_PRODUCER_ID]
        txn = [(row, c) for row, c in hits if attrs[row] & ATTR_TRANSACTIONAL]
        producers = set(self.pending) | {int(pids[row]) for row, _ in txn}
        if not producers:
            return
        control = np.flatnonzero((attrs & ATTR_CONTROL) != 0)
        markers = control[np.isin(pids[control], np.array(sorted(producers), dtype=np.int64))]
        types = control_types(arr, batches, markers, path) if markers.size else {}
        events = [(row, 0, c) for row, c in txn] + [(int(r), 1, None) for r in markers]
        events.sort(key=lambda e: (e[0], e[1]))  # in log order (a batch may hold several)
        for row, is_marker, copy in events:
            pid = int(pids[row])
            if copy is not None:
                self.pending.setdefault(pid, []).append(copy)
            elif is_marker and pid in self.pending:
                waiting = self.pending.pop(pid)
                if types.get(row) is ControlType.ABORT:
                    for c in waiting:
                        c.aborted = True


@dataclass(frozen=True)
class _File:
    """A file to read: where its records lie, the offset before its first record, and for a
    snapshot its end offset and whether it is a finished one (checked whole first)."""

    path: Path
    place: Place
    prev_offset: int = -1
    snapshot_end: int | None = None
    finished: bool = False


Hit = tuple[int, bytes, Copy]
"""(row of the record's batch in the chunk, the key, the record)."""


class _Check:
    """One run of the check over the targets; see ``check_erasure``."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self.wanted = _Wanted(keys)
        self.unreadable: list[Unreadable] = []
        self.ledger_problems: list[str] = []
        self.files = 0
        self.bytes = 0

    def partition(self, target: ErasureTarget) -> dict[bytes, KeyInPartition]:
        """What the partition dir holds of each wanted key it holds at all."""
        directory = target.directory
        found: dict[bytes, _Found] = {}
        txn = _Transactions()
        for file in self._files(directory):
            try:
                if file.finished:
                    SnapshotReader(file.path).close()  # checked whole before it is trusted
                for arr, batches, hits in self._walk(file, target.strategy):
                    if file.place is Place.SEGMENT:
                        txn.feed(arr, batches, [(row, c) for row, _, c in hits], str(file.path))
                    for _, key, copy in hits:
                        found.setdefault(key, _Found()).add(copy)
            except CorruptRecordError as e:
                self.unreadable.append(Unreadable(str(file.path), e.position, str(e)))
            except SnapshotError as e:
                self.unreadable.append(Unreadable(str(file.path), None, str(e)))
            except OSError as e:  # NotRegularFileError included
                self.unreadable.append(Unreadable(str(file.path), None, _os_text(file.path, e)))
        ledger = read_ledger(directory)
        self.ledger_problems.extend(ledger.problems)
        out = {}
        for key, f in found.items():
            newest, older, count = f.result()
            removed: tuple[LedgerEntry, ...] = ()
            if newest is not None and newest.offset is not None:
                at = newest.offset
                removed = tuple(e for e in ledger.entries if e.covers(at))
            out[key] = KeyInPartition(
                directory.name, directory, newest, tuple(older), count, removed
            )
        return out

    def _files(self, directory: Path) -> list[_File]:
        """Every file to read, in that order: segments, swap leftovers, snapshots and their
        leftovers. What is named like one but is a symlink, FIFO or the like is unreadable."""
        try:
            irregular = irregular_segment_files(directory)
            segments = segment_logs(directory, skip=True)
            leftovers = [p for p in leftover_temp_files(directory) if p.name.endswith(_LEFTOVERS)]
            snapshots = scan_snapshot_dir(directory)
            partial = snapshot_leftovers(directory)
        except OSError as e:
            self.unreadable.append(Unreadable(str(directory), None, _os_text(directory, e)))
            return []
        for path, kind in [*irregular, *snapshots.impostors]:
            self.unreadable.append(Unreadable(str(path), None, f"{path}: {kind}; not read"))
        files = [_File(path, Place.SEGMENT, base - 1) for base, path in segments]
        for path in leftovers:
            base = parse_base_offset(path.name)
            files.append(_File(path, Place.LEFTOVER, -1 if base is None else base - 1))
        for sid, path in snapshots.snapshots:
            files.append(_File(path, Place.SNAPSHOT, snapshot_end=sid.end_offset, finished=True))
        for maybe, path in partial:
            end = None if maybe is None else maybe.end_offset
            files.append(_File(path, Place.SNAPSHOT, snapshot_end=end))
        return files

    def _walk(self, file: _File, strategy: StrategyConfig) -> Iterator[tuple[U8, I64, list[Hit]]]:
        """Each chunk of the file's batches with the wanted keys' records in it."""
        arr = map_readonly(file.path)
        self.files += 1
        self.bytes += int(arr.shape[0])
        where = str(file.path)
        for batches in iter_chunks(arr, path=where, prev_last_offset=file.prev_offset):
            data = np.flatnonzero(
                ((batches[:, k.B_ATTRIBUTES] & ATTR_CONTROL) == 0) & (batches[:, k.B_COUNT] > 0)
            )
            hits: list[Hit] = []
            if data.size:
                hits = self._hits(arr, batches, data, file, strategy)
            yield arr, batches, hits

    def _hits(
        self, arr: U8, batches: I64, data: np.ndarray, file: _File, strategy: StrategyConfig
    ) -> list[Hit]:
        payload, recs, hashes = index_and_hash(arr, batches[data], path=str(file.path))
        rows = self.wanted.rows(hashes, recs)
        if not rows.size:
            return []
        versions, has_version, _ = compute_versions(strategy, payload, recs[rows])
        hits: list[Hit] = []
        for j, i in enumerate(rows.tolist()):
            rec = recs[i]
            kpos, klen = int(rec[k.R_KEY_POS]), int(rec[k.R_KEY_LEN])
            key = payload[kpos : kpos + klen].tobytes()
            if key not in self.wanted.by_hash.get((int(hashes[i, 0]), int(hashes[i, 1])), ()):
                continue
            snapshot = file.place is Place.SNAPSHOT
            copy = Copy(
                file=file.path,
                place=file.place,
                offset=None if snapshot else int(rec[k.R_OFFSET]),
                timestamp=int(rec[k.R_TIMESTAMP]),
                tombstone=int(rec[k.R_VALUE_LEN]) < 0,
                version=int(versions[j]),
                has_version=bool(has_version[j]),
                digest=_digest(payload, rec),
                snapshot_end=file.snapshot_end,
            )
            hits.append((int(data[int(rec[k.R_BATCH])]), key, copy))
        return hits

    def report(
        self, keys: Sequence[bytes], results: list[dict[bytes, KeyInPartition]], seconds: float
    ) -> ErasureReport:
        reports = tuple(KeyReport(key, tuple(r[key] for r in results if key in r)) for key in keys)
        return ErasureReport(
            keys=reports,
            unreadable=tuple(self.unreadable),
            ledger_problems=tuple(self.ledger_problems),
            partitions=len(results),
            files=self.files,
            bytes=self.bytes,
            seconds=seconds,
        )


def _os_text(path: Path, e: OSError) -> str:
    text = str(e)
    return text if str(path) in text else f"{path}: {e.strerror or text}"


def check_erasure(targets: Sequence[ErasureTarget], keys: Sequence[bytes]) -> ErasureReport:
    """Read every file of every target that can hold a record and report, for each key, its
    newest record, the older values still on disk and the ledger entries of the cleanings
    that covered the newest one (see the module doc). Never raises for what a file holds."""
    started = time.monotonic()
    unique = list(dict.fromkeys(keys))
    check = _Check(unique)
    results = []
    for target in targets:
        bound = target.max_decompressed_bytes
        if bound is None:
            results.append(check.partition(target))
        else:
            with limit_decompression(bound):
                results.append(check.partition(target))
    return check.report(unique, results, time.monotonic() - started)
