"""lz4 and zstd payloads decoded by their libraries' C decoders, called from a kernel without
the GIL: a chunk's compressed batches decode in one call, with no Python per batch, while
another thread runs Python or kernels of its own (pass 1's pieces on two cores).

The decoders are the very libraries ``format._codecs`` uses, found in the same packages: the
lz4 package's frame extension exports liblz4's ``LZ4_decompress_safe``, and the zstandard
package's cffi extension exports libzstd's ``ZSTD_decompressStream`` (the package's C backend,
which ``_codecs`` calls, is built from the same bundled zstd sources). Where a package lacks
its library (a build without it), that codec goes through ``_codecs`` only: a system library
of another version might judge a corrupt frame otherwise than the binding does.
Their addresses reach the kernel as integers (a kernel that named a C function would be
compiled anew by every process: numba does not cache one).

``lay_out_native`` decodes batch after batch into the payload buffer and stops at the first one
it does not take, which the caller then decodes through the library's Python binding as before
(that either takes it or says why not) before calling again from the next batch:

- lz4: only frames as Kafka writes them (docs/kafka-format.md: version 01, independent blocks,
  no checksum but the header's, which must match, block size 64 KiB to 4 MiB, the end mark last
  in the payload); each block goes to ``LZ4_decompress_safe``, the block decoder liblz4's own
  frame decoder runs for independent blocks, with at most the block size as room;
- zstd: a payload that starts with a standard zstd frame goes to ``ZSTD_decompressStream``, the
  streaming decoder the binding calls (as zstd-jni's ``ZstdInputStream`` does in Kafka: it
  refuses a window past 128 MiB and a match reaching back past the window, which a one-call
  decode into a flat buffer would not), with the room left as its output; taken when the
  frame ends exactly at the payload's end and all of it was written;
- anything else (another codec, a frame with other features, a decoder error, no room left
  within the buffer, the per-batch ``limit`` or the call's ``cap``) is the caller's.

So what the kernel decodes is exactly what the binding would; every error and its wording stay
the binding's. Bytes are read only within each payload and written only within the room given.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import intrinsic, kernel

Arr = npt.NDArray[Any]

LZ4_CODEC = 3  # the attributes' codec ids (format._header)
ZSTD_CODEC = 4
_LZ4_MAGIC = 0x184D2204
_ZSTD_MAGIC = 0xFD2FB528
_RESET_SESSION = 1  # ZSTD_reset_session_only
_M32 = 0xFFFFFFFF
_PRIME1 = 2654435761
_PRIME2 = 2246822519
_PRIME3 = 3266489917
_PRIME5 = 374761393


# --- calling a C function by address -------------------------------------------------------------
def _c_call(builder: Any, address: Any, result: str, params: str, args: Any) -> Any:
    """Call the C function at ``address`` (an int64) with int64 ``args``, converted to its
    parameters (``params``: ``p`` a pointer, ``i`` a C int, ``z`` a size_t); its ``result``
    (``i`` signed int, ``u`` unsigned int, ``z`` size_t) comes back as an int64."""
    from llvmlite import ir  # type: ignore[import-untyped]  # noqa: PLC0415 (only to compile)

    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    kinds = {"p": i8p, "i": i32, "u": i32, "z": i64}
    fnty = ir.FunctionType(kinds[result], [kinds[p] for p in params])
    fn = builder.inttoptr(address, fnty.as_pointer())
    values = []
    for kind, value in zip(params, args, strict=True):
        if kind == "p":
            values.append(builder.inttoptr(value, i8p))
        elif kind == "i":
            values.append(builder.trunc(value, i32))
        else:
            values.append(value)
    out = builder.call(fn, values)
    if result == "i":
        return builder.sext(out, i64)
    if result == "u":
        return builder.zext(out, i64)
    return out


def _ints(*types_: Any) -> bool:
    from numba import types  # noqa: PLC0415 (numba only to compile: cleanerd/_kernel.py)

    return all(isinstance(t, types.Integer) for t in types_)


def _lz4_block_typing(
    typingctx: Any, fn: Any, src: Any, dst: Any, src_size: Any, dst_capacity: Any
) -> Any:
    """``LZ4_decompress_safe(src, dst, src_size, dst_capacity)`` at address ``fn``: the bytes
    written, negative on an error."""
    from numba import types  # noqa: PLC0415

    if not _ints(fn, src, dst, src_size, dst_capacity):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return _c_call(builder, args[0], "i", "ppii", args[1:])

    return types.int64(types.int64, types.int64, types.int64, types.int64, types.int64), codegen


def _zstd_reset_typing(typingctx: Any, fn: Any, ctx: Any, directive: Any) -> Any:
    """``ZSTD_DCtx_reset(ctx, directive)`` at ``fn``: 0 or an error code."""
    from numba import types  # noqa: PLC0415

    if not _ints(fn, ctx, directive):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return _c_call(builder, args[0], "z", "pi", args[1:])

    return types.uint64(types.int64, types.int64, types.int64), codegen


def _zstd_stream_typing(typingctx: Any, fn: Any, ctx: Any, output: Any, source: Any) -> Any:
    """``ZSTD_decompressStream(ctx, output, input)`` at ``fn`` (``output`` and ``input``: the
    addresses of a ``ZSTD_outBuffer`` and a ``ZSTD_inBuffer``): 0 when a frame is done and
    flushed, else a hint or an error code."""
    from numba import types  # noqa: PLC0415

    if not _ints(fn, ctx, output, source):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return _c_call(builder, args[0], "z", "ppp", args[1:])

    return types.uint64(types.int64, types.int64, types.int64, types.int64), codegen


def _zstd_is_error_typing(typingctx: Any, fn: Any, code: Any) -> Any:
    """``ZSTD_isError(code)`` at ``fn``: non-zero when ``code`` is an error code."""
    from numba import types  # noqa: PLC0415

    if not isinstance(fn, types.Integer) or not isinstance(code, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return _c_call(builder, args[0], "u", "z", args[1:])

    return types.int64(types.int64, types.uint64), codegen


def _address_typing(typingctx: Any, arr: Any) -> Any:
    """The address of a C-contiguous array's first byte, as an int64."""
    from numba import types  # noqa: PLC0415

    if not isinstance(arr, types.Array) or arr.layout != "C":
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        from llvmlite import ir  # noqa: PLC0415

        data = context.make_array(arr)(context, builder, value=args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))

    return types.int64(arr), codegen


