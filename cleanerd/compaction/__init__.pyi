"""The front door of ``cleanerd.compaction``: what other packages may use (see __init__.py)."""

from ._batches import index_and_hash as index_and_hash
from ._batches import transaction_verdicts as transaction_verdicts
from ._bounds import Bound as Bound
from ._bounds import as_rolled as as_rolled
from ._cleaned._group_writer import write_group as write_group
from ._cleaner import (
    Cleaner as Cleaner,
)
from ._cleaner import (
    CleaningAbortedError as CleaningAbortedError,
)
from ._cleaner import (
    CleanResult as CleanResult,
)
from ._cleaner import (
    trust_txn_indexes as trust_txn_indexes,
)
from ._cleaning_plan import (
    CleaningPlan as CleaningPlan,
)
from ._cleaning_plan import (
    LogMeta as LogMeta,
)
from ._cleaning_plan import (
    SegmentMeta as SegmentMeta,
)
from ._cleaning_plan import (
    cleaner_checkpoint as cleaner_checkpoint,
)
from ._cleaning_plan import (
    plan as plan,
)
from ._cleaning_plan import (
    rank as rank,
)
from ._cleaning_plan import (
    segments_between as segments_between,
)
from ._compile_clock import compile_clock as compile_clock
from ._engine import clean_once as clean_once
from ._engine import open_log as open_log
from ._engine import plan_log as plan_log
from ._external import (
    TxnState as TxnState,
)
from ._external import (
    last_records as last_records,
)
from ._external import (
    pass_context as pass_context,
)
from ._external import (
    pass_groups as pass_groups,
)
from ._external import (
    restore_state as restore_state,
)
from ._external import (
    swap_group as swap_group,
)
from ._external import (
    tombstone_floor as tombstone_floor,
)
from ._external import (
    transaction_states as transaction_states,
)
from ._external import (
    winner_map as winner_map,
)
from ._offset_map._map import (
    DEFAULT_LOAD_FACTOR as DEFAULT_LOAD_FACTOR,
)
from ._offset_map._map import (
    OffsetMap as OffsetMap,
)
from ._offset_map._map import (
    slot_bytes as slot_bytes,
)
from ._one_shot import (
    DEFAULT_DEDUPE_BUFFER_BYTES as DEFAULT_DEDUPE_BUFFER_BYTES,
)
from ._one_shot import (
    CompactionError as CompactionError,
)
from ._one_shot import (
    compact_directory as compact_directory,
)
from ._one_shot import (
    compact_partition as compact_partition,
)
from ._segment_walk import (
    SegmentWalk as SegmentWalk,
)
from ._segment_walk import (
    settled as settled,
)
from ._segment_walk import (
    walk_segment as walk_segment,
)
from ._stats import CleanerStats as CleanerStats
from ._strategy import compute_versions as compute_versions
from ._summary import (
    CompactionProgress as CompactionProgress,
)
from ._summary import (
    CompactionSummary as CompactionSummary,
)
from ._summary import (
    Progress as Progress,
)
from ._throttle import Throttler as Throttler
from ._transactions import (
    CleanedTransactionMetadata as CleanedTransactionMetadata,
)
from ._transactions import (
    LastRecord as LastRecord,
)
