"""Raw data pointers for numba helpers that run once per record (see ``data_ptr``), and the
loads and cache hints (``prefetch_read``, ``prefetch_write``) made through them."""

from __future__ import annotations

import sys
from typing import Any

from cleanerd._kernel import intrinsic

Ptr = Any  # a numba CPointer(uint8) inside kernels (see data_ptr)


def _data_ptr_typing(typingctx: Any, arr: Any) -> Any:
    """Raw pointer to the data of a C-contiguous array, for per-record helpers.

    A numba function that takes an array increfs and decrefs it (atomic operations on a count
    shared by every thread) on each call, unless both get inlined and pruned, which fails for
    helpers with loops and early returns. Per-record helpers (varints, murmur3) take this pointer
    instead: it carries no reference count, and indexing it has no negative-index wraparound. The
    array must outlive the pointer: take it in the kernel that holds the array for the whole call.
    """
    from numba import types  # noqa: PLC0415 (numba only to compile: cleanerd/_kernel.py)

    if not isinstance(arr, types.Array) or arr.layout != "C":
        return None
    pointer: Any = types.CPointer
    sig = pointer(arr.dtype)(arr)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return context.make_array(arr)(context, builder, value=args[0]).data

    return sig, codegen


data_ptr: Any = intrinsic(_data_ptr_typing)


def _load_le64_typing(typingctx: Any, ptr: Any, offset: Any) -> Any:
    """The 8 bytes at ``ptr + offset`` as a little-endian uint64, at any alignment."""
    from llvmlite import ir  # type: ignore[import-untyped]  # noqa: PLC0415 (only to compile)
    from numba import types  # noqa: PLC0415

    if not isinstance(ptr, types.CPointer) or not isinstance(offset, types.Integer):
        return None
    sig = types.uint64(ptr, offset)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        p, o = args
        addr = builder.bitcast(builder.gep(p, [o]), ir.IntType(64).as_pointer())
        value = builder.load(addr, align=1)
        if sys.byteorder == "big":
            value = builder.bswap(value)
        return value

    return sig, codegen


load_le64: Any = intrinsic(_load_le64_typing)


def _prefetch_typing(write: bool) -> Any:
    """An intrinsic asking the CPU to bring ``ptr[index]`` into cache ahead of use, to read or
    to write. A hint: it never faults, so ``index`` may lie past the end of the data."""

    def typing(typingctx: Any, ptr: Any, index: Any) -> Any:
        from llvmlite import ir  # noqa: PLC0415 (only to compile)
        from numba import types  # noqa: PLC0415
        from numba.core import cgutils  # noqa: PLC0415

        if not isinstance(ptr, types.CPointer) or not isinstance(index, types.Integer):
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            address = builder.bitcast(builder.gep(args[0], [args[1]]), i8p)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            insert: Any = cgutils.get_or_insert_function
            fn = insert(builder.module, fnty, "llvm.prefetch.p0i8")
            # read or write, high locality, data cache
            rw = ir.Constant(i32, 1 if write else 0)
            builder.call(fn, [address, rw, ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.none(ptr, index), codegen

    return typing


prefetch_read: Any = intrinsic(_prefetch_typing(write=False))
prefetch_write: Any = intrinsic(_prefetch_typing(write=True))
