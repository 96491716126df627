"""Seeded workload generation for Kafka-format logs, and the expected-survivor oracle.

Plain library code (no click, no rich) so ``cleanerd gen``, tests and benchmarks share it.
"""

from cleanerd.workload.generator import check_target, generate, partition_dirs, write_partition
from cleanerd.workload.spec import DEFAULT_START_TIMESTAMP, WorkloadError, WorkloadSpec
from cleanerd.workload.summary import PartitionResult, SegmentInfo, WorkloadResult
from cleanerd.workload.survivors import (
    STRATEGIES,
    Survivor,
    SurvivorTracker,
    expected_survivors,
    header_version,
    survivors_json,
    track_batches,
)

__all__ = [
    "DEFAULT_START_TIMESTAMP",
    "STRATEGIES",
    "PartitionResult",
    "SegmentInfo",
    "Survivor",
    "SurvivorTracker",
    "WorkloadError",
    "WorkloadResult",
    "WorkloadSpec",
    "check_target",
    "expected_survivors",
    "generate",
    "header_version",
    "partition_dirs",
    "survivors_json",
    "track_batches",
    "write_partition",
]
