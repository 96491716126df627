"""The front door of ``cleanerd.storage``: what other packages may use (see __init__.py)."""

from ._aborted import collect_aborted as collect_aborted
from ._checkpoints import (
    CLEANER_OFFSET_CHECKPOINT as CLEANER_OFFSET_CHECKPOINT,
)
from ._checkpoints import (
    LEADER_EPOCH_CHECKPOINT as LEADER_EPOCH_CHECKPOINT,
)
from ._checkpoints import (
    LOG_START_OFFSET_CHECKPOINT as LOG_START_OFFSET_CHECKPOINT,
)
from ._checkpoints import (
    OFFSET_CHECKPOINTS as OFFSET_CHECKPOINTS,
)
from ._checkpoints import (
    PARTITION_METADATA as PARTITION_METADATA,
)
from ._checkpoints import (
    RECOVERY_POINT_CHECKPOINT as RECOVERY_POINT_CHECKPOINT,
)
from ._checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT as REPLICATION_OFFSET_CHECKPOINT,
)
from ._checkpoints import (
    TMP_SUFFIX as TMP_SUFFIX,
)
from ._checkpoints import (
    fsync_dir as fsync_dir,
)
from ._checkpoints import (
    read_any_checkpoint as read_any_checkpoint,
)
from ._checkpoints import (
    read_offset_checkpoint as read_offset_checkpoint,
)
from ._checkpoints import (
    update_offset_checkpoint as update_offset_checkpoint,
)
from ._checkpoints import (
    write_offset_checkpoint as write_offset_checkpoint,
)
from ._chunks import (
    CHUNK_BYTES as CHUNK_BYTES,
)
from ._chunks import (
    chunk_bytes as chunk_bytes,
)
from ._chunks import (
    iter_chunks as iter_chunks,
)
from ._chunks import (
    release as release,
)
from ._errors import CorruptIndexError as CorruptIndexError
from ._errors import StorageError as StorageError
from ._files import (
    CLEANED_SUFFIX as CLEANED_SUFFIX,
)
from ._files import (
    DELETED_SUFFIX as DELETED_SUFFIX,
)
from ._files import (
    INDEX_SUFFIX as INDEX_SUFFIX,
)
from ._files import (
    LOG_SUFFIX as LOG_SUFFIX,
)
from ._files import (
    SEGMENT_SUFFIXES as SEGMENT_SUFFIXES,
)
from ._files import (
    SNAPSHOT_SUFFIX as SNAPSHOT_SUFFIX,
)
from ._files import (
    SWAP_SUFFIX as SWAP_SUFFIX,
)
from ._files import (
    TIME_INDEX_SUFFIX as TIME_INDEX_SUFFIX,
)
from ._files import (
    TXN_INDEX_SUFFIX as TXN_INDEX_SUFFIX,
)
from ._files import (
    offset_from_name as offset_from_name,
)
from ._files import (
    parse_base_offset as parse_base_offset,
)
from ._files import (
    segment_file as segment_file,
)
from ._index import OffsetIndex as OffsetIndex
from ._index import TimeIndex as TimeIndex
from ._kept_maps import MAPS as MAPS
from ._log_view import ReadOnlyLog as ReadOnlyLog
from ._logdir import (
    LOCK_FILE as LOCK_FILE,
)
from ._logdir import (
    LogDir as LogDir,
)
from ._logdir import (
    parse_partition_dir_name as parse_partition_dir_name,
)
from ._partition import PartitionLog as PartitionLog
from ._partition import wall_clock_ms as wall_clock_ms
from ._producer_snapshot import read_snapshot as read_snapshot
from ._producer_state import (
    ProducerEntry as ProducerEntry,
)
from ._producer_state import (
    ProducerState as ProducerState,
)
from ._producer_state import (
    scan_producer_state as scan_producer_state,
)
from ._regular import (
    file_kind as file_kind,
)
from ._regular import (
    irregular_segment_files as irregular_segment_files,
)
from ._regular import (
    map_readonly as map_readonly,
)
from ._regular import (
    map_regular as map_regular,
)
from ._regular import (
    open_regular as open_regular,
)
from ._regular import (
    read_regular as read_regular,
)
from ._regular import (
    segment_log_stats as segment_log_stats,
)
from ._regular import (
    segment_logs as segment_logs,
)
from ._regular import (
    view_regular as view_regular,
)
from ._regular import (
    why_refused as why_refused,
)
from ._repairs import Repairs as Repairs
from ._retention import (
    delete_old_segments as delete_old_segments,
)
from ._retention import (
    delete_segments_below as delete_segments_below,
)
from ._segment import LogSegment as LogSegment
from ._segment_list import (
    check_offsets_across as check_offsets_across,
)
from ._segment_list import (
    offsets_overlap as offsets_overlap,
)
from ._snapshot_files import (
    SNAPSHOT_FILE_SUFFIX as SNAPSHOT_FILE_SUFFIX,
)
from ._snapshot_files import (
    SNAPSHOT_PART_SUFFIX as SNAPSHOT_PART_SUFFIX,
)
from ._snapshot_files import (
    SnapshotId as SnapshotId,
)
from ._snapshot_files import (
    delete_snapshot as delete_snapshot,
)
from ._snapshot_files import (
    list_snapshots as list_snapshots,
)
from ._snapshot_files import (
    oldest_snapshot_end as oldest_snapshot_end,
)
from ._snapshot_files import (
    parse_name as parse_name,
)
from ._snapshot_files import (
    remove_leftovers as remove_leftovers,
)
from ._snapshot_files import (
    scan_snapshot_dir as scan_snapshot_dir,
)
from ._snapshot_files import (
    snapshot_dir as snapshot_dir,
)
from ._snapshot_files import (
    snapshot_path as snapshot_path,
)
from ._swap import leftover_temp_files as leftover_temp_files
from ._topic_partition import (
    MAX_PARTITION as MAX_PARTITION,
)
from ._topic_partition import (
    TopicPartition as TopicPartition,
)
from ._topic_partition import (
    validate_topic_name as validate_topic_name,
)
from ._txn_check import txn_index_problems as txn_index_problems
from ._txnindex import (
    TXN_ENTRY_SIZE as TXN_ENTRY_SIZE,
)
from ._txnindex import (
    AbortedTxn as AbortedTxn,
)
from ._txnindex import (
    TransactionIndex as TransactionIndex,
)
