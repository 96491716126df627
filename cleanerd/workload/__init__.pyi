"""The front door of ``cleanerd.workload``: what other packages may use (see __init__.py)."""

from ._check import check_survivors as check_survivors
from ._generator import (
    check_target as check_target,
)
from ._generator import (
    generate as generate,
)
from ._generator import (
    partition_dirs as partition_dirs,
)
from ._generator import (
    write_partition as write_partition,
)
from ._live import LiveWriter as LiveWriter
from ._spec import (
    CLEANUP_POLICIES as CLEANUP_POLICIES,
)
from ._spec import (
    DEFAULT_START_TIMESTAMP as DEFAULT_START_TIMESTAMP,
)
from ._spec import (
    KEY_DISTRIBUTIONS as KEY_DISTRIBUTIONS,
)
from ._spec import (
    TIMESTAMP_MODES as TIMESTAMP_MODES,
)
from ._spec import (
    WorkloadError as WorkloadError,
)
from ._spec import (
    WorkloadSpec as WorkloadSpec,
)
from ._summary import (
    PartitionResult as PartitionResult,
)
from ._summary import (
    SegmentInfo as SegmentInfo,
)
from ._summary import (
    WorkloadResult as WorkloadResult,
)
from ._survivors import (
    STRATEGIES as STRATEGIES,
)
from ._survivors import (
    Survivor as Survivor,
)
from ._survivors import (
    SurvivorTracker as SurvivorTracker,
)
from ._survivors import (
    expected_survivors as expected_survivors,
)
from ._survivors import (
    header_version as header_version,
)
from ._survivors import (
    survivors_json as survivors_json,
)
from ._survivors import (
    track_batches as track_batches,
)
