"""Each batch's CRC32C is checked exactly once per cleaning (plan, pass 1, pass 2), and a corrupt
batch is still refused before any segment is replaced.

The plan's producer-state walk checks every batch of every segment; the clean claims those checks
(``PartitionLog.claim_checked_segments``) and walks those segments without their CRCs. The count
goes through ``format._scan.first_crc_mismatch``, the one function every CRC check of a batch
calls (``scan_batches`` and ``index_batches(check_crc=True)``), so nothing is counted by hand.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cleanerd.compaction import Cleaner, plan_log
from cleanerd.format import (
    Compression,
    CorruptRecordError,
    _indexing as indexing_mod,
    _scan as scan_mod,
    kernels as k,
    scan_batches,
)
from cleanerd.storage import PartitionLog, _chunks as chunks_mod
from cleanerd.topics import LogConfig, Strategy, StrategyConfig
from tests.support.cleaning import (
    LARGE_TS,
    OFFSET,
    Producer,
    compacted_config,
    data_records,
    files_snapshot,
    no_temp_files,
    offset_map,
    rec,
)

TIMESTAMP = StrategyConfig(Strategy.TIMESTAMP)
Batch = tuple[int, int]  # (base offset, size): one batch of the log


def _count_crc_checks(monkeypatch: pytest.MonkeyPatch) -> Counter[Batch]:
    """Bytes CRC-checked per batch from now on."""
    checked: Counter[Batch] = Counter()
    original = scan_mod.first_crc_mismatch

    def counting(arr: Any, batches: Any, stop: int) -> int:
        for row in batches[:stop]:
            checked[int(row[k.B_BASE_OFFSET]), int(row[k.B_SIZE])] += int(row[k.B_SIZE])
        return original(arr, batches, stop)

    monkeypatch.setattr(scan_mod, "first_crc_mismatch", counting)
    monkeypatch.setattr(indexing_mod, "first_crc_mismatch", counting)
    return checked


def _batches(log: PartitionLog) -> dict[Batch, int]:
    """Every batch of every segment, read with our own scan (bytes by batch)."""
    out = {}
    for seg in log.segments:
        for row in scan_batches(seg.view(keep=False), check_crc=False).batches:
            out[int(row[k.B_BASE_OFFSET]), int(row[k.B_SIZE])] = int(row[k.B_SIZE])
    return out


def _write_log(directory: Path, codec: Compression) -> None:
    log = PartitionLog.create(directory, LogConfig(segment_bytes=2000), clock=lambda: 0)
    txn = Producer(log, 7)
    for i in range(120):
        log.append([rec(i % 9, i), rec(100 + i % 5, i)], compression=codec)
        if i % 25 == 3:
            txn(500 + i)
            txn.abort() if i % 2 else txn.commit()
    log.roll()
    log.close()


def _clean_counted(
    directory: Path, monkeypatch: pytest.MonkeyPatch, strategy: StrategyConfig
) -> tuple[Counter[Batch], dict[Batch, int]]:
    """One cleaning (plan, then clean) of the log, and the bytes checked per batch in it."""
    log = PartitionLog(directory)
    try:
        batches = _batches(log)
        checked = _count_crc_checks(monkeypatch)
        _, p = plan_log(log, compacted_config(), LARGE_TS)
        assert p.first_uncleanable_offset > p.first_dirty_offset
        Cleaner(offset_map(1 << 12, strategy)).clean(log, p, compacted_config(), strategy, LARGE_TS)
        monkeypatch.undo()
        return checked, batches
    finally:
        log.close()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
@pytest.mark.parametrize("strategy", [OFFSET, TIMESTAMP])
def test_each_batch_is_checked_once_per_cleaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: Compression, strategy: StrategyConfig
) -> None:
    directory = tmp_path / "t-0"
    _write_log(directory, codec)
    checked, batches = _clean_counted(directory, monkeypatch, strategy)
    assert len(batches) > 100
    assert dict(checked) == batches  # each batch's bytes once: no more, no fewer
    # a second cleaning from the checkpoint: an already clean prefix, a dirty part after it
    log = PartitionLog(directory)
    for i in range(40):
        log.append([rec(i % 9, 1000 + i)], compression=codec)
    log.roll()
    log.close()
    checked, batches = _clean_counted(directory, monkeypatch, strategy)
    assert dict(checked) == batches


def test_a_clean_without_a_walk_of_its_own_plan_checks_every_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan that reused an earlier walk (nothing changed since) claims nothing: this
    cleaning's passes check each batch themselves, once."""
    directory = tmp_path / "t-0"
    _write_log(directory, Compression.NONE)
    log = PartitionLog(directory)
    try:
        plan_log(log, compacted_config(), LARGE_TS)  # an earlier cleaning's plan walked it
        batches = _batches(log)
        checked = _count_crc_checks(monkeypatch)
        _, p = plan_log(log, compacted_config(), LARGE_TS)
        assert not checked  # the walk was reused: nothing checked yet
        Cleaner(offset_map(1 << 12)).clean(log, p, compacted_config(), OFFSET, LARGE_TS)
        active = log.segments[-1].base_offset
        assert dict(checked) == {b: n for b, n in batches.items() if b[0] < active}
    finally:
        log.close()


