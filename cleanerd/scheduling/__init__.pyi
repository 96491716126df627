"""The front door of ``cleanerd.scheduling``: what other packages may use (see __init__.py)."""

from ._failures import RetryPolicy as RetryPolicy
from ._failures import locate as locate
from ._grab import CleanOutcome as CleanOutcome
from ._grab import Grab as Grab
from ._manager import CleanerManager as CleanerManager
from ._metadata import partition_log_meta as partition_log_meta
from ._snapshots import SnapshotGrab as SnapshotGrab
from ._state import (
    CleaningState as CleaningState,
)
from ._state import (
    CleaningTotals as CleaningTotals,
)
from ._state import (
    PartitionStatus as PartitionStatus,
)
from ._survey import Survey as Survey
