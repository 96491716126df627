"""Where each field of the 61-byte v2 batch header sits (docs/kafka-format.md §2.1), written once.

``header.py`` packs and parses the header with ``struct``; the numba kernels (batch walk,
rebuild, CRC) read and write fields at these byte offsets. Module-level ints are compile-time
constants to numba, so naming them costs the kernels nothing.
"""

from __future__ import annotations

BASE_OFFSET_AT = 0  # int64
LENGTH_AT = 8  # int32, bytes after this field (batchLength)
LEADER_EPOCH_AT = 12  # int32
MAGIC_AT = 16  # int8
CRC_AT = 17  # uint32, CRC32C of [attributes, end)
ATTRIBUTES_AT = 21  # int16
LAST_OFFSET_DELTA_AT = 23  # int32
BASE_TIMESTAMP_AT = 27  # int64
MAX_TIMESTAMP_AT = 35  # int64
PRODUCER_ID_AT = 43  # int64
PRODUCER_EPOCH_AT = 51  # int16
BASE_SEQUENCE_AT = 53  # int32
RECORDS_COUNT_AT = 57  # int32
HEADER_SIZE = 61

LOG_OVERHEAD = LENGTH_AT + 4  # baseOffset + batchLength
CRC_START = ATTRIBUTES_AT  # the CRC covers attributes .. end of batch
MAGIC_V2 = 2
