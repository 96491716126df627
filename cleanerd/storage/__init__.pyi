"""The front door of ``cleanerd.storage``: what other packages may use (see __init__.py)."""

from ._aborted import collect_aborted as collect_aborted
from ._checkpoints import (
    CLEANER_OFFSET_CHECKPOINT as CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT as LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT as LOG_START_OFFSET_CHECKPOINT,
    OFFSET_CHECKPOINTS as OFFSET_CHECKPOINTS,
    PARTITION_METADATA as PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT as RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT as REPLICATION_OFFSET_CHECKPOINT,
    TMP_SUFFIX as TMP_SUFFIX,
    checkpointed_offset as checkpointed_offset,
    fsync_dir as fsync_dir,
    read_any_checkpoint as read_any_checkpoint,
    read_offset_checkpoint as read_offset_checkpoint,
    update_offset_checkpoint as update_offset_checkpoint,
    write_offset_checkpoint as write_offset_checkpoint,
)
from ._chunks import (
    CHUNK_BYTES as CHUNK_BYTES,
    CHUNK_RECORDS as CHUNK_RECORDS,
    batch_runs as batch_runs,
    chunk_bytes as chunk_bytes,
    chunk_records as chunk_records,
    compressed_sizes as compressed_sizes,
    iter_chunks as iter_chunks,
    pages_are_kept as pages_are_kept,
    pages_kept as pages_kept,
    release as release,
    uncompressed_chunk_bytes as uncompressed_chunk_bytes,
)
from ._erasure_ledger import (
    LEDGER_FILE as LEDGER_FILE,
    MAX_LEDGER_BYTES as MAX_LEDGER_BYTES,
    Ledger as Ledger,
    LedgerEntry as LedgerEntry,
    append_ledger_entry as append_ledger_entry,
    iso_ms as iso_ms,
    new_ledger_entry as new_ledger_entry,
    read_ledger as read_ledger,
)
from ._errors import (
    CorruptIndexError as CorruptIndexError,
    LogDirLockedError as LogDirLockedError,
    StorageError as StorageError,
)
from ._files import (
    CLEANED_SUFFIX as CLEANED_SUFFIX,
    DELETED_SUFFIX as DELETED_SUFFIX,
    INDEX_SUFFIX as INDEX_SUFFIX,
    LOG_SUFFIX as LOG_SUFFIX,
    SEGMENT_SUFFIXES as SEGMENT_SUFFIXES,
    SNAPSHOT_SUFFIX as SNAPSHOT_SUFFIX,
    SWAP_SUFFIX as SWAP_SUFFIX,
    TIME_INDEX_SUFFIX as TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX as TXN_INDEX_SUFFIX,
    offset_from_name as offset_from_name,
    parse_base_offset as parse_base_offset,
    segment_file as segment_file,
)
from ._header_summary import (
    HeaderSummary as HeaderSummary,
    summarise_headers as summarise_headers,
)
from ._index import OffsetIndex as OffsetIndex, TimeIndex as TimeIndex
from ._kept_maps import MAPS as MAPS
from ._log_view import ReadOnlyLog as ReadOnlyLog
from ._logdir import (
    LOCK_FILE as LOCK_FILE,
    WRITERS_LOCK_FILE as WRITERS_LOCK_FILE,
    Holding as Holding,
    LogDir as LogDir,
    LogDirHolder as LogDirHolder,
    parse_any_partition_dir_name as parse_any_partition_dir_name,
    parse_partition_dir_name as parse_partition_dir_name,
)
from ._partition import PartitionLog as PartitionLog, wall_clock_ms as wall_clock_ms
from ._pauses import (
    PAUSES_FILE as PAUSES_FILE,
    PauseFileError as PauseFileError,
    read_pauses as read_pauses,
    write_pauses as write_pauses,
)
from ._producer_snapshot import read_snapshot as read_snapshot
from ._producer_state import (
    ProducerEntry as ProducerEntry,
    ProducerState as ProducerState,
    scan_producer_state as scan_producer_state,
)
from ._regular import (
    file_kind as file_kind,
    irregular_segment_files as irregular_segment_files,
    map_readonly as map_readonly,
    map_regular as map_regular,
    open_regular as open_regular,
    read_regular as read_regular,
    segment_log_stats as segment_log_stats,
    segment_logs as segment_logs,
    view_regular as view_regular,
    why_refused as why_refused,
)
from ._repairs import Repairs as Repairs
from ._retention import (
    delete_old_segments as delete_old_segments,
    delete_segments_below as delete_segments_below,
)
from ._segment import LogSegment as LogSegment
from ._segment_list import offsets_overlap as offsets_overlap
from ._snapshot_files import (
    SNAPSHOT_FILE_SUFFIX as SNAPSHOT_FILE_SUFFIX,
    SNAPSHOT_PART_SUFFIX as SNAPSHOT_PART_SUFFIX,
    SnapshotId as SnapshotId,
    delete_snapshot as delete_snapshot,
    list_snapshots as list_snapshots,
    oldest_snapshot_end as oldest_snapshot_end,
    parse_name as parse_name,
    remove_leftovers as remove_leftovers,
    scan_snapshot_dir as scan_snapshot_dir,
    snapshot_dir as snapshot_dir,
    snapshot_leftovers as snapshot_leftovers,
    snapshot_path as snapshot_path,
)
from ._swap import leftover_temp_files as leftover_temp_files
from ._topic_partition import (
    MAX_PARTITION as MAX_PARTITION,
    TopicPartition as TopicPartition,
    validate_topic_name as validate_topic_name,
)
from ._txn_check import txn_index_problems as txn_index_problems
from ._txnindex import (
    TXN_ENTRY_SIZE as TXN_ENTRY_SIZE,
    AbortedTxn as AbortedTxn,
    TransactionIndex as TransactionIndex,
)
