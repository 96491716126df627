"""Reference model of compaction: which records survive cleaning a log to completion.

Plain dicts, log order, no hashing, no batches, so that it is obviously right (docs/kafka-format.md
§4.8 to §4.10 and §5 for the rules). The engine tests compare the records left in a cleaned log
with it.

* Only committed or non-transactional data records with a key compete; records of aborted
  transactions never survive and never replace another record. Markers are not data.
* Per key, one winner across the whole log:
  ``offset`` - the highest offset;
  ``timestamp`` - the highest record timestamp, ties to the higher offset;
  ``header`` - the highest version (a header holding exactly 8 bytes); a record with a version
  beats one without; equal versions or neither: the higher offset.
* A winner that is a tombstone stays while its delete horizon has not passed, and goes in a
  cleaning after it has: the tests pass ``expired_below``, the offset below which every
  tombstone's horizon passed before the last cleaning covered it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelRecord:
    offset: int
    key: bytes | None
    value: bytes | None  # None: a tombstone
    timestamp: int
    version: int | None = None  # header strategy: the 8-byte version header, None when missing
    aborted: bool = False  # belongs to an aborted transaction


def beats(strategy: str, new: ModelRecord, old: ModelRecord) -> bool:
    """Whether ``new`` replaces ``old`` as its key's winner."""
    if strategy == "timestamp" and new.timestamp != old.timestamp:
        return new.timestamp > old.timestamp
    if strategy == "header":
        if (new.version is None) != (old.version is None):
            return new.version is not None
        if new.version is not None and old.version is not None and new.version != old.version:
            return new.version > old.version
    return new.offset > old.offset


def winners(records: list[ModelRecord], strategy: str) -> dict[bytes, ModelRecord]:
    """Each key's best record among the records that compete."""
    best: dict[bytes, ModelRecord] = {}
    for r in records:
        if r.aborted or r.key is None:
            continue
        if r.key not in best or beats(strategy, r, best[r.key]):
            best[r.key] = r
    return best


def survivors(
    records: list[ModelRecord], strategy: str, expired_below: int = 0
) -> dict[int, ModelRecord]:
    """offset -> record of what a completed cleaning leaves; see the module doc."""
    return {
        r.offset: r
        for r in winners(records, strategy).values()
        if r.value is not None or r.offset >= expired_below
    }