_lz4_block: Any = intrinsic(_lz4_block_typing)
_zstd_reset: Any = intrinsic(_zstd_reset_typing)
_zstd_stream: Any = intrinsic(_zstd_stream_typing)
_zstd_is_error: Any = intrinsic(_zstd_is_error_typing)
_address: Any = intrinsic(_address_typing)


# --- the kernel ----------------------------------------------------------------------------------
@kernel()
def header_checksum(b0: int, b1: int) -> int:
    """An LZ4 frame header's checksum byte for a 2-byte descriptor (FLG, BD): the second byte
    of xxHash32 (seed 0) of the two bytes."""
    h = (_PRIME5 + 2) & _M32
    for b in (b0, b1):
        h = (h + b * _PRIME5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * _PRIME1 & _M32
    h ^= h >> 15
    h = (h * _PRIME2) & _M32
    h ^= h >> 13
    h = (h * _PRIME3) & _M32
    h ^= h >> 16
    return (h >> 8) & 0xFF


@kernel()
def _le32(src: Arr, i: int) -> int:
    return int(src[i]) | (int(src[i + 1]) << 8) | (int(src[i + 2]) << 16) | (int(src[i + 3]) << 24)


@kernel()
def _lz4_frame(fn: int, src: Arr, ip: int, iend: int, out: Arr, op0: int, room: int) -> int:
    """Decode the LZ4 frame ``src[ip:iend]`` into ``out`` from ``op0``, writing below ``room``:
    the end of what it wrote, -1 when it is the caller's (the module docstring)."""
    if iend - ip < 7:
        return -1
    flg = int(src[ip + 4])
    bd = int(src[ip + 5])
    # version 01, independent blocks, nothing else; BD: a block size of 64 KiB to 4 MiB
    if _le32(src, ip) != _LZ4_MAGIC or flg != 0x60 or bd & 0x8F or (bd >> 4) < 4:
        return -1
    if int(src[ip + 6]) != header_checksum(flg, bd):
        return -1
    block_max = 1 << (8 + 2 * (bd >> 4))
    src_at = _address(src)
    out_at = _address(out)
    ip += 7
    op = op0
    while True:
        if ip + 4 > iend:
            return -1
        size = _le32(src, ip)
        ip += 4
        if size == 0:  # the end mark: the frame must end the payload
            return op if ip == iend else -1
        raw = size & 0x80000000
        size &= 0x7FFFFFFF
        if size > block_max or ip + size > iend:
            return -1
        if raw:
            if op + size > room:
                return -1
            out[op : op + size] = src[ip : ip + size]
            op += size
        else:
            if op > room:
                return -1
            written = _lz4_block(fn, src_at + ip, out_at + op, size, min(block_max, room - op))
            if written < 0:
                return -1
            op += written
        ip += size


@kernel()
def _zstd_frame(
    fns: Arr, ctx: int, buffers: Arr, src: Arr, ip: int, iend: int, out: Arr, op: int, room: int
) -> int:
    """Decode the zstd frame ``src[ip:iend]`` into ``out`` from ``op``, writing below ``room``:
    the end of what it wrote, -1 when it is the caller's (the module docstring). ``fns`` holds
    the addresses of ``ZSTD_DCtx_reset``, ``ZSTD_decompressStream`` and ``ZSTD_isError``;
    ``buffers`` is room for a ``ZSTD_inBuffer`` and a ``ZSTD_outBuffer``."""
    size = iend - ip
    if size < 4 or op > room or _le32(src, ip) != _ZSTD_MAGIC:
        return -1
    if _zstd_is_error(fns[2], _zstd_reset(fns[0], ctx, _RESET_SESSION)):
        return -1
    buffers[0] = _address(src) + ip  # ZSTD_inBuffer: src, size, pos
    buffers[1] = size
    buffers[2] = 0
    buffers[3] = _address(out) + op  # ZSTD_outBuffer: dst, size, pos
    buffers[4] = room - op
    buffers[5] = 0
    at = _address(buffers)
    while True:
        before = (buffers[2], buffers[5])
        left = _zstd_stream(fns[1], ctx, at + 24, at)
        if _zstd_is_error(fns[2], left):
            return -1
        if left == 0:  # the frame ended and is flushed: it must be the whole payload
            return op + int(buffers[5]) if buffers[2] == size else -1
        if (buffers[2], buffers[5]) == before:  # input cut short, or no room left
            return -1


@kernel(nogil=True)
def lay_out_native(
    src: Arr,
    starts: Arr,
    ends: Arr,
    codecs: Arr,
    counts: Arr,
    out: Arr,
    out_ends: Arr,
    first: int,
    q: int,
    limit: int,
    cap: int,
    fns: Arr,
    zstd_ctx: int,
    buffers: Arr,
) -> tuple[int, int]:
    """Lay out the payloads ``src[starts[i]:ends[i]]`` from batch ``first`` on into ``out`` from
    ``q``: uncompressed ones copied, lz4 and zstd ones decoded, a compressed batch with no
    records empty (Kafka never decompresses it); each batch's end in ``out`` goes to
    ``out_ends``. A payload decodes to at most ``limit`` bytes, all of them to at most ``cap``.
    ``fns``: the C functions' addresses (``Decoders.addresses``, 0 for a codec without one);
    ``zstd_ctx``: this thread's zstd decoding context; ``buffers``: 6 int64 of scratch.

    Returns ``(i, q)``: the first batch not laid out (the caller's, see the module docstring;
    ``len(starts)`` when none is left) and where the next payload goes in ``out``.
    """
    n = starts.shape[0]
    if min(ends.shape[0], codecs.shape[0], counts.shape[0], out_ends.shape[0]) < n:
        raise ValueError("lay_out_native: the batch columns differ in length")
    if first < 0 or q < 0 or q > out.shape[0] or fns.shape[0] < 4 or buffers.shape[0] < 6:
        raise ValueError("lay_out_native: first, q or fns out of range")
    for i in range(first, n):
        lo = starts[i]
        hi = ends[i]
        if not 0 <= lo <= hi <= src.shape[0]:
            raise ValueError("lay_out_native: a payload lies outside the segment")
        room = min(out.shape[0], cap, q + limit)
        c = codecs[i]
        if c == 0:
            if q + hi - lo > room:
                return i, q
            out[q : q + hi - lo] = src[lo:hi]
            q += hi - lo
        elif counts[i] != 0:
            end = decode_native(fns, zstd_ctx, buffers, c, src, lo, hi, out, q, room)
            if end < 0:
                return i, q
            q = end
        out_ends[i] = q
    return n, q


@kernel(inline="always")
def decode_native(
    fns: Arr,
    zstd_ctx: int,
    buffers: Arr,
    codec: int,
    src: Arr,
    lo: int,
    hi: int,
    out: Arr,
    q: int,
    room: int,
) -> int:
    """One lz4 or zstd payload ``src[lo:hi]`` decoded into ``out`` from ``q``, below ``room``
    (arguments as ``lay_out_native``'s): the end of what it wrote, -1 when it is the caller's (any
    other codec, no room, anything the binding must decide: the module docstring)."""
    if codec == LZ4_CODEC and fns[0] != 0:
        return _lz4_frame(fns[0], src, lo, hi, out, q, room)
    if codec == ZSTD_CODEC and fns[1] != 0 and zstd_ctx != 0:
        return _zstd_frame(fns[1:], zstd_ctx, buffers, src, lo, hi, out, q, room)
    return -1


# --- finding the decoders ------------------------------------------------------------------------
@dataclass(frozen=True)
class Decoders:
    """The C decoders found in this process (0 for one not found)."""

    lz4_block: int
    zstd_reset: int
    zstd_stream: int
    zstd_is_error: int
    zstd_create: Any = None  # ctypes functions making and freeing a ZSTD_DCtx, or None
    zstd_free: Any = None

    @functools.cached_property
    def addresses(self) -> Arr:
        """What ``lay_out_native`` takes as ``fns`` (made once: ``lay_out`` runs per chunk)."""
        fns = (self.lz4_block, self.zstd_reset, self.zstd_stream, self.zstd_is_error)
        return np.array(fns, dtype=np.int64)

    @functools.cached_property
    def codecs(self) -> frozenset[int]:
        """The codec ids the kernel decodes."""
        ids = set()
        if self.lz4_block:
            ids.add(LZ4_CODEC)
        if self.zstd_stream and self.zstd_create is not None:
            ids.add(ZSTD_CODEC)
        return frozenset(ids)


def _library(module: str) -> ctypes.CDLL | None:
    """The shared library of the Python extension ``module`` (loaded as a library, its module
    not initialised), None when there is none."""
    with contextlib.suppress(ImportError, ValueError, AttributeError, OSError):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin and spec.origin.endswith((".so", ".pyd")):
            return ctypes.CDLL(spec.origin)
    return None


def _address_of(lib: ctypes.CDLL | None, name: str) -> int:
    if lib is None:
        return 0
    try:
        return int(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0)
    except AttributeError:
        return 0


@functools.cache
def decoders() -> Decoders:
    """The C decoders, looked up once per process."""
    lz4 = _library("lz4.frame._frame")
    zstd = _library("zstandard._cffi")
    names = ("ZSTD_DCtx_reset", "ZSTD_decompressStream", "ZSTD_isError")
    zstd_fns = [_address_of(zstd, n) for n in names]
    create = free = None
    if zstd is not None and all(zstd_fns):
        with contextlib.suppress(AttributeError):
            create, free = zstd.ZSTD_createDCtx, zstd.ZSTD_freeDCtx
            create.restype, create.argtypes = ctypes.c_void_p, []
            free.restype, free.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    reset, stream, is_error = zstd_fns
    return Decoders(_address_of(lz4, "LZ4_decompress_safe"), reset, stream, is_error, create, free)


class ZstdContext:
    """A thread's ``ZSTD_DCtx`` (``address``, 0 when there is none) and the scratch room of its
    stream buffers, freed with the thread's locals."""

    def __init__(self, found: Decoders) -> None:
        self._free = found.zstd_free
        self.address = int(found.zstd_create() or 0) if found.zstd_create is not None else 0
        self.buffers = np.zeros(6, np.int64)

    def __del__(self) -> None:
        if self.address and self._free is not None:
            self._free(self.address)
            self.address = 0


_local = threading.local()


def zstd_context() -> ZstdContext:
    """This thread's zstd decoding context."""
    ctx: ZstdContext | None = getattr(_local, "zstd", None)
    if ctx is None:
        ctx = _local.zstd = ZstdContext(decoders())
    return ctx
