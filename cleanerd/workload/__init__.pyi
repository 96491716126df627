"""The front door of ``cleanerd.workload``: what other packages may use (see __init__.py)."""

from ._check import check_survivors as check_survivors
from ._generator import (
    check_target as check_target,
    generate as generate,
    partition_dirs as partition_dirs,
)
from ._live import LiveWriter as LiveWriter
from ._pacing import Pacer as Pacer, run_paced as run_paced
from ._spec import (
    DEFAULT_START_TIMESTAMP as DEFAULT_START_TIMESTAMP,
    KEY_DISTRIBUTIONS as KEY_DISTRIBUTIONS,
    TIMESTAMP_MODES as TIMESTAMP_MODES,
    WARMUP_VERSION_HEADER as WARMUP_VERSION_HEADER,
    WorkloadError as WorkloadError,
    WorkloadSpec as WorkloadSpec,
    warmup_spec as warmup_spec,
)
from ._summary import (
    PartitionResult as PartitionResult,
    SegmentInfo as SegmentInfo,
    WorkloadResult as WorkloadResult,
)
from ._survivors import (
    STRATEGIES as STRATEGIES,
    Survivor as Survivor,
    SurvivorTracker as SurvivorTracker,
    expected_survivors as expected_survivors,
    header_version as header_version,
    survivors_json as survivors_json,
    track_batches as track_batches,
)
