"""CRC32C of v2 batches (docs/kafka-format.md §2.1), the one place that computes it.

``checksum`` is one buffer through the ``crc32c`` library; ``first_bad_crc_each`` checks batches
one library call each (the reader's check, and the only path on CPUs without SSE4.2).

The library is fast on long buffers, but the per-call cost is about a third of the time on
12 KiB batches, so ``batch_crcs`` walks all the batches of a chunk in one numba call with the CPU's
CRC32 instruction. That instruction has a latency of three cycles and a throughput of one, so a
single stream runs at a third of its speed; the kernel runs four batches side by side, each its
own stream, which keeps it busy. x86-64 with SSE4.2 only (``AVAILABLE``); elsewhere callers use
the library. The kernel only says whether (and where) a CRC differs: callers re-check with the
library to word the error.
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


@kernel()
def _tail(ptr: Any, crc: np.uint64, p: int, end: int) -> np.uint64:
    """Finish one stream: whole words, then bytes; returns the final (inverted) CRC."""
    while p + 8 <= end:
        crc = _crc_u64(crc, _load_u64(ptr, p))
        p += 8
    c = np.uint32(crc)
    while p < end:
        c = _crc_u8(c, ptr[p])
        p += 1
    return np.uint64(c) ^ _INIT


@kernel(nogil=True)
def batch_crcs(buf: Arr, starts: Arr, ends: Arr, out: Arr) -> None:
    """CRC32C of ``buf[starts[i]:ends[i]]`` into ``out[i]``, four batches side by side."""
    n = starts.shape[0]
    if ends.shape[0] < n or out.shape[0] < n:
        raise ValueError("batch_crcs: column lengths differ")
    for i in range(n):
        if not 0 <= starts[i] <= ends[i] <= buf.shape[0]:
            raise ValueError("batch_crcs: a range lies outside the buffer")
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
        out[i] = _tail(ptr, c0, p0, e0)
        out[i + 1] = _tail(ptr, c1, p1, e1)
        out[i + 2] = _tail(ptr, c2, p2, e2)
        out[i + 3] = _tail(ptr, c3, p3, e3)
        i += 4
    while i < n:
        out[i] = _tail(ptr, _INIT, starts[i], ends[i])
        i += 1


def _library() -> Any:
    """The ``crc32c`` library's function, imported on first use: a scan that checks with the
    kernel never needs it, and importing it (with ``importlib.metadata``) costs a short command
    more than its whole scan."""
    import crc32c  # noqa: PLC0415 (docstring)

    return crc32c.crc32c


def checksum(data: Any, *, release_gil: bool = False) -> int:
    """CRC32C of one buffer; ``release_gil`` when other threads run (the library keeps the GIL
    for data under 32 KiB unless told otherwise)."""
    return int(_library()(data, 0, 1 if release_gil else -1))


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
    batch_crcs(arr, pos + CRC_START, pos + batches[:, k.B_SIZE], out)
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
        batch_crcs(dest, starts + CRC_START, ends, crcs)
        _store_crcs(dest, starts, crcs)
        return
    mv = dest.data
    crc = _library()
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        _CRC.pack_into(mv, a + CRC_AT, crc(mv[a + CRC_START : b]))
