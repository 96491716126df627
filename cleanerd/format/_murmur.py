"""MurmurHash3 x64 128 (seed 0) of key bytes in place, callable from other numba kernels.

``murmur3_128_at`` takes a raw pointer so the record index can hash each key as it parses it
(see ``pointer.data_ptr``); ``mmh3.hash128(key, 0, True)`` gives the same value.

Words are read with one unaligned load each (``pointer.load_le64``), the tail too: its last
word is the 8 bytes that end where the key ends, shifted, so a 10-byte key costs two loads, not
ten. A tail shorter than a word reads bytes before the key (in the buffer, which starts at the
pointer) when there are 8 of them; only a key within the buffer's first 7 bytes goes byte by
byte.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.format._pointer import Ptr, data_ptr, load_le64

Arr = npt.NDArray[Any]

# MurmurHash3 x64 128 ------------------------------------------------------------------------
_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)


@kernel()
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@kernel()
def _fmix(k: np.uint64) -> np.uint64:
    k ^= k >> np.uint64(33)
    k *= _M1
    k ^= k >> np.uint64(33)
    k *= _M2
    k ^= k >> np.uint64(33)
    return k


@kernel(nogil=True)
def murmur3_128(buf: Arr, pos: int, length: int) -> tuple[np.uint64, np.uint64]:
    """MurmurHash3 x64 128, seed 0, of ``buf[pos:pos+length]``: (h1, h2)."""
    return murmur3_128_at(data_ptr(buf), pos, length)


@kernel()
def murmur3_128_at(buf: Ptr, pos: int, length: int) -> tuple[np.uint64, np.uint64]:
    h1 = np.uint64(0)
    h2 = np.uint64(0)
    nblocks = length // 16
    for i in range(nblocks):
        k1 = load_le64(buf, pos + 16 * i)
        k2 = load_le64(buf, pos + 16 * i + 8)
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    tail = pos + 16 * nblocks
    rem = length & 15
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    if rem > 8:
        # bytes tail+8 .. tail+rem-1: the top of the word that ends at the key's end
        k2 = load_le64(buf, tail + rem - 8) >> np.uint64(8 * (16 - rem))
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
    if rem > 0:
        if rem >= 8:
            k1 = load_le64(buf, tail)
        elif tail + rem >= 8:
            k1 = load_le64(buf, tail + rem - 8) >> np.uint64(8 * (8 - rem))
        else:
            for i in range(rem - 1, -1, -1):
                k1 ^= np.uint64(buf[tail + i]) << np.uint64(8 * i)
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
    h1 ^= np.uint64(length)
    h2 ^= np.uint64(length)
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return h1, h2
