"""The touched bitmap's two walks (``_offset_map._touched``): ``clear_touched`` empties exactly
the marked slots and counts the keys among them, ``map_offsets`` lists the offsets the marked
slots hold. Both read ahead of the slot they are on, so the cases straddle that distance: fewer
marks than it, many more, marks on empty slots and on bits past the table's end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cleanerd.compaction._offset_map._table import SLOT_H1, SLOT_H2, SLOT_OFFSET
from cleanerd.compaction._offset_map._touched import clear_touched, map_offsets

Arr = np.ndarray[Any, Any]


def _table(slots: int, keyed: Arr, marked: Arr) -> tuple[Arr, Arr]:
    """A 3-column table with a key in the ``keyed`` slots (offset = slot * 7) and a bitmap with
    one spare word whose bits ``marked`` sets (some of them past the table)."""
    tab = np.zeros((slots, 3), dtype=np.uint64)
    tab[keyed, SLOT_H1] = np.arange(1, keyed.size + 1, dtype=np.uint64)
    tab[keyed[::2], SLOT_H1] = 0  # a key whose first hash word is 0 is still a key
    tab[keyed, SLOT_H2] = 5
    tab[keyed, SLOT_OFFSET] = keyed.astype(np.uint64) * np.uint64(7)
    touched = np.zeros((slots + 63) // 64 + 1, dtype=np.uint64)
    for pos in marked:
        touched[pos // 64] |= np.uint64(1) << np.uint64(pos % 64)
    return tab, touched


@settings(max_examples=60)
@given(
    slots=st.integers(1, 3000),
    data=st.data(),
)
def test_walks_see_exactly_the_marked_slots(slots: int, data: st.DataObject) -> None:
    keyed = np.array(
        sorted(data.draw(st.sets(st.integers(0, slots - 1), max_size=min(slots, 300)))),
        dtype=np.int64,
    )
    extra = data.draw(st.sets(st.integers(0, ((slots + 63) // 64 + 1) * 64 - 1), max_size=200))
    marked = np.array(sorted(set(keyed.tolist()) | extra), dtype=np.int64)
    tab, touched = _table(slots, keyed, marked)
    in_table = marked[marked < slots]
    held = in_table[(tab[in_table, SLOT_H1] != 0) | (tab[in_table, SLOT_H2] != 0)]
    expected = np.sort(tab[held, SLOT_OFFSET].astype(np.int64))

    out = np.full(held.size + 3, -1, dtype=np.int64)
    assert map_offsets(tab, touched, out) == held.size
    assert np.array_equal(np.sort(out[: held.size]), expected)
    assert (out[held.size :] == -1).all()

    short = np.full(held.size // 2, -1, dtype=np.int64)  # room for half: the count is still all
    assert map_offsets(tab, touched, short) == held.size
    assert np.isin(short, expected).all()

    assert clear_touched(tab, touched) == held.size
    assert not tab.any()
    assert not touched.any()


@pytest.mark.parametrize("keys", [0, 1, 15, 16, 17, 5000])
def test_an_unmarked_key_stays_and_is_not_counted(keys: int) -> None:
    rng = np.random.default_rng(keys)
    slots = 20000
    keyed = np.sort(rng.choice(slots, keys + 1, replace=False))
    left = keyed[-1]  # the one key the bitmap does not know
    tab, touched = _table(slots, keyed, keyed[:-1])
    assert clear_touched(tab, touched) == keys
    assert tab[left, SLOT_H2] == 5
    tab[left] = 0
    assert not tab.any()


def test_a_bitmap_smaller_than_the_table_is_refused() -> None:
    tab = np.zeros((65, 3), dtype=np.uint64)
    with pytest.raises(ValueError, match="bitmap is smaller"):
        clear_touched(tab, np.zeros(1, dtype=np.uint64))
