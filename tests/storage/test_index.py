"""OffsetIndex and TimeIndex: Kafka's byte layout, lookup semantics, checks and file handling."""

from __future__ import annotations

import struct
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from cleanerd.storage import OffsetIndex, TimeIndex
from cleanerd.storage._errors import CorruptIndexError, OffsetOutOfRangeError

BASE = 1000


def offset_bytes(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def time_bytes(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


# -- on-disk layout -------------------------------------------------------------------------------


def test_offset_index_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    idx = OffsetIndex(path, BASE)
    idx.append(BASE, 0)
    idx.append(BASE + 50, 4096)
    idx.append(BASE + 2**31 - 1, 2**31 - 1)
    idx.close()
    assert path.read_bytes() == bytes.fromhex(
        "00000000 00000000  00000032 00001000  7fffffff 7fffffff".replace(" ", "")
    )


def test_time_index_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.timeindex"
    idx = TimeIndex(path, BASE)
    assert idx.maybe_append(1_700_000_000_000, BASE + 5)
    assert idx.maybe_append(1_700_000_000_001, BASE + 300)
    idx.close()
    assert path.read_bytes() == bytes.fromhex(
        "0000018bcfe56800 00000005  0000018bcfe56801 0000012c".replace(" ", "")
    )


def test_missing_file_is_empty_and_created_lazily(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, BASE)
    assert idx.entries == 0
    assert idx.last_offset == BASE
    assert idx.lookup(BASE + 10) == (BASE, 0)
    idx.close()
    assert not path.exists()
    idx.append(BASE + 1, 10)
    idx.close()
    assert path.stat().st_size == 8


def test_flush_creates_empty_file(tmp_path: Path) -> None:
    # Kafka expects both index files of a segment, even with no entries.
    for cls, name in ((OffsetIndex, "a.index"), (TimeIndex, "a.timeindex")):
        path = tmp_path / name
        idx = cls(path, BASE)
        idx.flush()
        idx.close()
        assert path.read_bytes() == b""


def test_flush_writes_buffered_entries(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    idx = OffsetIndex(path, BASE)
    idx.append(BASE + 3, 7)
    idx.flush()
    assert path.read_bytes() == offset_bytes((3, 7))
    idx.close()


def test_reopen_keeps_entries(tmp_path: Path) -> None:
    opath, tpath = tmp_path / "a.index", tmp_path / "a.timeindex"
    oidx, tidx = OffsetIndex(opath, BASE), TimeIndex(tpath, BASE)
    for i in range(5):
        oidx.append(BASE + 10 * i, 100 * i)
        tidx.maybe_append(5000 + i, BASE + 10 * i)
    oidx.close()
    tidx.close()
    oidx, tidx = OffsetIndex(opath, BASE), TimeIndex(tpath, BASE)
    assert [oidx.entry(i) for i in range(oidx.entries)] == [
        (BASE + 10 * i, 100 * i) for i in range(5)
    ]
    assert [tidx.entry(i) for i in range(tidx.entries)] == [
        (5000 + i, BASE + 10 * i) for i in range(5)
    ]
    assert oidx.last_offset == BASE + 40
    assert tidx.last_entry == (5004, BASE + 40)
    with pytest.raises(IndexError):
        oidx.entry(5)
    oidx.append(BASE + 41, 401)  # appends continue after the loaded entries
    oidx.close()
    assert opath.stat().st_size == 6 * 8


def test_many_entries_grow_arrays_and_buffer(tmp_path: Path) -> None:
    # Enough entries to pass the initial array capacity and the write buffer several times.
    path = tmp_path / "a.index"
    idx = OffsetIndex(path, 0)
    n = 30_000
    for i in range(n):
        idx.append(3 * i + 1, 5 * i)
    idx.close()
    assert path.read_bytes() == offset_bytes(*((3 * i + 1, 5 * i) for i in range(n)))
    again = OffsetIndex(path, 0)
    assert again.entries == n
    assert again.lookup(3 * 12_345 + 2) == (3 * 12_345 + 1, 5 * 12_345)


# -- lookup -----------------------------------------------------------------------------------


def test_offset_lookup(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", BASE)
    for off, pos in ((BASE + 10, 100), (BASE + 20, 200), (BASE + 30, 300)):
        idx.append(off, pos)
    assert idx.lookup(BASE) == (BASE, 0)  # before the first entry
    assert idx.lookup(BASE + 9) == (BASE, 0)
    assert idx.lookup(0) == (BASE, 0)
    assert idx.lookup(BASE + 10) == (BASE + 10, 100)  # exact hit
    assert idx.lookup(BASE + 19) == (BASE + 10, 100)
    assert idx.lookup(BASE + 20) == (BASE + 20, 200)
    assert idx.lookup(BASE + 31) == (BASE + 30, 300)
    assert idx.lookup(2**80) == (BASE + 30, 300)  # huge targets do not overflow numpy


def test_time_lookup(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "a.timeindex", BASE)
    for ts, off in ((100, BASE + 1), (200, BASE + 5), (300, BASE + 9)):
        assert idx.maybe_append(ts, off)
    assert idx.lookup(99) == (-1, BASE)
    assert idx.lookup(-(2**80)) == (-1, BASE)
    assert idx.lookup(100) == (100, BASE + 1)
    assert idx.lookup(250) == (200, BASE + 5)
    assert idx.lookup(300) == (300, BASE + 9)
    assert idx.lookup(10**15) == (300, BASE + 9)


# -- full detection -------------------------------------------------------------------------------


def test_offset_index_full_at_max_entries(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=3 * 8 + 5)
    assert idx.max_entries == 3
    for i in range(3):
        assert not idx.is_full()
        idx.append(BASE + i, i)
    assert idx.is_full()
    with pytest.raises(ValueError, match="full"):
        idx.append(BASE + 3, 3)
    assert idx.entries == 3


def test_time_index_full_one_slot_early(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=3 * 12)
    assert idx.max_entries == 3
    idx.maybe_append(10, BASE)
    assert not idx.is_full()
    idx.maybe_append(20, BASE + 1)
    assert idx.is_full()
    with pytest.raises(ValueError, match="full"):
        idx.maybe_append(30, BASE + 2)
    assert idx.maybe_append(30, BASE + 2, skip_full_check=True)  # the reserved last slot
    assert idx.entries == 3
    with pytest.raises(ValueError, match="no slot"):
        idx.maybe_append(40, BASE + 3, skip_full_check=True)
    assert idx.entries == 3


def test_default_max_entries(tmp_path: Path) -> None:
    assert OffsetIndex(tmp_path / "a.index", 0).max_entries == 1310720
    assert TimeIndex(tmp_path / "a.timeindex", 0).max_entries == 873813
    with pytest.raises(ValueError, match="smaller than one entry"):
        OffsetIndex(tmp_path / "b.index", 0, max_index_size=7)


# -- append rules ---------------------------------------------------------------------------------


def test_offset_append_rejects_non_increasing(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", BASE)
    idx.append(BASE + 10, 100)
    with pytest.raises(ValueError, match="offsets must rise"):
        idx.append(BASE + 10, 200)
    with pytest.raises(ValueError, match="offsets must rise"):
        idx.append(BASE + 9, 200)
    with pytest.raises(ValueError, match="positions must not fall"):
        idx.append(BASE + 11, 99)
    assert idx.entries == 1
    idx.close()
    assert idx.path.read_bytes() == offset_bytes((10, 100))


def test_append_rejects_offsets_outside_relative_range(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", BASE)
    with pytest.raises(OffsetOutOfRangeError):
        idx.append(BASE - 1, 0)
    with pytest.raises(OffsetOutOfRangeError):
        idx.append(BASE + 2**31, 0)
    with pytest.raises(ValueError, match="int32"):
        idx.append(BASE, 2**31)
    tidx = TimeIndex(tmp_path / "a.timeindex", BASE)
    with pytest.raises(OffsetOutOfRangeError):
        tidx.maybe_append(5, BASE + 2**31)
    assert idx.entries == tidx.entries == 0


def test_time_index_ignores_non_increasing_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    idx = TimeIndex(path, BASE)
    assert not idx.maybe_append(-1, BASE)  # equal to the empty index's (-1, base)
    assert idx.entries == 0
    assert idx.maybe_append(0, BASE)
    assert idx.maybe_append(100, BASE + 5)
    assert not idx.maybe_append(100, BASE + 6)
    assert not idx.maybe_append(50, BASE + 7)
    assert idx.last_entry == (100, BASE + 5)
    with pytest.raises(ValueError, match="below the last entry"):
        idx.maybe_append(200, BASE + 4)
    assert idx.maybe_append(101, BASE + 5)  # equal offsets are allowed
    idx.close()
    assert path.read_bytes() == time_bytes((0, 0), (100, 5), (101, 5))


# -- truncate --------------------------------------------------------------------------------------


def test_offset_truncate(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    idx = OffsetIndex(path, BASE)
    for i in range(1, 6):
        idx.append(BASE + 10 * i, 100 * i)
    idx.truncate_to(BASE + 35)
    assert idx.entries == 3
    assert idx.last_offset == BASE + 30
    idx.truncate_to(BASE + 30)  # an exact hit is dropped too
    assert idx.last_offset == BASE + 20
    assert path.read_bytes() == offset_bytes((10, 100), (20, 200))
    idx.append(BASE + 25, 250)
    idx.close()
    assert list(map(OffsetIndex(path, BASE).entry, range(3))) == [
        (BASE + 10, 100),
        (BASE + 20, 200),
        (BASE + 25, 250),
    ]
    idx.truncate_to(BASE)
    assert idx.entries == 0
    assert idx.lookup(BASE + 100) == (BASE, 0)
    assert path.read_bytes() == b""


def test_time_truncate_by_offset(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    idx = TimeIndex(path, BASE)
    for ts, off in ((10, BASE + 1), (20, BASE + 5), (30, BASE + 5), (40, BASE + 9)):
        idx.maybe_append(ts, off)
    idx.truncate_to(BASE + 5)
    assert idx.last_entry == (10, BASE + 1)
    assert path.read_bytes() == time_bytes((10, 1))
    idx.truncate_to(BASE)
    assert idx.last_entry == (-1, BASE)
    assert path.read_bytes() == b""


# -- sanity checks ---------------------------------------------------------------------------------

OFFSET_CORRUPTIONS = {
    "length": (offset_bytes((1, 1)) + b"\x00", "not a multiple of 8"),
    "below base": (offset_bytes((-1, 0)), "below base"),
    "not increasing": (offset_bytes((1, 10), (1, 20)), "offset 1001 does not exceed"),
    "decreasing": (offset_bytes((2, 10), (1, 20), (3, 30)), "offset 1001 does not exceed"),
    "positions": (offset_bytes((1, 20), (2, 10)), "position 10 is below"),
    "negative position": (offset_bytes((1, -5), (2, 10)), "negative position"),
    # What a preallocated Kafka index of an active segment looks like: trailing zero slots.
    "preallocated": (offset_bytes((5, 100), (9, 200)) + bytes(80), "does not exceed"),
}


@pytest.mark.parametrize("case", sorted(OFFSET_CORRUPTIONS))
def test_offset_sanity_failures(tmp_path: Path, case: str) -> None:
    data, reason = OFFSET_CORRUPTIONS[case]
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError, match=reason) as info:
        OffsetIndex(path, BASE).sanity_check()
    assert str(path) in str(info.value)


TIME_CORRUPTIONS = {
    "length": (time_bytes((1, 1)) + bytes(11), "not a multiple of 12"),
    "last before first": (time_bytes((50, 1), (40, 2)), "last timestamp 40 is below first 50"),
    "below base": (time_bytes((50, -3)), "last offset 997 is below base"),
    "timestamps dip": (time_bytes((50, 1), (40, 2), (60, 3)), "timestamp 40 is below"),
    "offsets dip": (time_bytes((50, 5), (60, 2), (70, 6)), "offset 1002 is below"),
    "preallocated": (time_bytes((50, 5)) + bytes(36), "last timestamp 0 is below first 50"),
}


@pytest.mark.parametrize("case", sorted(TIME_CORRUPTIONS))
def test_time_sanity_failures(tmp_path: Path, case: str) -> None:
    data, reason = TIME_CORRUPTIONS[case]
    path = tmp_path / "00000000000000001000.timeindex"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError, match=reason) as info:
        TimeIndex(path, BASE).sanity_check()
    assert str(path) in str(info.value)


def test_valid_files_pass_sanity(tmp_path: Path) -> None:
    (tmp_path / "a.index").write_bytes(offset_bytes((0, 0), (4, 0), (9, 50)))
    (tmp_path / "a.timeindex").write_bytes(time_bytes((7, 0), (7, 3), (9, 3)))
    OffsetIndex(tmp_path / "a.index", BASE).sanity_check()
    TimeIndex(tmp_path / "a.timeindex", BASE).sanity_check()
    OffsetIndex(tmp_path / "missing.index", BASE).sanity_check()
    TimeIndex(tmp_path / "missing.timeindex", BASE).sanity_check()


def test_partial_slot_blocks_append_until_truncated(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(offset_bytes((1, 10)) + b"\x01\x02\x03")
    idx = OffsetIndex(path, BASE)
    assert idx.entries == 1  # whole slots only, like Kafka
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.append(BASE + 2, 20)
    idx.truncate_to(BASE + 100)  # cuts the partial slot away
    idx.sanity_check()
    idx.append(BASE + 2, 20)
    idx.close()
    assert path.read_bytes() == offset_bytes((1, 10), (2, 20))


# -- rename / delete -------------------------------------------------------------------------------


@pytest.mark.parametrize("flush_first", [False, True])
def test_rename_then_append(tmp_path: Path, flush_first: bool) -> None:
    old = tmp_path / "00000000000000001000.index.cleaned"
    new = tmp_path / "00000000000000001000.index.swap"
    idx = OffsetIndex(old, BASE)
    idx.append(BASE + 1, 10)
    if flush_first:
        idx.flush()
    idx.rename_to(new)
    assert idx.path == new
    assert not old.exists()
    idx.append(BASE + 2, 20)
    idx.close()
    assert not old.exists()
    assert new.read_bytes() == offset_bytes((1, 10), (2, 20))

    tnew = tmp_path / "t.timeindex"
    tidx = TimeIndex(tmp_path / "t.timeindex.cleaned", BASE)
    tidx.maybe_append(5, BASE)
    tidx.rename_to(tnew)
    tidx.maybe_append(6, BASE + 1)
    tidx.close()
    assert tnew.read_bytes() == time_bytes((5, 0), (6, 1))


def test_delete(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    idx = TimeIndex(path, BASE)
    idx.maybe_append(5, BASE)
    idx.flush()
    assert idx.delete()
    assert not path.exists()
    assert idx.entries == 0
    assert idx.last_entry == (-1, BASE)
    assert not idx.delete()


# -- properties against a brute-force model --------------------------------------------------------


@st.composite
def increasing_pairs(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Pairs with strictly rising first field and non-decreasing second field."""
    n = draw(st.integers(0, 60))
    firsts = sorted(draw(st.sets(st.integers(0, 2**31 - 1), min_size=n, max_size=n)))
    seconds = sorted(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)))
    return list(zip(firsts, seconds, strict=True))


@pytest.mark.slow
@settings(max_examples=150)
@given(
    pairs=increasing_pairs(),
    base=st.integers(0, 2**40),
    probes=st.lists(st.integers(-10, 2**31 + 10), max_size=30),
)
def test_offset_index_matches_brute_force(
    pairs: list[tuple[int, int]], base: int, probes: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.index"
        idx = OffsetIndex(path, base)
        for rel, pos in pairs:
            idx.append(base + rel, pos)
        idx.flush()
        idx.close()
        assert path.stat().st_size == 8 * len(pairs)
        reopened = OffsetIndex(path, base)
        reopened.sanity_check()
        assert reopened.entries == len(pairs)
        targets = probes + [r for r, _ in pairs] + [r - 1 for r, _ in pairs]
        for rel in targets:
            below = [(base + r, p) for r, p in pairs if r <= rel]
            assert reopened.lookup(base + rel) == (below[-1] if below else (base, 0))


@pytest.mark.slow
@settings(max_examples=150)
@given(
    pairs=increasing_pairs(),
    base=st.integers(0, 2**40),
    probes=st.lists(st.integers(-10, 2**31 + 10), max_size=30),
)
def test_time_index_matches_brute_force(
    pairs: list[tuple[int, int]], base: int, probes: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.timeindex"
        idx = TimeIndex(path, base)
        for ts, rel in pairs:
            assert idx.maybe_append(ts, base + rel)
        idx.flush()
        idx.close()
        assert path.stat().st_size == 12 * len(pairs)
        reopened = TimeIndex(path, base)
        reopened.sanity_check()
        assert reopened.last_entry == ((pairs[-1][0], base + pairs[-1][1]) if pairs else (-1, base))
        for ts in probes + [t for t, _ in pairs] + [t - 1 for t, _ in pairs]:
            below = [(t, base + r) for t, r in pairs if t <= ts]
            assert reopened.lookup(ts) == (below[-1] if below else (-1, base))


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_an_index_longer_than_segment_index_bytes_is_not_read_and_is_corrupt(
    tmp_path: Path, kind: type[OffsetIndex] | type[TimeIndex]
) -> None:
    """A sparse file claiming a gigabyte: loading reads one byte past the setting's bound, not
    the file, and the sanity check names the setting (the open then rebuilds the index)."""
    path = tmp_path / "00000000000000000000.index"
    with open(path, "wb") as f:
        f.truncate(1 << 30)
    tracemalloc.start()
    try:
        index = kind(path, 0, max_index_size=4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert index.entries == 0
    with pytest.raises(CorruptIndexError, match=r"longer than segment\.index\.bytes"):
        index.sanity_check()
    exact = tmp_path / "exact.index"
    exact.write_bytes(bytes(4096 // kind.ENTRY_SIZE * kind.ENTRY_SIZE))  # as Kafka preallocates
    assert kind(exact, 0, max_index_size=4096).entries == 4096 // kind.ENTRY_SIZE
