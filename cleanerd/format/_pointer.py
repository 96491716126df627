"""Raw data pointers for numba helpers that run once per record (see ``data_ptr``)."""

from __future__ import annotations

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
