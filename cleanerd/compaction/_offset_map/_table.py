"""The offset map's slot table at numba level: its layout and its one Robin Hood probe.

``OffsetMap``'s own kernels and the fused pass-1/pass-2 kernels (``_fill``, ``_touched``,
``_filter.decide_records``) all probe through the functions here, so a map filled by either
answers the other exactly: same hash normalisation, home slot, Robin Hood order and packed
offsets (``_map`` says why each is so).

The functions take the table flat (``t``: a 1-D view or a raw pointer, slot ``pos`` at
``pos * width``), so a kernel holding a pointer pays no reference count per call, and those on
the per-record path are inlined into each caller (``inline="always"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cleanerd._kernel import intrinsic, kernel
from cleanerd.compaction._strategy import wins

ZERO_HASH_REMAP = np.uint64(0x9E3779B97F4A7C15)
# columns of a slot; a kernel sees the table flat, slot ``pos`` at ``pos * width``
SLOT_H1, SLOT_H2, SLOT_OFFSET, SLOT_VERSION = 0, 1, 2, 3


@kernel(nogil=True, inline="always")
def normalize(h1: np.uint64, h2: np.uint64) -> tuple[np.uint64, np.uint64]:
    """The stored form of a key hash: (0, 0) marks an empty slot, so a real one is remapped."""
    if h1 == 0 and h2 == 0:
        return h1, ZERO_HASH_REMAP
    return h1, h2


@kernel(nogil=True, inline="always")
def is_full(size: int, max_entries: int) -> bool:
    """Kafka's full rule: at ``max_entries`` the map takes no put, not even of a key it holds."""
    return size >= max_entries


def _mul_high_typing(typingctx: Any, a: Any, b: Any) -> Any:
    """The high 64 bits of the 128-bit product of two uint64."""
    from llvmlite import ir  # type: ignore[import-untyped]  # noqa: PLC0415 (only to compile)
    from numba import types  # noqa: PLC0415

    if not isinstance(a, types.Integer) or not isinstance(b, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wide = ir.IntType(128)
        x = context.cast(builder, args[0], signature.args[0], types.uint64)
        y = context.cast(builder, args[1], signature.args[1], types.uint64)
        product = builder.mul(builder.zext(x, wide), builder.zext(y, wide))
        return builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))

    return types.uint64(a, b), codegen


_mul_high: Any = intrinsic(_mul_high_typing)


@kernel(nogil=True, inline="always")
def home_slot(h1: np.uint64, slots: int) -> Any:
    """Home slot of a key: ``h1`` is a murmur3 output word, already uniform, so its share of
    ``slots`` (the high word of ``h1 * slots``) is as uniform as ``h1 % slots`` and costs a
    multiply rather than a 64-bit division, which every probe step pays for its resident."""
    return np.int64(_mul_high(h1, np.uint64(slots)))


@kernel(nogil=True)
def _dist(pos: int, h1: np.uint64, slots: int) -> Any:
    """Distance of slot ``pos`` from the home slot of hash word ``h1``."""
    home = home_slot(h1, slots)
    return pos - home if pos >= home else pos + slots - home


@kernel(nogil=True, inline="always")
def find_slot(t: Any, width: int, slots: int, h1: np.uint64, h2: np.uint64) -> Any:
    """Slot of the (normalised) hash, or -1: an absent key stops at the first richer resident."""
    pos = home_slot(h1, slots)
    for i in range(slots):
        r1 = t[pos * width + SLOT_H1]
        r2 = t[pos * width + SLOT_H2]
        if r1 == h1 and r2 == h2:
            return pos
        if (r1 == 0 and r2 == 0) or _dist(pos, r1, slots) < i:
            return -1  # Robin Hood: the key would have displaced this resident
        pos += 1
        if pos == slots:
            pos = 0
    return -1


@kernel(nogil=True, inline="always")
def mark_slot(touched: Any, pos: int) -> None:
    """Set slot ``pos``'s bit in a touched bitmap (``_touched.touched_bitmap``)."""
    touched[pos >> 6] |= np.uint64(1) << np.uint64(pos & 63)


@kernel(nogil=True, inline="always")
def stored_entry(t: Any, width: int, pos: int, versioned: bool) -> tuple[Any, Any, bool]:
    """``(offset, version, has_version)`` of slot ``pos``; the offset's sign is has_version."""
    packed = np.int64(t[pos * width + SLOT_OFFSET])
    if not versioned:
        return packed, 0, False
    if packed >= 0:
        return packed, np.int64(t[pos * width + SLOT_VERSION]), True
    return ~packed, np.int64(t[pos * width + SLOT_VERSION]), False


@kernel(nogil=True, inline="always")
def insert_key(
    t: Any,
    width: int,
    slots: int,
    h1: np.uint64,
    h2: np.uint64,
    offset: int,
    version: int,
    has: bool,
    versioned: bool,
    touched: Any,
    mark: bool,
) -> int:
    """Put one record (normalised hash); returns 1 if it added a key, 0 if the key was present.

    The caller guarantees a free slot (``not is_full``). With ``mark``, every slot written is
    marked in ``touched`` so a clear can cost the slots used rather than the whole table.
    """
    packed = np.uint64(offset if (has or not versioned) else ~offset)
    ver = np.uint64(version)
    pos = home_slot(h1, slots)
    d = 0
    while True:
        o = pos * width
        r1 = t[o + SLOT_H1]
        r2 = t[o + SLOT_H2]
        if r1 == 0 and r2 == 0:
            break
        if r1 == h1 and r2 == h2:
            if not versioned:
                t[o + SLOT_OFFSET] = packed  # Kafka: the later put always replaces
            else:
                so, sv, sh = stored_entry(t, width, pos, versioned)
                if wins(offset, version, has, so, sv, sh):
                    t[o + SLOT_OFFSET] = packed
                    t[o + SLOT_VERSION] = ver
            return 0
        rd = _dist(pos, r1, slots)
        if rd < d:
            # key absent: take this slot and carry the resident on (no equality checks needed)
            t[o + SLOT_H1] = h1
            t[o + SLOT_H2] = h2
            p = t[o + SLOT_OFFSET]
            t[o + SLOT_OFFSET] = packed
            if versioned:
                pv = t[o + SLOT_VERSION]
                t[o + SLOT_VERSION] = ver
                ver = pv
            if mark:
                mark_slot(touched, pos)
            h1, h2, packed = r1, r2, p
            d = rd
        pos += 1
        d += 1
        if pos == slots:
            pos = 0
    o = pos * width
    t[o + SLOT_H1] = h1
    t[o + SLOT_H2] = h2
    t[o + SLOT_OFFSET] = packed
    if versioned:
        t[o + SLOT_VERSION] = ver
    if mark:
        mark_slot(touched, pos)
    return 1


@kernel(nogil=True, inline="always")
def retains(
    t: Any,
    width: int,
    slots: int,
    h1: np.uint64,
    h2: np.uint64,
    offset: int,
    version: int,
    has: bool,
    versioned: bool,
) -> bool:
    """Whether a record (normalised hash) wins its key; a key the map lacks is kept.

    Offset strategy: Kafka's ``offset >= found``. Timestamp/header: the record is the stored
    winner (same offset), or it beats it. The second case only arises for a record the map
    never saw (e.g. from the clean section); keeping it never loses the true winner.
    """
    pos = find_slot(t, width, slots, h1, h2)
    if pos < 0:
        return True
    so, sv, sh = stored_entry(t, width, pos, versioned)
    if not versioned:
        return bool(offset >= so)  # Kafka's `offset >= found`
    return offset == so or wins(offset, version, has, so, sv, sh)
