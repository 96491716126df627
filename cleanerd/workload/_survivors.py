"""The oracle for compaction tests: which record of each key a full clean must keep.

Kept deliberately simple (dicts, log order, no hashing) so it is obviously right; tests of the
compaction engine compare the engine's output with :func:`expected_survivors` on any log, and
``cleanerd gen`` feeds a :class:`SurvivorTracker` while it writes so it need not read back.

Rules (docs/kafka-format.md §4.8 to §4.10 and §5):

* only data records with a key count; records of aborted transactions never survive;
* records of transactions still open at the end are left out: they lie beyond the last stable
  offset, which no cleaning pass crosses, so no survivor can be predicted for them yet;
* ``offset`` keeps the highest offset per key; ``timestamp`` the highest record timestamp
  (ties: highest offset); ``header`` the highest 8-byte big-endian value of the named header
  (a record with the header beats one without; ties and neither: highest offset);
* a survivor that is a tombstone disappears once tombstones are removed (``delete.retention.ms``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cleanerd.format import ControlType, Header, RecordBatch

STRATEGIES = ("offset", "timestamp", "header")
VERSION = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class Survivor:
    """The record of a key that compaction keeps."""

    offset: int
    timestamp: int
    tombstone: bool
    version: int | None = None  # the version header's value, when the record has one

    def to_json(self) -> dict[str, object]:
        """Same fields as the Kafka fixtures' ``expected.json`` (plus ``version`` if known)."""
        out: dict[str, object] = {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "tombstone": self.tombstone,
        }
        if self.version is not None:
            out["version"] = self.version
        return out


def header_version(headers: Sequence[Header], name: str | None) -> int | None:
    """The KIP-280 version: the last header called ``name`` holding exactly 8 bytes."""
    if name is None:
        return None
    for hkey, hvalue in reversed(headers):
        if hkey == name:
            return VERSION.unpack(hvalue)[0] if hvalue is not None and len(hvalue) == 8 else None
    return None


Row = tuple[int, int, bool, int | None]
"""A survivor candidate as (offset, timestamp, tombstone, version): cheap to make per record."""


def _beats(strategy: str) -> Callable[[Row, Row], bool]:
    """``beats(new, old)``: whether ``new`` replaces ``old`` under the strategy."""
    if strategy == "offset":
        return lambda new, old: new[0] > old[0]
    if strategy == "timestamp":
        return lambda new, old: (new[1], new[0]) > (old[1], old[0])
    if strategy == "header":

        def by_header(new: Row, old: Row) -> bool:
            nv, ov = new[3], old[3]
            if (nv is None) != (ov is None):
                return nv is not None
            if nv is not None and ov is not None and nv != ov:
                return nv > ov
            return new[0] > old[0]

        return by_header
    raise ValueError(f"unknown compaction strategy {strategy!r}; expected one of {STRATEGIES}")


class SurvivorTracker:
    """Folds data records and transaction markers, in log order, into per-key survivors."""

    def __init__(self, strategy: str = "offset") -> None:
        self.strategy = strategy
        self._beats = _beats(strategy)
        self._rows: dict[bytes, Row] = {}
        self._open: dict[int, list[tuple[bytes, Row]]] = {}
        self._next_offset = 0  # above every offset put so far
        self.aborted_records = 0
        self.committed_records = 0
        self.keyless_records = 0

    def _put(self, key: bytes, row: Row) -> None:
        old = self._rows.get(key)
        if old is None or self._beats(row, old):
            self._rows[key] = row
        self._next_offset = max(self._next_offset, row[0] + 1)

    def add(
        self, key: bytes | None, record: Survivor, *, producer_id: int = -1, txn: bool = False
    ) -> None:
        """One data record; ``txn`` records wait for their producer's marker."""
        row = (record.offset, record.timestamp, record.tombstone, record.version)
        if key is None:
            self.keyless_records += 1
        elif txn:
            self._open.setdefault(producer_id, []).append((key, row))
        else:
            self._put(key, row)

    def add_run(
        self,
        keys: Sequence[bytes],
        first_offset: int,
        timestamps: Sequence[int],
        tombstones: Sequence[bool],
        versions: Sequence[int | None] | None = None,
        *,
        producer_id: int = -1,
        txn: bool = False,
    ) -> None:
        """Records at consecutive offsets from ``first_offset`` (one appended batch)."""
        n = len(keys)
        vers: Sequence[int | None] = versions if versions is not None else [None] * n
        rows = zip(range(first_offset, first_offset + n), timestamps, tombstones, vers, strict=True)
        if txn:
            self._open.setdefault(producer_id, []).extend(zip(keys, rows, strict=True))
        elif self.strategy == "offset" and first_offset >= self._next_offset:
            # Appended past everything seen: under the offset strategy the newest always wins.
            self._rows.update(zip(keys, rows, strict=True))
            self._next_offset = first_offset + n
        else:
            for key, row in zip(keys, rows, strict=True):
                self._put(key, row)

    def end_transaction(self, producer_id: int, *, commit: bool) -> int:
        """A COMMIT or ABORT marker; returns how many records the transaction held."""
        pending = self._open.pop(producer_id, [])
        if commit:
            self.committed_records += len(pending)
            for key, row in pending:
                self._put(key, row)
        else:
            self.aborted_records += len(pending)
        return len(pending)

    @property
    def open_records(self) -> int:
        """Records of transactions not (yet) ended by a marker."""
        return sum(len(v) for v in self._open.values())

    @property
    def open_producers(self) -> list[int]:
        return sorted(pid for pid, pending in self._open.items() if pending)

    def survivors(self) -> dict[bytes, Survivor]:
        """Per key (sorted) the record a full clean keeps."""
        return {key: Survivor(*row) for key, row in sorted(self._rows.items())}


def track_batches(
    batches: Iterable[RecordBatch],
    *,
    strategy: str = "offset",
    version_header: str | None = None,
) -> SurvivorTracker:
    """A tracker fed with every batch of a log (decoding records: the slow, obvious path)."""
    tracker = SurvivorTracker(strategy)
    for batch in batches:
        h = batch.header
        if h.is_control:
            kind = batch.control_type()
            if kind in (ControlType.COMMIT, ControlType.ABORT) and h.is_transactional:
                tracker.end_transaction(h.producer_id, commit=kind == ControlType.COMMIT)
            continue
        txn = h.is_transactional
        for r in batch.records():
            version = header_version(r.headers, version_header)
            record = Survivor(r.offset, r.timestamp, r.value is None, version)
            tracker.add(r.key, record, producer_id=h.producer_id, txn=txn)
    return tracker


def expected_survivors(
    batches: Iterable[RecordBatch],
    *,
    strategy: str = "offset",
    version_header: str | None = None,
) -> dict[bytes, Survivor]:
    """Per key, the record a full clean keeps (e.g. ``expected_survivors(log.read())``)."""
    return track_batches(batches, strategy=strategy, version_header=version_header).survivors()


def survivors_json(survivors: dict[bytes, Survivor]) -> dict[str, dict[str, object]]:
    """The fixtures' ``keys`` object: key (UTF-8, undecodable bytes escaped) -> survivor."""
    return {
        key.decode("utf-8", "backslashreplace"): s.to_json() for key, s in sorted(survivors.items())
    }