def _flip_a_byte(path: Path) -> int:
    """Corrupt a payload byte of the file's second batch; returns that batch's position."""
    arr = scan_batches(path.read_bytes()).batches
    position = int(arr[1, k.B_POS])
    with open(path, "r+b") as f:
        f.seek(position + 65)
        byte = f.read(1)
        f.seek(position + 65)
        f.write(bytes([byte[0] ^ 0xFF]))
    return position


@pytest.mark.parametrize("when", ["before the plan", "between plan and clean"])
def test_a_corrupt_batch_is_refused_and_nothing_replaced(tmp_path: Path, when: str) -> None:
    """A batch whose CRC is wrong stops the cleaning naming file and position, whether the
    plan's walk finds it or the file changed after that walk (then its check is not claimed)."""
    directory = tmp_path / "t-0"
    _write_log(directory, Compression.NONE)
    log = PartitionLog(directory)
    try:
        seg = log.segments[2]
        config = compacted_config()
        if when == "before the plan":
            position = _flip_a_byte(seg.log_path)
            before = files_snapshot(directory)
            with pytest.raises(CorruptRecordError) as info:
                _, p = plan_log(log, config, LARGE_TS)
        else:
            _, p = plan_log(log, config, LARGE_TS)
            stat = seg.log_path.stat()
            position = _flip_a_byte(seg.log_path)
            # a change the file key shows even where mtime is coarser than two writes apart
            os.utime(seg.log_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
            before = files_snapshot(directory)
            with pytest.raises(CorruptRecordError) as info:
                Cleaner(offset_map()).clean(log, p, config, OFFSET, LARGE_TS)
        assert info.value.path == str(seg.log_path)
        assert info.value.position == position
        assert "CRC" in str(info.value)
        assert files_snapshot(directory) == before
        assert no_temp_files(directory)
    finally:
        log.close()


def test_the_cleaned_log_is_what_a_checked_clean_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipping the claimed checks changes nothing in what is written: the same log, cleaned
    with every CRC checked in every pass, gives the same records."""
    logs = []
    for name, skip in (("a-0", True), ("b-0", False)):
        directory = tmp_path / name
        _write_log(directory, Compression.LZ4)
        log = PartitionLog(directory)
        if not skip:
            monkeypatch.setattr(PartitionLog, "claim_checked_segments", lambda self, e: frozenset())
        _, p = plan_log(log, compacted_config(), LARGE_TS)
        Cleaner(offset_map()).clean(log, p, compacted_config(), OFFSET, LARGE_TS)
        monkeypatch.undo()
        logs.append(log)
    try:
        assert data_records(logs[0]) == data_records(logs[1])
        assert [s.size for s in logs[0].segments] == [s.size for s in logs[1].segments]
    finally:
        for log in logs:
            log.close()


def test_chunked_walks_count_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With chunks smaller than a segment the passes walk in many steps; still once a batch."""
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", 300)
    directory = tmp_path / "t-0"
    _write_log(directory, Compression.NONE)
    log = PartitionLog(directory)
    try:
        batches = _batches(log)
        checked = _count_crc_checks(monkeypatch)
        _, p = plan_log(log, compacted_config(), LARGE_TS)
        Cleaner(offset_map(1 << 12)).clean(log, p, compacted_config(), OFFSET, LARGE_TS)
        assert dict(checked) == batches
    finally:
        log.close()
