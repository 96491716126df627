"""Zero-copy reading of v2 batches from a buffer (bytes, memoryview, mmap or numpy array).

This module is the reading side's one public name; the code lives by idea in ``scan.py`` (the
checked batch scan), ``payloads.py`` (decompressing and laying out batch payloads),
``indexing.py`` (the record index) and ``batch_view.py`` (Python objects).

``scan_batches`` walks a whole buffer with the numba kernel and checks CRCs and offsets, returning
the batch matrix and, separately, the first problem found: callers that print (``dump``) or salvage
(recovery) keep what was valid before it. ``RecordBatch`` is the per-batch view for code that wants
Python objects (CLI, tests); ``index_batches`` is the hot-path record index over many batches, and
``index_and_hash`` the same with each record's 128-bit key hash computed as the record is parsed.
"""

from __future__ import annotations

from cleanerd.format._batch_view import (
    RecordBatch,
    decode_headers,
    iter_batches,
    records_from_index,
)
from cleanerd.format._indexing import index_and_hash, index_batches
from cleanerd.format._payloads import Payloads, batch_payload, lay_out
from cleanerd.format._scan import I64, U8, U64, BatchScan, Buffer, as_uint8, scan_batches

__all__ = [
    "I64",
    "U8",
    "U64",
    "BatchScan",
    "Buffer",
    "Payloads",
    "RecordBatch",
    "as_uint8",
    "batch_payload",
    "decode_headers",
    "index_and_hash",
    "index_batches",
    "iter_batches",
    "lay_out",
    "records_from_index",
    "scan_batches",
]
