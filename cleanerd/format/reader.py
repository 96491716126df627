"""Zero-copy reading of v2 batches from a buffer (bytes, memoryview, mmap or numpy array).

This module is the reading side's one public name; the code lives by idea in ``scan.py`` (the
checked batch scan), ``payloads.py`` (decompressing and laying out batch payloads),
``indexing.py`` (the record index, threaded), ``threads.py`` (its pool) and ``batch_view.py``
(Python objects).

``scan_batches`` walks a whole buffer with the numba kernel and checks CRCs and offsets, returning
the batch matrix and, separately, the first problem found: callers that print (``dump``) or salvage
(recovery) keep what was valid before it. ``RecordBatch`` is the per-batch view for code that wants
Python objects (CLI, tests); ``index_batches`` is the hot-path record index over many batches, and
``index_and_hash`` the same with each record's 128-bit key hash computed as the record is parsed.

``index_batches`` and ``index_and_hash`` take ``threads``. With more than one, the batches are cut
into contiguous chunks of similar record counts, indexed by the nogil kernel on the calling thread
and a shared, lazily created thread pool, each chunk into its own rows of one matrix; with
``check_crc=True`` one of the threads runs the CRC32C loop first, next to the kernels. Results are
exactly those of ``threads=1``, including which error is reported for damaged data (the first bad
batch in batch order). Decompression stays on one thread (lz4 and zstd hold the GIL for
batch-sized payloads). Use ``threads`` where one call has the machine to itself: a one-shot CLI
command over a segment, a benchmark (about 1.7x on 2 cores for uncompressed data). Keep the
default, 1, in the daemon: its workers already keep every core busy, each on its own partition.
"""

from __future__ import annotations

from cleanerd.format.batch_view import RecordBatch, decode_headers, iter_batches, records_from_index
from cleanerd.format.indexing import index_and_hash, index_batches
from cleanerd.format.payloads import Payloads, batch_payload, lay_out
from cleanerd.format.scan import I64, U8, U64, BatchScan, Buffer, as_uint8, scan_batches

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
