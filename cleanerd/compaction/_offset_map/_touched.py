"""The touched bitmap: which slots of an ``OffsetMap``'s table a map build wrote.

``_fill.put_cached`` marks every slot it writes (``_table.insert_key`` with ``mark``), one bit
per slot, and the cleaner keeps the bitmap from one clean to the next. With it the map's upkeep
costs the keys the last build put rather than the whole table: ``clear_touched`` empties just
those slots (instead of a memset of up to 128 MiB), and ``map_offsets`` lists the offsets they
hold (the winners ``_build`` flags in the record cache).

Both reach the table through a raw pointer (``kernels.data_ptr``), as ``_fill``'s kernels do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.compaction._offset_map._map import OffsetMap
from cleanerd.compaction._offset_map._table import SLOT_H1, SLOT_H2, SLOT_OFFSET
from cleanerd.format import data_ptr as _data_ptr, kernels as k

Arr = npt.NDArray[Any]


def touched_bitmap(omap: OffsetMap) -> Arr:
    """A bitmap with one bit per slot of ``omap``, for ``put_cached`` and ``clear_touched``."""
    return np.zeros((omap.slots + 63) // 64, dtype=np.uint64)


_AHEAD = 16
"""How many marked slots ahead of the one it reads a walk of the bitmap asks the CPU for: the
marked slots lie far apart in a table larger than the caches, so each one is a cache miss, and
with the next ones already on their way the walk runs at the memory's rate, not its latency."""


@kernel(nogil=True)
def clear_touched(tab: Arr, touched: Arr) -> int:
    """Empty the slots marked in ``touched`` and unmark them; returns how many held a key.

    A table has exactly as many occupied slots as its map's size, so when the count equals the
    size, every key was in a marked slot and the table is empty again, at the cost of the keys
    rather than of the whole table (a 128 MiB memset). Otherwise the caller clears the table.
    """
    width = tab.shape[1]
    slots = tab.shape[0]
    if touched.shape[0] * 64 < slots:
        raise ValueError("clear_touched: the bitmap is smaller than the table")
    t = _data_ptr(tab)
    ring = np.empty(_AHEAD, dtype=np.int64)  # marked slots asked for, not yet cleared
    queued = 0
    n = 0
    for w in range(touched.shape[0]):
        word = touched[w]
        if word == 0:
            continue
        touched[w] = 0
        b = 0
        while word:
            if word & np.uint64(1):
                pos = w * 64 + b
                if pos < slots:
                    k.prefetch_write(t, pos * width)
                    if queued >= _AHEAD:
                        n += _clear_slot(t, ring[queued % _AHEAD] * width, width)
                    ring[queued % _AHEAD] = pos
                    queued += 1
            word >>= np.uint64(1)
            b += 1
    for q in range(max(queued - _AHEAD, 0), queued):
        n += _clear_slot(t, ring[q % _AHEAD] * width, width)
    return n


@kernel(inline="always")
def _clear_slot(t: Any, o: int, width: int) -> int:
    """Zero the slot at ``o``; 1 if it held a key."""
    held = 1 if t[o + SLOT_H1] != 0 or t[o + SLOT_H2] != 0 else 0
    for c in range(width):
        t[o + c] = 0
    return held


@kernel(nogil=True)
def map_offsets(tab: Arr, touched: Arr, out: Arr) -> int:
    """Write the offsets held by the slots marked in ``touched`` (offset strategy, unsorted)
    into ``out``, as many as it has room for; returns how many slots held one. The caller gives
    the room (the map's size): a kernel returning an array it made would need numba's Python
    side to hand it over, which imports the numba package (0.2 s of a short command)."""
    t = _data_ptr(tab)
    width = tab.shape[1]
    slots = tab.shape[0]
    room = out.shape[0]
    ring = np.empty(_AHEAD, dtype=np.int64)  # marked slots asked for, not yet read
    queued = 0
    m = 0
    for w in range(touched.shape[0]):
        word = touched[w]
        b = 0
        while word:
            if word & np.uint64(1):
                pos = w * 64 + b
                if pos < slots:
                    k.prefetch_read(t, pos * width)
                    if queued >= _AHEAD:
                        m = _take_offset(t, ring[queued % _AHEAD] * width, out, m, room)
                    ring[queued % _AHEAD] = pos
                    queued += 1
            word >>= np.uint64(1)
            b += 1
    for q in range(max(queued - _AHEAD, 0), queued):
        m = _take_offset(t, ring[q % _AHEAD] * width, out, m, room)
    return m


@kernel(inline="always")
def _take_offset(t: Any, o: int, out: Arr, m: int, room: int) -> int:
    """The slot at ``o``'s offset into ``out[m]`` if it holds a key (and there is room); the
    count of offsets found so far."""
    if t[o + SLOT_H1] != 0 or t[o + SLOT_H2] != 0:
        if m < room:
            out[m] = np.int64(t[o + SLOT_OFFSET])
        return m + 1
    return m
