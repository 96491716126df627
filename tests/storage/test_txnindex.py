"""AbortedTxn encoding and TransactionIndex: lazy file, ordering, search, checks, file handling."""

from __future__ import annotations

import struct
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from cleanerd.format import Record
from cleanerd.storage import (
    AbortedTxn,
    CorruptIndexError,
    LogSegment,
    PartitionLog,
    TransactionIndex,
    _segment as segment_module,
)
from cleanerd.topics import LogConfig

BASE = 100
INT64 = st.integers(-(2**63), 2**63 - 1)


def raw(version: int, *fields: int) -> bytes:
    return struct.pack(">h4q", version, *fields)


# -- AbortedTxn -----------------------------------------------------------------------------------


def test_aborted_txn_exact_bytes() -> None:
    txn = AbortedTxn(producer_id=7, first_offset=100, last_offset=250, last_stable_offset=90)
    assert txn.to_bytes() == bytes.fromhex(
        "00000000000000000007000000000000006400000000000000fa000000000000005a"
    )
    assert AbortedTxn.from_bytes(txn.to_bytes()) == txn


@given(INT64, INT64, INT64, INT64)
def test_aborted_txn_round_trip(pid: int, first: int, last: int, lso: int) -> None:
    txn = AbortedTxn(pid, first, last, lso)
    data = txn.to_bytes()
    assert len(data) == 34
    assert data == raw(0, pid, first, last, lso)
    assert AbortedTxn.from_bytes(data) == txn


def test_version_is_read_from_first_byte() -> None:
    fields = (1, 2, 3, 4)
    with pytest.raises(ValueError, match="unsupported AbortedTxn version 1"):
        AbortedTxn.from_bytes(raw(256, *fields))  # int16 256 = bytes 01 00
    with pytest.raises(ValueError, match="version 255"):
        AbortedTxn.from_bytes(raw(-1, *fields))
    # Kafka's quirk: only byte 0 is the version, so int16 5 (bytes 00 05) still reads as 0.
    assert AbortedTxn.from_bytes(raw(5, *fields)) == AbortedTxn(*fields)


def test_aborted_txn_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="34 bytes"):
        AbortedTxn.from_bytes(bytes(33))
    with pytest.raises(ValueError, match="int64"):
        AbortedTxn(2**63, 0, 0, 0)


# -- TransactionIndex -----------------------------------------------------------------------------


def make(tmp_path: Path, *txns: AbortedTxn, name: str = "a.txnindex") -> TransactionIndex:
    idx = TransactionIndex(tmp_path / name, BASE)
    for txn in txns:
        idx.append(txn)
    return idx


def test_file_created_lazily(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "a.txnindex", BASE)
    assert not idx.exists
    assert idx.all_aborted() == []
    assert idx.collect_aborted(0, 10**6) == ([], False)
    idx.sanity_check()
    idx.flush()
    idx.close()
    assert not idx.exists
    txn = AbortedTxn(1, BASE, BASE + 5, BASE)
    idx.append(txn)
    assert idx.exists
    assert idx.path.read_bytes() == txn.to_bytes()


def test_append_requires_increasing_last_offset(tmp_path: Path) -> None:
    idx = make(tmp_path, AbortedTxn(1, BASE, BASE + 10, BASE))
    with pytest.raises(ValueError, match="does not exceed"):
        idx.append(AbortedTxn(2, BASE, BASE + 10, BASE))
    with pytest.raises(ValueError, match="does not exceed"):
        idx.append(AbortedTxn(2, BASE, BASE + 9, BASE))
    with pytest.raises(ValueError, match="below base offset"):
        TransactionIndex(tmp_path / "b.txnindex", BASE).append(AbortedTxn(1, 0, BASE - 1, 0))
    idx.append(AbortedTxn(2, BASE + 3, BASE + 11, BASE))
    assert [t.last_offset for t in idx.all_aborted()] == [BASE + 10, BASE + 11]
    assert idx.path.stat().st_size == 2 * 34


