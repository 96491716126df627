"""``storage._repairs``: a failed cleaning undoes the index repairs of the partition's open.

``cleanerd compact`` and Spark's plans A and B take a ``Repairs`` before opening the partition
and call ``undo`` after a failure. Here the failures are simulated on a small log: what opening
repaired goes back byte for byte, unless a swap changed the partition; an append by a writer
meanwhile keeps the writer's files and still puts the older segments' indexes back.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from cleanerd.format import Record
from cleanerd.storage import PartitionLog, Repairs, _repairs as repairs_module
from cleanerd.topics import LogConfig

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=64)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def make(tmp_path: Path, segments: int = 3) -> Path:
    """A partition of ``segments`` inactive segments and an empty active one."""
    part = tmp_path / "t-0"
    log = PartitionLog.create(part, CONFIG)
    for _ in range(segments):
        for i in range(20):
            log.append([Record(0, 1000 + i, f"k{i % 7}".encode(), b"v" * 50)])
        log.roll()
    log.close()
    return part


def damage_first_indexes(part: Path) -> Path:
    first = sorted(part.glob("*.log"))[0]
    for suffix in (".index", ".timeindex"):
        first.with_suffix(suffix).unlink()
    return first


def reopen(part: Path) -> PartitionLog:
    log = PartitionLog(part, CONFIG)
    assert log.report.rebuilt_indexes  # the open repaired the first segment
    return log


def test_the_repairs_of_an_open_go_back_byte_for_byte(tmp_path: Path) -> None:
    part = make(tmp_path)
    first = damage_first_indexes(part)
    before = files(part)
    repairs = Repairs(part)
    reopen(part).close()
    assert first.with_suffix(".index").exists()

    assert repairs.undo() == "partition left as it was"
    assert files(part) == before


def test_after_a_swap_nothing_goes_back_and_the_message_says_so(tmp_path: Path) -> None:
    part = make(tmp_path)
    first = damage_first_indexes(part)
    repairs = Repairs(part)
    reopen(part).close()
    second = sorted(part.glob("*.log"))[1]
    second.rename(second.with_name(second.name + ".deleted"))  # as a swap leaves it

    said = repairs.undo()
    assert said.startswith("partition changed before the failure: ")
    assert second.name in said
    assert first.with_suffix(".index").exists()  # the log changed: the repair stays


def test_a_writers_append_meanwhile_stays_and_the_older_indexes_go_back(tmp_path: Path) -> None:
    part = make(tmp_path)
    damage_first_indexes(part)
    active = sorted(part.glob("*.log"))[-1]
    older = {n: b for n, b in files(part).items() if not n.startswith(active.stem)}
    repairs = Repairs(part)
    log = reopen(part)
    info = log.append([Record(0, 5000, b"late", b"value")])  # a writer's, under its lock
    log.close()

    said = repairs.undo()
    assert said.startswith("partition changed before the failure: ")
    assert active.name in said
    now = files(part)
    assert {n: b for n, b in now.items() if not n.startswith(active.stem)} == older
    log = PartitionLog(part, CONFIG)
    assert [r.key for r in log.records(info.first_offset)] == [b"late"]
    log.close()


def test_an_index_too_long_to_copy_is_left_to_its_repair(tmp_path: Path) -> None:
    """A sparse gigabyte under an index's name: not copied for the undo (memory stays bounded),
    and the undo keeps what the open's repair made of it instead of deleting it."""
    part = make(tmp_path)
    first = sorted(part.glob("*.index"))[0]
    with open(first, "r+b") as f:
        f.truncate(1 << 30)
    repairs = Repairs(part)
    assert first.name not in repairs.indexes
    reopen(part).close()
    rebuilt = first.read_bytes()
    assert 0 < len(rebuilt) < 1 << 20
    assert "partition changed before the failure" in repairs.undo()
    assert first.read_bytes() == rebuilt


def test_an_index_that_grew_past_the_bound_since_its_stat_is_not_kept_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its copy would be its first bytes only, which an undo would write back as the file."""
    part = make(tmp_path)
    first = sorted(part.glob("*.index"))[0]
    assert first.stat().st_size > 16
    real = repairs_module.fingerprint

    def stale(directory: Path) -> repairs_module.Fingerprint:  # stat'ed while it was small
        return {n: (ino, min(size, 16), mtime) for n, (ino, size, mtime) in real(directory).items()}

    monkeypatch.setattr(repairs_module, "COPY_MAX_BYTES", 16)
    monkeypatch.setattr(repairs_module, "fingerprint", stale)
    assert first.name not in Repairs(part).indexes


def test_an_index_grown_huge_before_the_undo_compares_within_its_copy(tmp_path: Path) -> None:
    """What the undo reports as changed compares each index with its kept copy: a file grown
    to a sparse 4 GiB meanwhile is read only one byte past the copy's length, and differs."""
    part = make(tmp_path)
    first = sorted(part.glob("*.index"))[0]
    repairs = Repairs(part)
    assert repairs._same(first.name)
    with open(first, "r+b") as f:
        f.truncate(4 << 30)
    tracemalloc.start()
    try:
        same = repairs._same(first.name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not same
    assert peak < 1 << 20
