"""What a one-shot compaction reports: progress while it runs, the census of a log before and
after, and the summary of one partition (the CLI's table and JSON lines)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cleanerd.format import kernels as k
from cleanerd.storage import PartitionLog, iter_chunks


@dataclass(frozen=True)
class CompactionProgress:
    """Reported before every chunk of every pass: what is running, and the bytes moved so far."""

    partition: str
    phase: str  # "clean" while dirty ranges are left, then "sweep"
    passes: int  # passes finished before this one
    io_bytes: int  # bytes read and written by all passes so far


Progress = Callable[[CompactionProgress], None]


@dataclass(frozen=True)
class LogCensus:
    """Record, byte and batch counts of a whole log, with a fingerprint of its batch headers."""

    records: int  # every record, control records included
    bytes: int
    batches: int
    fingerprint: str  # changes when any batch is added, removed or rewritten (its CRC changes)


def census(log: PartitionLog) -> LogCensus:
    """Walk every batch header (no CRC check, no decompression): cheap enough to run per pass."""
    records = size = batches = 0
    digest = hashlib.blake2b(digest_size=16)
    for seg in list(log.segments):
        size += seg.size
        arr, path = seg.view(keep=False), str(seg.log_path)
        # a chunk at a time (all of a segment's batch rows may take more than the file), up to
        # the first problem; the digest is the same however the rows are cut
        walk = iter_chunks(
            arr, path=path, prev_last_offset=seg.base_offset - 1, check_crc=False, strict=False
        )
        for b in walk:
            records += int(b[:, k.B_COUNT].sum())
            batches += int(b.shape[0])
            digest.update(b[:, [k.B_BASE_OFFSET, k.B_CRC, k.B_SIZE]].tobytes())
    return LogCensus(records, size, batches, digest.hexdigest())


@dataclass(frozen=True)
class CompactionSummary:
    """What one one-shot compaction did to one partition (what it would do, for a dry run)."""

    partition: str
    directory: str
    dry_run: bool
    strategy: str
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    batches_in: int
    batches_out: int
    passes: int  # every Cleaner.clean run, sweeps included
    sweeps: int
    seconds: float  # wall time of the cleaning, numba's compilation excluded (compile_seconds)
    tombstones_removed: int  # expired + superseded
    markers_removed: int
    aborted_records_removed: int
    unkeyed_records_removed: int
    anomalous_version_headers: int
    first_offset: int  # log start offset
    last_offset: int  # log end offset - 1
    first_uncleanable_offset: int  # the cleanable end: nothing at or after it was touched
    checkpoint: int | None  # cleaner-offset-checkpoint entry at the end
    io_bytes: int  # bytes read and written by all passes
    buffer_utilization: float  # highest offset map fill of any pass
    rolled_active: bool = False  # the active segment was rolled first (roll_active)
    bound: str | None = None  # nothing cleanable: the bound that said so (``Bound`` value)
    note: str | None = None  # nothing cleanable: why, in words
    txn_index_problems: tuple[str, ...] = ()  # .txnindex files rebuilt from the markers, and why
    checkpoint_reset: str | None = None  # a cleaner checkpoint outside the log, reset (Kafka's)
    tombstones_expired: int | None = None  # past their delete horizon (delete.retention.ms)
    tombstones_superseded: int | None = None  # a newer record of their key won
    compile_seconds: float = 0.0  # numba compiling kernels on their first call (not cleaning)
    kernels_compiled: int = 0  # 0 once the kernel cache is warm (``cleanerd warmup``)
    ledger_error: str | None = None  # the erasure ledger entry could not be written: why

    @property
    def records_removed(self) -> int:
        return self.records_in - self.records_out

    @property
    def bytes_per_s(self) -> float:
        """Input size over cleaning time: how fast the partition as a whole was compacted."""
        return self.bytes_in / self.seconds if self.seconds > 0 else 0.0

    def without_compile_time(self, compile_seconds: float, kernels: int) -> CompactionSummary:
        """The same run with numba's compilation, measured around it, taken out of ``seconds``:
        a cold kernel cache costs tens of seconds once, which is not cleaning time."""
        return dataclasses.replace(
            self,
            seconds=max(0.0, self.seconds - compile_seconds),
            compile_seconds=compile_seconds,
            kernels_compiled=kernels,
        )

    def to_json(self) -> dict[str, Any]:
        """Flat JSON-ready fields (the dataclass fields plus the derived ones)."""
        out = dataclasses.asdict(self)
        out["seconds"] = round(self.seconds, 3)
        out["bytes_per_s"] = round(self.bytes_per_s)
        out["compile_seconds"] = round(self.compile_seconds, 3)
        out["records_removed"] = self.records_removed
        out["buffer_utilization"] = round(self.buffer_utilization, 6)
        return out