def test_reopen_keeps_entries_and_order_rule(tmp_path: Path) -> None:
    txns = [AbortedTxn(i, BASE + 10 * i, BASE + 10 * i + 5, BASE + 10 * i) for i in range(4)]
    make(tmp_path, *txns).close()
    again = TransactionIndex(tmp_path / "a.txnindex", BASE)
    assert again.all_aborted() == txns
    with pytest.raises(ValueError, match="does not exceed"):
        again.append(AbortedTxn(9, BASE, BASE + 35, BASE))  # checked against loaded entries
    again.append(AbortedTxn(9, BASE, BASE + 36, BASE))
    again.close()
    assert TransactionIndex(tmp_path / "a.txnindex", BASE).all_aborted()[-1].last_offset == 136


def test_collect_aborted(tmp_path: Path) -> None:
    a = AbortedTxn(1, first_offset=100, last_offset=110, last_stable_offset=100)
    b = AbortedTxn(2, first_offset=105, last_offset=120, last_stable_offset=111)
    c = AbortedTxn(3, first_offset=108, last_offset=140, last_stable_offset=125)
    d = AbortedTxn(4, first_offset=150, last_offset=160, last_stable_offset=141)
    idx = make(tmp_path, a, b, c, d)
    assert idx.collect_aborted(0, 1000) == ([a, b, c, d], False)
    # last_offset >= fetch_offset
    assert idx.collect_aborted(111, 1000) == ([b, c, d], False)
    assert idx.collect_aborted(110, 1000) == ([a, b, c, d], False)
    # first_offset < upper_bound
    assert idx.collect_aborted(0, 142) == ([a, b, c], False)
    assert idx.collect_aborted(141, 155) == ([d], False)
    # complete at the first entry with LSO >= upper_bound; that entry is still collected ...
    assert idx.collect_aborted(0, 125) == ([a, b, c], True)
    # ... and later ones are not visited: c overlaps [0, 111) but b's LSO 111 stops the search
    assert idx.collect_aborted(0, 111) == ([a, b], True)
    assert idx.collect_aborted(0, 100) == ([], True)


def test_truncate(tmp_path: Path) -> None:
    txns = [AbortedTxn(i, BASE, BASE + 10 * (i + 1), BASE) for i in range(4)]  # 110..140
    idx = make(tmp_path, *txns)
    idx.truncate_to(BASE + 25)
    assert idx.all_aborted() == txns[:2]
    assert idx.path.stat().st_size == 2 * 34
    idx.truncate_to(BASE + 20)  # an entry exactly at the offset goes too
    assert idx.all_aborted() == txns[:1]
    idx.append(AbortedTxn(9, BASE, BASE + 15, BASE))  # appends continue after the cut
    idx.close()
    assert TransactionIndex(idx.path, BASE).all_aborted() == [
        txns[0],
        AbortedTxn(9, BASE, BASE + 15, BASE),
    ]
    idx.truncate_to(0)
    assert idx.all_aborted() == []
    assert idx.path.read_bytes() == b""


