"""CRC32C of v2 batches (docs/kafka-format.md §2.1), the one place that computes it.

``checksum`` is one buffer through the ``crc32c`` library; ``first_bad_crc_each`` checks batches
one library call each (the reader's check, and the only path on CPUs without SSE4.2).

The library is fast on long buffers, but the per-call cost is about a third of the time on
12 KiB batches, so ``batch_crcs`` walks all the batches of a chunk in one numba call with the CPU's
CRC32 instruction. That instruction has a latency of three cycles and a throughput of one, so a
single stream runs at a third of its speed; the kernel runs four batches side by side, each its
own stream, which keeps it busy while they last. What is left of a batch past the shortest of
the four (batches of unequal sizes, one large batch) runs three streams inside the batch: blocks
of ``_LANE * 3`` bytes, one lane each, joined by shifting a lane's CRC over the bytes after it
(CRC is linear: ``crc(c, A || B) = shift_B(crc(c, A)) ^ crc(0, B)``, with ``shift_B`` of a
32-bit value four lookups in byte tables that each call builds with the instruction itself). On
one large batch that is ~2.5x the single stream. x86-64 with SSE4.2 only (``AVAILABLE``);
elsewhere callers use the library. The kernel only says whether (and where) a CRC differs:
callers re-check with the library to word the error.
"""

from __future__ import annotations

import platform
import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from llvmlite import ir  # type: ignore[import-untyped]

from cleanerd._kernel import intrinsic, kernel
from cleanerd.format import kernels as k
from cleanerd.format._pointer import data_ptr
from cleanerd.format.layout import CRC_AT, CRC_START

Arr = npt.NDArray[Any]
_I64, _I32, _I8 = ir.IntType(64), ir.IntType(32), ir.IntType(8)


def _types() -> Any:
    """numba's types, imported when a kernel compiles (cleanerd/_kernel.py)."""
    from numba import types  # noqa: PLC0415

    return types


def _get_or_insert_function(module: Any, fnty: Any, name: str) -> Any:
    from numba.core import cgutils  # noqa: PLC0415 (only to compile)

    insert: Any = cgutils.get_or_insert_function
    return insert(module, fnty, name)


def _has_sse42() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        import llvmlite.binding as ll  # type: ignore[import-untyped]  # noqa: PLC0415

        return bool(ll.get_host_cpu_features().get("sse4.2", False))
    except Exception:
        return False


AVAILABLE = _has_sse42()


def _crc_u64_typing(typingctx: Any, crc: Any, data: Any) -> Any:
    types = _types()
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(_I64, [_I64, _I64])
        fn = _get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, args)

    return sig, codegen


def _crc_u8_typing(typingctx: Any, crc: Any, data: Any) -> Any:
    types = _types()
    sig = types.uint32(types.uint32, types.uint8)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(_I32, [_I32, _I8])
        fn = _get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.32.8")
        return builder.call(fn, args)

    return sig, codegen


def _load_u64_typing(typingctx: Any, ptr: Any, offset: Any) -> Any:
    """The 8 bytes at ``ptr + offset`` as a little-endian uint64 (any alignment)."""
    types = _types()
    if not isinstance(ptr, types.CPointer) or not isinstance(offset, types.Integer):
        return None
    sig = types.uint64(ptr, offset)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        p, o = args
        addr = builder.bitcast(builder.gep(p, [o]), _I64.as_pointer())
        return builder.load(addr, align=1)

    return sig, codegen


_crc_u64: Any = intrinsic(_crc_u64_typing)
_crc_u8: Any = intrinsic(_crc_u8_typing)
_load_u64: Any = intrinsic(_load_u64_typing)
_INIT = np.uint64(0xFFFFFFFF)
_CRC = struct.Struct(">I")


_LANE = 512  # bytes per lane of a block: the two shifts cost ~5% of a block's 3 x 64 words
_ZERO = np.uint64(0)
_BYTE = np.uint64(0xFF)
_TABLES = 2 * 4 * 256  # shift by one lane, then by two; four byte tables each
SHIFT_TABLE_SIZE = _TABLES + 1  # and a flag: built


@kernel()
def _shift(tables: Any, t: int, c: np.uint64) -> np.uint64:
    """Register ``c`` after ``(t + 1) * _LANE`` zero bytes (``tables`` a raw pointer)."""
    o = t * 1024
    return np.uint64(
        tables[o + np.int64(c & _BYTE)]
        ^ tables[o + 256 + np.int64((c >> np.uint64(8)) & _BYTE)]
        ^ tables[o + 512 + np.int64((c >> np.uint64(16)) & _BYTE)]
        ^ tables[o + 768 + np.int64((c >> np.uint64(24)) & _BYTE)]
    )


