"""LZ4 frames decoded in a kernel, for laying out the payloads of a chunk's lz4 batches without
the GIL (docs/kafka-format.md §2.5.3: Kafka writes one LZ4 frame per batch, independent blocks
of at most 64 KiB, no checksums but the header's).

``lay_out_lz4`` decodes batch after batch into the payload buffer and stops at the first one it
does not take: another codec, a frame with any feature Kafka does not write (linked blocks,
block or content checksums, a content size, a dictionary id, skippable frames, bytes after the
end mark), a header checksum that does not match, a block that breaks any of the LZ4 block
format's end-of-block rules as the reference decoder checks them (literals only at the end, the
last 5 bytes literals, no match starting in the last 12; the checks of every liblz4 version
since 1.9, the stricter where they differ), an offset of 0 or before the block, or no room
left. The caller then decodes that batch with the lz4 library (``format._codecs``), which
either takes it or says why not, and goes on from the next. So what the kernel decodes is
exactly what the library would, and everything else is the library's to decide; a frame's
bytes are only ever read within ``[start, end)`` and written within the room given.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from cleanerd._kernel import kernel

Arr = npt.NDArray[Any]

LZ4_CODEC = 3  # the attributes' codec id of lz4 (format._header)
_MAGIC = 0x184D2204
_M32 = 0xFFFFFFFF
_PRIME1 = 2654435761
_PRIME2 = 2246822519
_PRIME3 = 3266489917
_PRIME5 = 374761393
_MFLIMIT = 12  # no match starts within this many bytes of a block's end
_LAST_LITERALS = 5  # the last bytes of a block are literals
_RUN_MASK = 15


@kernel()
def header_checksum(b0: int, b1: int) -> int:
    """The frame header's checksum byte of a 2-byte descriptor (FLG, BD): the second byte of
    xxHash32 (seed 0) of the two bytes."""
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
def _block(src: Arr, ip: int, iend: int, out: Arr, op0: int, room: int, block_max: int) -> int:
    """Decode the LZ4 block ``src[ip:iend]`` into ``out`` from ``op0``: the end of what it wrote,
    -1 when the reference decoder must decide (see the module docstring), -2 when it needs to
    write at or past ``room``."""
    oend = op0 + block_max
    op = op0
    while True:
        if ip >= iend:
            return -1
        token = int(src[ip])
        ip += 1
        lit = token >> 4
        if lit == _RUN_MASK:
            while True:
                if ip >= iend - _RUN_MASK:
                    return -1
                s = int(src[ip])
                ip += 1
                lit += s
                if ip >= iend - _RUN_MASK:
                    return -1
                if s != 255:
                    break
        cpy = op + lit
        if ip + lit > iend:
            return -1
        if cpy > oend - _MFLIMIT or ip + lit > iend - (2 + 1 + _LAST_LITERALS):
            if ip + lit != iend or cpy > oend:  # only the last sequence ends there
                return -1
            if cpy > room:
                return -2
            out[op:cpy] = src[ip : ip + lit]
            return cpy
        if cpy > room:
            return -2
        out[op:cpy] = src[ip : ip + lit]
        op = cpy
        ip += lit
        offset = int(src[ip]) | (int(src[ip + 1]) << 8)
        ip += 2
        if offset == 0 or offset > op - op0:
            return -1
        ml = token & 15
        if ml == 15:
            while True:
                s = int(src[ip])
                ip += 1
                ml += s
                if ip > iend - _LAST_LITERALS:
                    return -1
                if s != 255:
                    break
        ml += 4
        cpy = op + ml
        if cpy > oend - _LAST_LITERALS:
            return -1
        if cpy > room:
            return -2
        m = op - offset
        for j in range(ml):  # byte by byte: a match may overlap what it copies
            out[op + j] = out[m + j]
        op = cpy


@kernel()
def _frame(src: Arr, ip: int, iend: int, out: Arr, op0: int, room: int) -> int:
    """Decode the LZ4 frame ``src[ip:iend]`` into ``out`` from ``op0``: as ``_block``."""
    if iend - ip < 7:
        return -1
    magic = (
        int(src[ip]) | (int(src[ip + 1]) << 8) | (int(src[ip + 2]) << 16) | (int(src[ip + 3]) << 24)
    )
    flg = int(src[ip + 4])
    bd = int(src[ip + 5])
    # version 01, independent blocks, nothing else; BD: a block size of 64 KiB to 4 MiB
    if magic != _MAGIC or flg != 0x60 or bd & 0x8F or (bd >> 4) < 4:
        return -1
    if int(src[ip + 6]) != header_checksum(flg, bd):
        return -1
    block_max = 1 << (8 + 2 * (bd >> 4))
    ip += 7
    op = op0
    while True:
        if ip + 4 > iend:
            return -1
        size = (
            int(src[ip])
            | (int(src[ip + 1]) << 8)
            | (int(src[ip + 2]) << 16)
            | (int(src[ip + 3]) << 24)
        )
        ip += 4
        if size == 0:  # the end mark: the frame must end the payload
            return op if ip == iend else -1
        raw = size & 0x80000000
        size &= 0x7FFFFFFF
        if size > block_max or ip + size > iend:
            return -1
        if raw:
            if op + size > room:
                return -2
            out[op : op + size] = src[ip : ip + size]
            op += size
        else:
            op = _block(src, ip, ip + size, out, op, room, block_max)
            if op < 0:
                return op
        ip += size


@kernel(nogil=True)
def lay_out_lz4(
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
) -> tuple[int, int]:
    """Lay out the payloads ``src[starts[i]:ends[i]]`` from batch ``first`` on into ``out`` from
    ``q``: uncompressed ones copied, lz4 ones decoded, a compressed batch with no records empty
    (Kafka never decompresses it); each batch's end in ``out`` goes to ``out_ends``. A payload
    decodes to at most ``limit`` bytes, all of them to at most ``cap``.

    Returns ``(i, q)``: the first batch not laid out (the caller's, see the module docstring;
    ``len(starts)`` when none is left) and where the next payload goes in ``out``.
    """
    n = starts.shape[0]
    if min(ends.shape[0], codecs.shape[0], counts.shape[0], out_ends.shape[0]) < n:
        raise ValueError("lay_out_lz4: the batch columns differ in length")
    if first < 0 or q < 0 or q > out.shape[0]:
        raise ValueError("lay_out_lz4: first or q out of range")
    for i in range(first, n):
        lo = starts[i]
        hi = ends[i]
        if not 0 <= lo <= hi <= src.shape[0]:
            raise ValueError("lay_out_lz4: a payload lies outside the segment")
        room = min(out.shape[0], cap, q + limit)
        c = codecs[i]
        if c == 0:
            if q + hi - lo > room:
                return i, q
            out[q : q + hi - lo] = src[lo:hi]
            q += hi - lo
        elif counts[i] == 0:
            pass
        elif c == LZ4_CODEC:
            end = _frame(src, lo, hi, out, q, room)
            if end < 0:
                return i, q
            q = end
        else:
            return i, q
        out_ends[i] = q
    return n, q
