"""The front door of ``cleanerd.scheduling``: what other packages may use (see __init__.py)."""

from ._deadlines import Roll as Roll
from ._failures import RetryPolicy as RetryPolicy, locate as locate
from ._grab import CleanOutcome as CleanOutcome, Grab as Grab
from ._manager import CleanerManager as CleanerManager
from ._metadata import partition_log_meta as partition_log_meta
from ._snapshots import SnapshotGrab as SnapshotGrab
from ._state import (
    CleaningState as CleaningState,
    CleaningTotals as CleaningTotals,
    PartitionStatus as PartitionStatus,
)
from ._survey import Survey as Survey
