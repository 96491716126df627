"""The erasure ledger file: appends, a torn last line, the size bound, hostile content."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from cleanerd.storage import (
    LEDGER_FILE,
    MAX_LEDGER_BYTES,
    LedgerEntry,
    StorageError,
    append_ledger_entry,
    new_ledger_entry,
    read_ledger,
)
from cleanerd.storage._erasure_ledger import READ_LIMIT, compact_entries, merge


def entry(n: int, *, first: int | None = None, end: int | None = None) -> LedgerEntry:
    """The n-th cleaning: offsets [100 n, 100 n + 100), at 1000 n ms."""
    return new_ledger_entry(
        1_700_000_000_000 + 1000 * n,
        100 * n if first is None else first,
        100 * n + 100 if end is None else end,
        records_removed=n,
        tombstones_removed=1,
        bytes_before=1000,
        bytes_after=900,
        engine="local",
        strategy="offset",
    )


def test_append_then_read(tmp_path: Path) -> None:
    for n in range(3):
        append_ledger_entry(tmp_path, entry(n))
    ledger = read_ledger(tmp_path)
    assert ledger.entries == (entry(0), entry(1), entry(2))
    assert ledger.problems == ()
    first = json.loads((tmp_path / LEDGER_FILE).read_text().splitlines()[0])
    assert first["time"] == "2023-11-14T22:13:20.000Z"
    assert (first["first_dirty"], first["end"], first["records_removed"]) == (0, 100, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER_FILE]


def test_no_ledger_reads_as_empty(tmp_path: Path) -> None:
    ledger = read_ledger(tmp_path)
    assert (ledger.entries, ledger.problems) == ((), ())


def test_a_torn_last_line_is_ignored_then_cut_off(tmp_path: Path) -> None:
    append_ledger_entry(tmp_path, entry(0))
    path = tmp_path / LEDGER_FILE
    with path.open("ab") as f:
        f.write(entry(1).line()[:40])  # a crash in the middle of the next append
    assert read_ledger(tmp_path).entries == (entry(0),)
    assert read_ledger(tmp_path).problems == ()
    append_ledger_entry(tmp_path, entry(2))
    assert read_ledger(tmp_path).entries == (entry(0), entry(2))
    assert path.read_bytes() == entry(0).line() + entry(2).line()


def test_a_file_of_only_a_torn_line_is_replaced(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).write_bytes(b'{"v":1,"ti')
    append_ledger_entry(tmp_path, entry(5))
    assert (tmp_path / LEDGER_FILE).read_bytes() == entry(5).line()


def test_rotation_keeps_the_file_bounded_and_every_range(tmp_path: Path) -> None:
    count = 3 * MAX_LEDGER_BYTES // len(entry(0).line())
    for n in range(count):
        append_ledger_entry(tmp_path, entry(n))
        assert (tmp_path / LEDGER_FILE).stat().st_size <= MAX_LEDGER_BYTES
    entries = read_ledger(tmp_path).entries
    assert read_ledger(tmp_path).problems == ()
    assert entries[-1] == entry(count - 1)  # the newest as written
    assert sum(e.cleanings for e in entries) == count  # older ones merged, none forgotten
    assert sum(e.records_removed for e in entries) == sum(range(count))
    assert entries[0].first_dirty == 0
    assert entries[0].since_ms == entry(0).time_ms
    # the merged entries still tile the offsets cleaned, oldest first
    assert all(a.end == b.first_dirty for a, b in itertools.pairwise(entries))
    assert any(e.cleanings > 1 for e in entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER_FILE]  # no .tmp left


def test_merge_spans_ranges_and_times() -> None:
    merged = merge([entry(1), entry(2, first=50, end=120)])
    assert (merged.first_dirty, merged.end, merged.cleanings) == (50, 200, 2)
    assert (merged.since_ms, merged.time_ms) == (entry(1).time_ms, entry(2).time_ms)
    assert (merged.records_removed, merged.bytes_before) == (3, 2000)
    assert merged.covers(50)
    assert not merged.covers(200)
    assert merge([merged, entry(3)]).cleanings == 3
    again = LedgerEntry.from_json(json.loads(merged.line()))
    assert again == merged


def test_compact_entries_fits_the_budget() -> None:
    entries = [entry(n) for n in range(2000)]
    kept = compact_entries(entries, 20_000)
    assert sum(len(e.line()) for e in kept) <= 20_000
    assert kept[-1] == entries[-1]
    assert sum(e.cleanings for e in kept) == 2000


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json", "not a ledger entry"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"v": 2}', "not a version 1 entry"),
        (b"[" * 5000 + b"]" * 5000, "longer than an entry can be"),
        (b"[" * 3000 + b"]" * 1000, "not a ledger entry"),  # nesting past the parser's limit
        (b"\xff\xfe garbage", "not a ledger entry"),
    ],
)
def test_hostile_lines_are_reported_and_skipped(tmp_path: Path, line: bytes, why: str) -> None:
    path = tmp_path / LEDGER_FILE
    path.write_bytes(entry(0).line() + line + b"\n" + entry(1).line())
    ledger = read_ledger(tmp_path)
    assert ledger.entries == (entry(0), entry(1))
    [problem] = ledger.problems
    assert problem.startswith(f"{path}: line 2: ")
    assert why in problem


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"end": -1}, "end must be an integer"),
        ({"records_removed": True}, "records_removed must be an integer"),
        ({"time_ms": 1.5}, "time_ms must be an integer"),
        ({"first_dirty": 2**63}, "first_dirty must be an integer"),
        ({"first_dirty": 500}, "first_dirty is beyond end"),
        ({"engine": "Local Engine"}, "engine must be a short lowercase word"),
        ({"strategy": None}, "strategy must be"),
        ({"cleanings": 0}, "cleanings must be an integer from 1"),
        ({"since_ms": 2**62}, "since_ms is after time_ms"),
    ],
)
def test_entries_are_checked_field_by_field(
    tmp_path: Path, change: dict[str, object], why: str
) -> None:
    doc = {**entry(0).to_json(), **change}
    (tmp_path / LEDGER_FILE).write_text(json.dumps(doc) + "\n")
    ledger = read_ledger(tmp_path)
    assert ledger.entries == ()
    assert why in ledger.problems[0]


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    doc = {**entry(0).to_json(), "later": {"x": 1}}
    (tmp_path / LEDGER_FILE).write_text(json.dumps(doc) + "\n")
    assert read_ledger(tmp_path).entries == (entry(0),)


def test_a_huge_file_is_read_from_its_tail_and_rotated(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    junk = b"x" * 1000 + b"\n"
    with path.open("wb") as f:
        for _ in range(2 * READ_LIMIT // len(junk)):
            f.write(junk)
        f.write(entry(7).line())
    ledger = read_ledger(tmp_path)
    assert ledger.entries == (entry(7),)
    assert "only its last" in ledger.problems[0]
    assert all("a line: not a ledger entry" in p for p in ledger.problems[1:])
    append_ledger_entry(tmp_path, entry(8))  # the writer rewrites it within the bound
    assert path.stat().st_size <= MAX_LEDGER_BYTES
    assert read_ledger(tmp_path).entries == (entry(7), entry(8))
    assert read_ledger(tmp_path).problems == ()


def test_a_symlink_under_the_name_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(entry(0).line())
    part = tmp_path / "t-0"
    part.mkdir()
    (part / LEDGER_FILE).symlink_to(target)
    ledger = read_ledger(part)
    assert ledger.entries == ()
    assert str(part / LEDGER_FILE) in ledger.problems[0]
    assert "symbolic link" in ledger.problems[0]
    with pytest.raises(StorageError, match="symbolic link"):
        append_ledger_entry(part, entry(1))
    assert target.read_bytes() == entry(0).line()  # never written through the link


def test_a_fifo_under_the_name_never_blocks(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / LEDGER_FILE)
    assert "FIFO" in read_ledger(tmp_path).problems[0]
    with pytest.raises(StorageError, match="FIFO"):
        append_ledger_entry(tmp_path, entry(0))


def test_a_ledger_that_cannot_be_written_says_which(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(StorageError, match=str(missing / LEDGER_FILE)):
        append_ledger_entry(missing, entry(0))
