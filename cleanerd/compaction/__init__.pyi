"""The front door of ``cleanerd.compaction``: what other packages may use (see __init__.py)."""

from ._batches import (
    control_types as control_types,
    index_and_hash as index_and_hash,
    transaction_verdicts as transaction_verdicts,
)
from ._bounds import Bound as Bound, as_rolled as as_rolled
from ._cleaned._group_writer import write_group as write_group
from ._cleaned._writer import CleanedOutput as CleanedOutput, max_segment_bytes as max_segment_bytes
from ._cleaner import (
    Cleaner as Cleaner,
    CleaningAbortedError as CleaningAbortedError,
    CleanResult as CleanResult,
    trust_txn_indexes as trust_txn_indexes,
)
from ._cleaning_plan import (
    CleaningPlan as CleaningPlan,
    LogMeta as LogMeta,
    SegmentMeta as SegmentMeta,
    cleaner_checkpoint as cleaner_checkpoint,
    compaction_deadline_ms as compaction_deadline_ms,
    deadline_after as deadline_after,
    plan as plan,
    rank as rank,
    rank_key as rank_key,
    segment_written_ms as segment_written_ms,
    segments_between as segments_between,
)
from ._compile_clock import compile_clock as compile_clock
from ._decompression_pool import (
    decompression_pool as decompression_pool,
    decompression_threads as decompression_threads,
    usable_cores as usable_cores,
)
from ._engine import clean_once as clean_once, open_log as open_log, plan_log as plan_log
from ._external import (
    TxnState as TxnState,
    last_records as last_records,
    pass_context as pass_context,
    pass_groups as pass_groups,
    restore_state as restore_state,
    swap_group as swap_group,
    tombstone_floor as tombstone_floor,
    transaction_states as transaction_states,
    winner_map as winner_map,
)
from ._filter import legacy_delete_horizon as legacy_delete_horizon
from ._ledger import (
    ENGINE_LOCAL as ENGINE_LOCAL,
    ENGINE_SPARK as ENGINE_SPARK,
)
from ._offset_map._map import (
    DEFAULT_LOAD_FACTOR as DEFAULT_LOAD_FACTOR,
    OffsetMap as OffsetMap,
    slot_bytes as slot_bytes,
)
from ._one_shot import (
    DEFAULT_DEDUPE_BUFFER_BYTES as DEFAULT_DEDUPE_BUFFER_BYTES,
    CompactionError as CompactionError,
    compact_directory as compact_directory,
    compact_partition as compact_partition,
)
from ._segment_walk import (
    SegmentWalk as SegmentWalk,
    producer_scans as producer_scans,
    settled as settled,
    summarise_cleaned as summarise_cleaned,
    walk_segment as walk_segment,
)
from ._stats import CleanerStats as CleanerStats
from ._strategy import compute_versions as compute_versions, wins as wins
from ._summary import (
    CompactionProgress as CompactionProgress,
    CompactionSummary as CompactionSummary,
    Progress as Progress,
)
from ._throttle import Throttler as Throttler
from ._transactions import (
    CleanedTransactionMetadata as CleanedTransactionMetadata,
    LastRecord as LastRecord,
)
