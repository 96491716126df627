"""The live writer's model of a compacted partition, its JSON file, and the check against it.

Compaction may remove any record except each key's latest, so the exact statement about a log,
compacted or not, fully or partly, is: for every key the *last* record in the log is the latest
write (a tombstone's key may also be gone, once ``delete.retention.ms`` has passed). The optional
stricter check says what a clean must have achieved: below the cleaner checkpoint every key holds
at most one record (the offset strategy, no transactions: what the live writer produces).

Open the partition only while it is quiescent (writer stopped; daemon stopped or idle): opening a
``PartitionLog`` finishes or rolls back leftover swap files, which would race a running clean.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    PartitionLog,
    TopicPartition,
    read_offset_checkpoint,
)

MAX_PROBLEMS = 20
"""Problems listed in full; the rest are counted in one last line (a broken log has thousands)."""

MODEL_VERSION = 1
"""Version of the model file (``--expected-out``)."""


@dataclass(frozen=True)
class PartitionModel:
    """What a fully compacted partition must hold after everything written so far."""

    expected: dict[bytes, bytes]  # live keys -> latest value
    tombstoned: frozenset[bytes]  # keys whose latest write is a tombstone
    offsets: dict[bytes, int]  # every key -> offset of its latest write
    records: int  # records appended to this partition
    log_end_offset: int  # the offset after this writer's last append

    def to_json(self) -> dict[str, object]:
        """Keys and values as latin-1 text: one code point per byte, so any bytes round-trip."""
        return {
            "expected": {_text(k): _text(v) for k, v in sorted(self.expected.items())},
            "tombstoned": sorted(_text(k) for k in self.tombstoned),
            "offsets": {_text(k): o for k, o in sorted(self.offsets.items())},
            "records": self.records,
            "log_end_offset": self.log_end_offset,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PartitionModel:
        """The inverse of :meth:`to_json`."""
        return cls(
            expected={_raw(k): _raw(v) for k, v in doc["expected"].items()},
            tombstoned=frozenset(_raw(k) for k in doc["tombstoned"]),
            offsets={_raw(k): int(o) for k, o in doc["offsets"].items()},
            records=int(doc["records"]),
            log_end_offset=int(doc["log_end_offset"]),
        )


def _text(raw: bytes) -> str:
    return raw.decode("latin-1")


def _raw(text: str) -> bytes:
    return text.encode("latin-1")


def load_model(path: Path) -> dict[TopicPartition, PartitionModel]:
    """Read a model written by :meth:`LiveWriter.write_model` (``--expected-out``)."""
    doc = json.loads(Path(path).read_text())
    if doc.get("version") != MODEL_VERSION:
        raise ValueError(f"{path}: not a live writer model (version {doc.get('version')!r})")
    out: dict[TopicPartition, PartitionModel] = {}
    for name, entry in doc["partitions"].items():
        topic, _, partition = name.rpartition("-")
        out[TopicPartition(topic, int(partition))] = PartitionModel.from_json(entry)
    return out


class SurvivorCheck(NamedTuple):
    """The outcome; unpacks as ``ok, problems, records, distinct_keys``."""

    ok: bool
    problems: list[str]
    records: int  # data records in the log from its start offset
    distinct_keys: int  # keys with at least one record in the log


def check_survivors(
    log_dir: Path,
    tp: TopicPartition | tuple[str, int],
    expected: Mapping[bytes, bytes],
    tombstoned: Collection[bytes],
    *,
    unique_below_checkpoint: bool = False,
) -> SurvivorCheck:
    """Compare the last record of every key in ``tp`` with ``expected`` and ``tombstoned``.

    Problems: a live key missing or ending on another value or a tombstone; a tombstoned key
    ending on a value; a key the model does not know. With ``unique_below_checkpoint``, also a
    key with more than one record below the log dir's ``cleaner-offset-checkpoint`` entry.
    """
    tp = TopicPartition(*tp)
    log = PartitionLog(Path(log_dir) / tp.dir_name)
    last: dict[bytes, bytes | None] = {}
    seen: Counter[bytes] = Counter()
    records = 0
    bound = _checkpoint(Path(log_dir), tp) if unique_below_checkpoint else None
    try:
        for r in log.records():
            records += 1
            if r.key is None:
                continue
            last[r.key] = r.value
            if bound is not None and r.offset < bound:
                seen[r.key] += 1
    finally:
        log.close()
    problems = _compare(last, expected, frozenset(tombstoned))
    problems += [
        f"key {_show(k)}: {n} records below the cleaner checkpoint {bound}"
        for k, n in sorted(seen.items())
        if n > 1
    ]
    if len(problems) > MAX_PROBLEMS:
        extra = len(problems) - MAX_PROBLEMS
        problems = [*problems[:MAX_PROBLEMS], f"... and {extra} more problems"]
    return SurvivorCheck(not problems, problems, records, len(last))


def check_model(
    log_dir: Path,
    models: Mapping[TopicPartition, PartitionModel],
    *,
    unique_below_checkpoint: bool = False,
) -> dict[TopicPartition, SurvivorCheck]:
    """:func:`check_survivors` for every partition of a model (e.g. from :func:`load_model`)."""
    return {
        tp: check_survivors(
            log_dir,
            tp,
            model.expected,
            model.tombstoned,
            unique_below_checkpoint=unique_below_checkpoint,
        )
        for tp, model in models.items()
    }


def _checkpoint(log_dir: Path, tp: TopicPartition) -> int:
    path = log_dir / CLEANER_OFFSET_CHECKPOINT
    return read_offset_checkpoint(path).get(tp, 0) if path.exists() else 0


def _compare(
    last: Mapping[bytes, bytes | None],
    expected: Mapping[bytes, bytes],
    tombstoned: frozenset[bytes],
) -> list[str]:
    problems = []
    for key in sorted(set(expected) | set(tombstoned) | set(last)):
        found = last.get(key)  # None: a tombstone, or no record at all
        if key in expected:
            want = expected[key]
            if key not in last:
                problems.append(f"key {_show(key)}: missing, expected {_show(want)}")
            elif found is None:
                problems.append(f"key {_show(key)}: last record is a tombstone, expected value")
            elif found != want:
                problems.append(f"key {_show(key)}: last value {_show(found)} != {_show(want)}")
        elif key in tombstoned:
            if found is not None:
                problems.append(f"key {_show(key)}: deleted, but last value is {_show(found)}")
        else:
            problems.append(f"key {_show(key)}: not written by the model's writer")
    return problems


def _show(raw: bytes, limit: int = 40) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit] + "...")
