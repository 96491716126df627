"""The front door of ``cleanerd.format``: what other packages may use (see __init__.py)."""

from . import kernels as kernels
from . import layout as layout
from ._batch_view import (
    RecordBatch as RecordBatch,
)
from ._batch_view import (
    iter_batches as iter_batches,
)
from ._batch_view import (
    records_from_index as records_from_index,
)
from ._builder import (
    build_batch as build_batch,
)
from ._builder import (
    build_control_batch as build_control_batch,
)
from ._builder import (
    build_empty_batch as build_empty_batch,
)
from ._builder import (
    build_end_txn_marker as build_end_txn_marker,
)
from ._builder import (
    set_base_offset as set_base_offset,
)
from ._codecs import (
    Compression as Compression,
)
from ._codecs import (
    compress as compress,
)
from ._codecs import (
    limit_decompression as limit_decompression,
)
from ._control import (
    ControlType as ControlType,
)
from ._control import (
    EndTransactionMarker as EndTransactionMarker,
)
from ._control import (
    parse_control_key as parse_control_key,
)
from ._crc import (
    checksum as checksum,
)
from ._crc import (
    fill_crcs as fill_crcs,
)
from ._crc import (
    first_bad_crc as first_bad_crc,
)
from ._crc import (
    first_bad_crc_each as first_bad_crc_each,
)
from ._errors import CorruptRecordError as CorruptRecordError
from ._header import (
    ATTR_CODEC_MASK as ATTR_CODEC_MASK,
)
from ._header import (
    ATTR_CONTROL as ATTR_CONTROL,
)
from ._header import (
    ATTR_DELETE_HORIZON as ATTR_DELETE_HORIZON,
)
from ._header import (
    ATTR_TIMESTAMP_TYPE as ATTR_TIMESTAMP_TYPE,
)
from ._header import (
    ATTR_TRANSACTIONAL as ATTR_TRANSACTIONAL,
)
from ._header import (
    NO_PRODUCER_ID as NO_PRODUCER_ID,
)
from ._header import (
    BatchHeader as BatchHeader,
)
from ._indexing import index_and_hash as index_and_hash
from ._indexing import index_batches as index_batches
from ._limits import (
    INT_MAX as INT_MAX,
)
from ._limits import (
    INT_MIN as INT_MIN,
)
from ._limits import (
    LONG_MAX as LONG_MAX,
)
from ._limits import (
    LONG_MIN as LONG_MIN,
)
from ._limits import (
    MAX_DECOMPRESSED_BYTES as MAX_DECOMPRESSED_BYTES,
)
from ._payloads import lay_out as lay_out
from ._pointer import data_ptr as data_ptr
from ._record_index import (
    R_HEADER_COUNT as R_HEADER_COUNT,
)
from ._record_index import (
    R_HEADERS_POS as R_HEADERS_POS,
)
from ._record_index import (
    R_TIMESTAMP as R_TIMESTAMP,
)
from ._record_index import (
    index_one as index_one,
)
from ._records import Header as Header
from ._records import Record as Record
from ._scan import (
    I64 as I64,
)
from ._scan import (
    U8 as U8,
)
from ._scan import (
    U64 as U64,
)
from ._scan import (
    BatchScan as BatchScan,
)
from ._scan import (
    as_uint8 as as_uint8,
)
from ._scan import (
    scan_batches as scan_batches,
)
from .layout import HEADER_SIZE as HEADER_SIZE
from .layout import LOG_OVERHEAD as LOG_OVERHEAD
from .layout import MAGIC_V2 as MAGIC_V2
