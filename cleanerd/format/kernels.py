"""numba kernels over raw segment bytes: batch walk, record index, 128-bit key hash.

This module is their one public name (``kernels.X``, a namespace other packages' kernels use);
the code lives by idea in ``_walk.py`` (batch headers), ``_record_index.py`` (records and their
key hashes), ``_murmur.py`` and ``_pointer.py``.

Python never touches individual records on a hot path: these kernels take a ``uint8`` numpy view
of a buffer (usually an mmapped segment) and return int64 matrices, one row per batch or per record,
with the column numbers below. All of them release the GIL (``nogil=True``) so worker threads run
in parallel, and are cached on disk (``cache=True``; see ``cleanerd._jitcache``).

The key hash is MurmurHash3 x64 128 (seed 0), computed on the key bytes in place: 128 bits make a
collision between two live keys (which would drop a record) vanishingly unlikely, and murmur3 is
simple enough to run inside the kernels; ``mmh3.hash128(key, 0, True)`` gives the same value.
The record index kernel can hash each key as it parses the record (``index_records_into`` with a
``hashes`` array), which costs a few ns a record where a separate ``hash_keys`` pass re-reads the
record matrix and the keys from memory.

No kernel uses ``parallel=True``: the daemon calls kernels from several Python threads at once, and
numba's default (workqueue) threading layer is not safe for that. ``index_records_into`` still
takes a batch range and the output row to start at, so disjoint ranges could fill one matrix
from several threads.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from cleanerd.format._murmur import murmur3_128
from cleanerd.format._pointer import Ptr, data_ptr, prefetch_read, prefetch_write
from cleanerd.format._record_index import (
    MIN_RECORD_SIZE,
    NO_HASHES,
    R_BATCH,
    R_HEADER_COUNT,
    R_HEADERS_POS,
    R_KEY_LEN,
    R_KEY_POS,
    R_OFFSET,
    R_POS,
    R_SIZE,
    R_TIMESTAMP,
    R_VALUE_LEN,
    R_VALUE_POS,
    REC_BAD_LENGTH,
    REC_BAD_OFFSET,
    REC_COUNT_MISMATCH,
    REC_LENGTH_MISMATCH,
    REC_OK,
    REC_OUT_OF_BOUNDS,
    REC_VARINT_TOO_LONG,
    RECORD_COLUMNS,
    _varint as _record_varint,
    bad_counts,
    hash_keys,
    hash_keys_into,
    index_one,
    index_records,
    index_records_into,
)
from cleanerd.format._walk import (
    B_ATTRIBUTES,
    B_BASE_OFFSET,
    B_BASE_SEQUENCE,
    B_BASE_TIMESTAMP,
    B_COUNT,
    B_CRC,
    B_LAST_OFFSET,
    B_LEADER_EPOCH,
    B_MAGIC,
    B_MAX_TIMESTAMP,
    B_POS,
    B_PRODUCER_EPOCH,
    B_PRODUCER_ID,
    B_SIZE,
    BATCH_COLUMNS,
    WALK_BAD_MAGIC,
    WALK_OK,
    WALK_PARTIAL_HEADER,
    WALK_PAST_END,
    WALK_TOO_SMALL,
    walk_batch_matrix,
    walk_batches,
)
from cleanerd.format.layout import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2

Arr = npt.NDArray[Any]

__all__ = [  # noqa: RUF022
    "Arr",
    "BATCH_COLUMNS",
    "B_ATTRIBUTES",
    "B_BASE_OFFSET",
    "B_BASE_SEQUENCE",
    "B_BASE_TIMESTAMP",
    "B_COUNT",
    "B_CRC",
    "B_LAST_OFFSET",
    "B_LEADER_EPOCH",
    "B_MAGIC",
    "B_MAX_TIMESTAMP",
    "B_POS",
    "B_PRODUCER_EPOCH",
    "B_PRODUCER_ID",
    "B_SIZE",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "MIN_RECORD_SIZE",
    "NO_HASHES",
    "Ptr",
    "RECORD_COLUMNS",
    "REC_BAD_LENGTH",
    "REC_BAD_OFFSET",
    "REC_COUNT_MISMATCH",
    "REC_LENGTH_MISMATCH",
    "REC_OK",
    "REC_OUT_OF_BOUNDS",
    "REC_VARINT_TOO_LONG",
    "R_BATCH",
    "R_HEADERS_POS",
    "R_HEADER_COUNT",
    "R_KEY_LEN",
    "R_KEY_POS",
    "R_OFFSET",
    "R_POS",
    "R_SIZE",
    "R_TIMESTAMP",
    "R_VALUE_LEN",
    "R_VALUE_POS",
    "WALK_BAD_MAGIC",
    "WALK_OK",
    "WALK_PARTIAL_HEADER",
    "WALK_PAST_END",
    "WALK_TOO_SMALL",
    "bad_counts",
    "data_ptr",
    "hash_keys",
    "hash_keys_into",
    "index_one",
    "index_records",
    "index_records_into",
    "murmur3_128",
    "prefetch_read",
    "prefetch_write",
    "walk_batch_matrix",
    "walk_batches",
]

_varint: Any = _record_varint  # the tests check the varint reader directly
