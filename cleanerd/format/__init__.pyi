"""The front door of ``cleanerd.format``: what other packages may use (see __init__.py)."""

from . import kernels as kernels, layout as layout
from ._batch_view import (
    RecordBatch as RecordBatch,
    iter_batches as iter_batches,
    records_from_index as records_from_index,
)
from ._builder import (
    build_batch as build_batch,
    build_control_batch as build_control_batch,
    build_empty_batch as build_empty_batch,
    build_end_txn_marker as build_end_txn_marker,
    set_base_offset as set_base_offset,
)
from ._codecs import (
    Compression as Compression,
    compress as compress,
    decompression_limit as decompression_limit,
    limit_decompression as limit_decompression,
)
from ._control import (
    ControlType as ControlType,
    EndTransactionMarker as EndTransactionMarker,
    parse_control_key as parse_control_key,
)
from ._crc import (
    checksum as checksum,
    fill_crcs as fill_crcs,
    first_bad_crc as first_bad_crc,
    first_bad_crc_each as first_bad_crc_each,
)
from ._errors import CorruptRecordError as CorruptRecordError
from ._header import (
    ATTR_CODEC_MASK as ATTR_CODEC_MASK,
    ATTR_CONTROL as ATTR_CONTROL,
    ATTR_DELETE_HORIZON as ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE as ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL as ATTR_TRANSACTIONAL,
    NO_PRODUCER_ID as NO_PRODUCER_ID,
    BatchHeader as BatchHeader,
)
from ._indexing import index_and_hash as index_and_hash, index_batches as index_batches
from ._legacy import (
    MIXED_MAGIC as MIXED_MAGIC,
    LegacyRecord as LegacyRecord,
    build_legacy as build_legacy,
    is_legacy as is_legacy,
    legacy_rows as legacy_rows,
)
from ._limits import (
    INT_MAX as INT_MAX,
    INT_MIN as INT_MIN,
    LONG_MAX as LONG_MAX,
    LONG_MIN as LONG_MIN,
    MAX_DECOMPRESSED_BYTES as MAX_DECOMPRESSED_BYTES,
)
from ._native_lay_out import (
    decode_native as decode_native,
    decoders as decoders,
    zstd_context as zstd_context,
)
from ._payloads import (
    RECORD_INDEX_BYTES as RECORD_INDEX_BYTES,
    batch_records_bound as batch_records_bound,
    chunk_payloads_bound as chunk_payloads_bound,
    lay_out as lay_out,
    payload_ranges as payload_ranges,
)
from ._pointer import data_ptr as data_ptr
from ._record_index import (
    R_HEADER_COUNT as R_HEADER_COUNT,
    R_HEADERS_POS as R_HEADERS_POS,
    R_TIMESTAMP as R_TIMESTAMP,
    index_one as index_one,
)
from ._records import Header as Header, Record as Record
from ._scan import (
    I64 as I64,
    U8 as U8,
    U64 as U64,
    BatchScan as BatchScan,
    as_uint8 as as_uint8,
    scan_batches as scan_batches,
)
from ._snappy import snappy_fallback_reason as snappy_fallback_reason
from .layout import HEADER_SIZE as HEADER_SIZE, LOG_OVERHEAD as LOG_OVERHEAD, MAGIC_V2 as MAGIC_V2