@kernel()
def _shift_tables(tables: Any) -> None:
    """Fill the shift tables (``tables`` a raw pointer to uint32[SHIFT_TABLE_SIZE]): entry
    ``t*1024 + j*256 + b`` is the CRC register ``b << 8j`` after ``(t + 1) * _LANE`` zero bytes.
    A shift is linear in the register, so the entries of a register's four bytes XOR to it
    shifted. ~2 us, once per call that needs them."""
    for i in range(0, 32, 4):  # four registers at a time: the instruction's latency is 3
        v0 = np.uint64(1) << np.uint64(i)
        v1 = np.uint64(2) << np.uint64(i)
        v2 = np.uint64(4) << np.uint64(i)
        v3 = np.uint64(8) << np.uint64(i)
        for _ in range(_LANE // 8):
            v0 = _crc_u64(v0, _ZERO)
            v1 = _crc_u64(v1, _ZERO)
            v2 = _crc_u64(v2, _ZERO)
            v3 = _crc_u64(v3, _ZERO)
        j = i // 8
        for q, v in ((0, v0), (1, v1), (2, v2), (3, v3)):
            bit = i % 8 + q
            base = j * 256
            tables[base] = 0
            # every byte with ``bit`` as its top bit: that bit's image XOR the rest's
            for b in range(1 << bit, 1 << (bit + 1)):
                tables[base + b] = tables[base + b - (1 << bit)] ^ np.uint32(v)
    for j in range(4):  # two lanes: the one-lane shift of each one-lane image
        for b in range(256):
            tables[1024 + j * 256 + b] = np.uint32(
                _shift(tables, 0, np.uint64(tables[j * 256 + b]))
            )
    tables[_TABLES] = 1


@kernel()
def _tail(ptr: Any, tables: Any, crc: np.uint64, p: int, end: int) -> np.uint64:
    """Finish one stream: blocks of three lanes, whole words, then bytes; returns the final
    (inverted) CRC."""
    if p + 3 * _LANE <= end and tables[_TABLES] == 0:
        _shift_tables(tables)
    while p + 3 * _LANE <= end:
        l0 = crc
        l1 = _ZERO
        l2 = _ZERO
        for j in range(0, _LANE, 8):
            l0 = _crc_u64(l0, _load_u64(ptr, p + j))
            l1 = _crc_u64(l1, _load_u64(ptr, p + _LANE + j))
            l2 = _crc_u64(l2, _load_u64(ptr, p + 2 * _LANE + j))
        crc = _shift(tables, 1, l0) ^ _shift(tables, 0, l1) ^ l2
        p += 3 * _LANE
    while p + 8 <= end:
        crc = _crc_u64(crc, _load_u64(ptr, p))
        p += 8
    c = np.uint32(crc)
    while p < end:
        c = _crc_u8(c, ptr[p])
        p += 1
    return np.uint64(c) ^ _INIT


@kernel(nogil=True)
def batch_crcs(buf: Arr, starts: Arr, ends: Arr, out: Arr, tables: Arr) -> None:
    """CRC32C of ``buf[starts[i]:ends[i]]`` into ``out[i]``, four batches side by side, then
    what is left of each in three lanes; ``tables`` is room for the shift tables
    (uint32[SHIFT_TABLE_SIZE], ``shift_tables()``), built on the first batch that needs them."""
    n = starts.shape[0]
    if ends.shape[0] < n or out.shape[0] < n:
        raise ValueError("batch_crcs: column lengths differ")
    if tables.shape[0] < SHIFT_TABLE_SIZE:
        raise ValueError("batch_crcs: the shift tables need SHIFT_TABLE_SIZE entries")
    for i in range(n):
        if not 0 <= starts[i] <= ends[i] <= buf.shape[0]:
            raise ValueError("batch_crcs: a range lies outside the buffer")
    tables[_TABLES] = 0  # built by the first batch that needs them
    tab = data_ptr(tables)
    ptr = data_ptr(buf)
    i = 0
    while i + 4 <= n:
        p0, p1, p2, p3 = starts[i], starts[i + 1], starts[i + 2], starts[i + 3]
        e0, e1, e2, e3 = ends[i], ends[i + 1], ends[i + 2], ends[i + 3]
        c0 = c1 = c2 = c3 = _INIT
        steps = min(e0 - p0, e1 - p1, e2 - p2, e3 - p3) // 8
        for _ in range(steps):
            c0 = _crc_u64(c0, _load_u64(ptr, p0))
            c1 = _crc_u64(c1, _load_u64(ptr, p1))
            c2 = _crc_u64(c2, _load_u64(ptr, p2))
            c3 = _crc_u64(c3, _load_u64(ptr, p3))
            p0 += 8
            p1 += 8
            p2 += 8
            p3 += 8
        out[i] = _tail(ptr, tab, c0, p0, e0)
        out[i + 1] = _tail(ptr, tab, c1, p1, e1)
        out[i + 2] = _tail(ptr, tab, c2, p2, e2)
        out[i + 3] = _tail(ptr, tab, c3, p3, e3)
        i += 4
    while i < n:
        out[i] = _tail(ptr, tab, _INIT, starts[i], ends[i])
        i += 1


def shift_tables() -> Arr:
    """Room for ``batch_crcs``'s shift tables (its own per call: threads may check at once)."""
    return np.zeros(SHIFT_TABLE_SIZE, dtype=np.uint32)


def _library() -> Any:
    """The ``crc32c`` library's function, imported on first use: a scan that checks with the
    kernel never needs it, and importing it (with ``importlib.metadata``) costs a short command
    more than its whole scan."""
    import crc32c  # noqa: PLC0415 (docstring)

    return crc32c.crc32c


def checksum(data: Any, initial: int = 0, *, release_gil: bool = False) -> int:
    """CRC32C of one buffer, continuing ``initial`` (the CRC of the bytes before it);
    ``release_gil`` when other threads run (the library keeps the GIL for data under 32 KiB
    unless told otherwise)."""
    return int(_library()(data, initial, 1 if release_gil else -1))


def first_bad_crc_each(arr: Arr, batches: Arr, first: int, stop: int, *, release_gil: bool) -> int:
    """The first of batches ``first..stop-1`` whose CRC32C does not match, or -1.

    One library call per batch, on Python ints (numpy scalars cost ~1 us a batch).
    """
    rows = batches[first:stop]
    starts = (rows[:, k.B_POS] + CRC_START).tolist()
    stops = (rows[:, k.B_POS] + rows[:, k.B_SIZE]).tolist()
    stored = rows[:, k.B_CRC].tolist()
    mv = arr.data
    crc = _library()
    mode = 1 if release_gil else -1
    for i, (lo, hi, expected) in enumerate(zip(starts, stops, stored, strict=True)):
        if crc(mv[lo:hi], 0, mode) != expected:
            return first + i
    return -1


def crc_reason(arr: Arr, batches: Arr, i: int) -> str:
    """The error message for batch ``i``'s CRC mismatch."""
    pos = int(batches[i, k.B_POS])
    computed = checksum(arr.data[pos + CRC_START : pos + int(batches[i, k.B_SIZE])])
    return f"CRC mismatch: stored {int(batches[i, k.B_CRC]):#010x}, computed {computed:#010x}"


def first_bad_crc(arr: Arr, batches: Arr) -> int:
    """The first batch (row of a scan of ``arr``) whose stored CRC32C differs, or -1."""
    pos = batches[:, k.B_POS]
    out = np.empty(batches.shape[0], dtype=np.uint64)
    batch_crcs(arr, pos + CRC_START, pos + batches[:, k.B_SIZE], out, shift_tables())
    bad = out != batches[:, k.B_CRC].astype(np.uint64)
    return int(np.argmax(bad)) if bad.any() else -1


@kernel(nogil=True)
def _store_crcs(dest: Arr, starts: Arr, crcs: Arr) -> None:
    for i in range(starts.shape[0]):
        v = np.int64(crcs[i])
        p = starts[i] + CRC_AT
        for j in range(3, -1, -1):
            dest[p + j] = np.uint8(v & 0xFF)
            v >>= 8


def fill_crcs(dest: Arr, starts: Arr, ends: Arr) -> None:
    """Each batch's CRC32C over [attributes, end) of ``dest[starts[i]:ends[i]]``, stored in place:
    the kernel where the CPU has it, else the library."""
    if AVAILABLE:
        crcs = np.empty(starts.size, dtype=np.uint64)
        batch_crcs(dest, starts + CRC_START, ends, crcs, shift_tables())
        _store_crcs(dest, starts, crcs)
        return
    mv = dest.data
    crc = _library()
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        _CRC.pack_into(mv, a + CRC_AT, crc(mv[a + CRC_START : b]))
