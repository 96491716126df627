"""What a generator run wrote, as plain data and as the JSON documents the CLI prints or saves.

The per-partition ``expected`` document uses the field names of the Kafka fixtures'
``expected.json`` (``keys``, ``expected_survivors_drop_tombstones``, ...) so one test helper reads
both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cleanerd.workload._pacing import Ending
from cleanerd.workload._spec import WorkloadSpec
from cleanerd.workload._survivors import Survivor, survivors_json

GENERATOR = "cleanerd gen"
EXPECTED_NOTE = (
    "per key: latest record among non-aborted data records (offset strategy); records of "
    "transactions left open are not included. tombstone=true means the key is expected to "
    "disappear once tombstones are removed."
)


@dataclass(frozen=True)
class SegmentInfo:
    """One ``.log`` file after the run (counts from its batch headers, markers included)."""

    file: str
    base_offset: int
    last_offset: int
    bytes: int
    batches: int
    records: int

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "base_offset": self.base_offset,
            "last_offset": self.last_offset,
            "bytes": self.bytes,
            "batches": self.batches,
            "records": self.records,
        }


@dataclass
class PartitionResult:
    """Counts of what this run appended to one partition, plus the log's shape afterwards."""

    partition: int
    directory: str
    records: int = 0  # data records written by this run (aborted ones included)
    batches: int = 0  # data batches written by this run
    tombstones: int = 0
    distinct_keys: int = 0
    commits: int = 0
    aborts: int = 0
    aborted_records: int = 0
    open_transactions: int = 0
    first_offset: int = 0  # of the whole log (log start offset)
    last_offset: int = -1  # of the whole log (markers included); -1 when empty
    segments: list[SegmentInfo] = field(default_factory=list)
    expected: dict[bytes, Survivor] = field(default_factory=dict)
    appended_to_existing: bool = False
    elapsed_s: float = 0.0

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.segments)

    @property
    def survivors(self) -> int:
        """Keys left once tombstones are removed (offset strategy)."""
        return sum(1 for s in self.expected.values() if not s.tombstone)

    def to_json(self) -> dict[str, object]:
        """The summary entry of this partition (``cleanerd gen --format json``)."""
        return {
            "partition": self.partition,
            "directory": self.directory,
            "records": self.records,
            "batches": self.batches,
            "segments": len(self.segments),
            "bytes": self.bytes,
            "distinct_keys": self.distinct_keys,
            "tombstones": self.tombstones,
            "commits": self.commits,
            "aborts": self.aborts,
            "aborted_records": self.aborted_records,
            "open_transactions": self.open_transactions,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "appended_to_existing": self.appended_to_existing,
            "expected": {
                "strategy": "offset",
                "keys_seen": len(self.expected),
                "expected_survivors_drop_tombstones": self.survivors,
                "keys": survivors_json(self.expected),
            },
        }

    def expected_json(self) -> dict[str, object]:
        """This partition in the layout of a Kafka fixture's ``expected.json``."""
        return {
            "directory": self.directory,
            "segments": [s.to_json() for s in self.segments],
            "next_offset": self.last_offset + 1,
            "total_bytes": self.bytes,
            "data_records": self.records,
            "data_batches": self.batches,
            "tombstones": self.tombstones,
            "control_markers": self.commits + self.aborts,
            "commits": self.commits,
            "aborts": self.aborts,
            "aborted_records": self.aborted_records,
            "keys_seen": len(self.expected),
            "expected_survivors_drop_tombstones": self.survivors,
            "expected_note": EXPECTED_NOTE,
            "keys": survivors_json(self.expected),
        }


@dataclass
class WorkloadResult:
    """Everything one ``generate`` call wrote."""

    logdir: str
    spec: WorkloadSpec
    partitions: list[PartitionResult]
    elapsed_s: float
    ended: Ending = "done"  # "stopped": by a signal; "deadline": --duration passed
    beside: bool = False  # written beside a running daemon (its .lock left to it)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def batches(self) -> int:
        return sum(p.batches for p in self.partitions)

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary_json(self) -> dict[str, object]:
        """The one JSON document ``cleanerd gen --format json`` prints."""
        return {
            "generator": GENERATOR,
            "logdir": self.logdir,
            "topic": self.spec.topic,
            "params": self.spec.params(),
            "records": self.records,
            "batches": self.batches,
            "ended": self.ended,
            "beside_daemon": self.beside,
            "elapsed_s": round(self.elapsed_s, 3),
            "records_per_s": round(self.records_per_s),
            "partitions": [p.to_json() for p in self.partitions],
        }

    def expected_json(self) -> dict[str, object]:
        """The ``--expected`` file: no timings, so equal seeds give equal files."""
        return {
            "generator": GENERATOR,
            "topic": self.spec.topic,
            "params": self.spec.params(),
            "strategy": "offset",
            "partitions": {str(p.partition): p.expected_json() for p in self.partitions},
        }