def test_sanity_length(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(raw(0, 1, 100, 110, 100) + b"\x00" * 5)
    idx = TransactionIndex(path, BASE)
    with pytest.raises(CorruptIndexError, match="not a multiple of 34") as info:
        idx.sanity_check()
    assert str(path) in str(info.value)
    with pytest.raises(CorruptIndexError, match="partial entry"):
        idx.append(AbortedTxn(2, 100, 120, 100))
    idx.truncate_to(10**9)  # cuts the partial entry away
    idx.sanity_check()


def test_sanity_last_offset_below_base(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(raw(0, 1, 100, 110, 100) + raw(0, 2, 50, 99, 50))
    with pytest.raises(CorruptIndexError, match="entry 1: last offset 99 is below") as info:
        TransactionIndex(path, BASE).sanity_check()
    assert str(path) in str(info.value)


def test_bad_version_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(raw(0, 1, 100, 110, 100) + raw(256, 2, 100, 120, 100))
    idx = TransactionIndex(path, BASE)  # opening does not read the file
    with pytest.raises(
        CorruptIndexError, match="entry 1: unsupported AbortedTxn version 1"
    ) as info:
        idx.sanity_check()
    assert str(path) in str(info.value)
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.all_aborted()


def test_rename_then_append(tmp_path: Path) -> None:
    a, b = AbortedTxn(1, 100, 110, 100), AbortedTxn(2, 100, 120, 100)
    idx = make(tmp_path, a, name="x.txnindex.cleaned")
    old = idx.path
    new = tmp_path / "x.txnindex.swap"
    idx.rename_to(new)
    assert idx.path == new
    assert not old.exists()
    idx.append(b)
    idx.flush()
    idx.close()
    assert not old.exists()
    assert new.read_bytes() == a.to_bytes() + b.to_bytes()


def test_rename_and_delete_without_file(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "y.txnindex.cleaned", BASE)
    idx.rename_to(tmp_path / "y.txnindex")  # nothing on disk yet: only the name changes
    assert not idx.exists
    assert not idx.delete()
    idx.append(AbortedTxn(1, 100, 110, 100))
    assert (tmp_path / "y.txnindex").exists()
    assert idx.delete()
    assert not idx.exists
    assert idx.all_aborted() == []


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 20), st.integers(-5, 30)),
        max_size=25,
    ),
    st.integers(0, 600),
    st.integers(0, 600),
)
def test_collect_matches_reading_the_file(
    steps: list[tuple[int, int, int]], fetch: int, upper: int
) -> None:
    """Entries written, read back from raw bytes, and searched by kafka-format.md §3.5's rules."""
    with tempfile.TemporaryDirectory() as tmp:
        idx = TransactionIndex(Path(tmp) / "p.txnindex", 0)
        txns: list[AbortedTxn] = []
        last = 0
        for back, step, lso_delta in steps:
            last += step
            txn = AbortedTxn(len(txns), max(0, last - back), last, max(0, last + lso_delta))
            idx.append(txn)
            txns.append(txn)
        idx.close()
        assert idx.exists == bool(txns)  # created by the first append only
        data = idx.path.read_bytes() if txns else b""
        decoded = [AbortedTxn.from_bytes(data[i : i + 34]) for i in range(0, len(data), 34)]
        assert decoded == txns
        found, complete = TransactionIndex(Path(tmp) / "p.txnindex", 0).collect_aborted(
            fetch, upper
        )
        stop = next((i for i, t in enumerate(txns) if t.last_stable_offset >= upper), None)
        visited = txns if stop is None else txns[: stop + 1]
        assert complete == (stop is not None)
        assert found == [t for t in visited if t.last_offset >= fetch and t.first_offset < upper]


def test_a_txn_index_longer_than_its_bound_is_not_read_and_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte of nothing beside a small log
    index = TransactionIndex(path, 0, max_bytes=lambda: 4096)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptIndexError, match="longer than 4096 bytes"):
            index.sanity_check()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_segment_bounds_its_txn_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By the larger of its log's size and the floor (a cleaning may keep the entries of aborted
    transactions whose records it removed, so the log alone is no bound)."""
    monkeypatch.setattr(segment_module, "TXN_INDEX_MIN_BOUND", 1024)
    log = PartitionLog.create(tmp_path / "t-0", LogConfig())
    log.append([Record(0, 1000, b"k", b"v" * 50)])
    log.roll()
    log.close()
    first = log.segments[0]
    path = first.txn_index.path
    path.write_bytes(bytes(1024))  # within the floor, past the log: loaded (and checked)
    fresh = LogSegment(tmp_path / "t-0", 0, LogConfig())
    with pytest.raises(CorruptIndexError, match="not a multiple of 34"):
        fresh.txn_index.sanity_check()
    path.write_bytes(bytes(1025))
    fresh = LogSegment(tmp_path / "t-0", 0, LogConfig())
    with pytest.raises(CorruptIndexError, match="longer than 1024 bytes"):
        fresh.txn_index.sanity_check()
    fresh.close()
    PartitionLog(tmp_path / "t-0", LogConfig()).close()  # a writer's open rebuilds it
    assert not path.exists() or path.stat().st_size == 0
