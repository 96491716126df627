"""Swap recovery checks a ``.swap`` file before it trusts it (issue 9, items 1 and 2).

Each unsafe case must refuse the partition with an UnsafeSwapError naming the file and the
reason, and leave every file in the partition dir byte-identical. Valid swaps, including the
states a crash inside recovery itself leaves, must still be completed as Kafka completes them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleanerd.format import Record, build_batch, kernels as k, scan_batches, set_base_offset
from cleanerd.storage import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment, PartitionLog, _swap as swap
from cleanerd.storage._errors import StorageError, UnsafeSwapError
from cleanerd.topics import LogConfig

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
Contents = list[tuple[int, bytes | None, bytes | None]]


def _name(base: int, suffix: str = ".log") -> str:
    return f"{base:020d}{suffix}"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log of keys 0..4 repeated, one record per batch, over several segments."""
    directory = tmp_path_factory.mktemp("template") / "t-0"
    log = PartitionLog.create(directory, CONFIG, clock=lambda: 0)
    for i in range(40):
        log.append([Record(0, 1000 + i, str(i % 5).encode(), f"v{i}".encode())])
    assert len(log.segments) >= 5
    assert log.active_segment.size > 0
    log.close()
    return directory


@pytest.fixture
def part(template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "t-0"
    shutil.copytree(template, target)
    return target


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def _batches(path: Path) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of each batch of a segment file."""
    scan = scan_batches(path.read_bytes(), check_crc=True)
    assert scan.error is None
    return [
        (int(r[k.B_POS]), int(r[k.B_SIZE]), int(r[k.B_BASE_OFFSET]), int(r[k.B_LAST_OFFSET]))
        for r in scan.batches
    ]


def _contents(directory: Path) -> Contents:
    log = PartitionLog(directory, CONFIG)
    try:
        return [(r.offset, r.key, r.value) for r in log.records()]
    finally:
        log.close()


def _refused(directory: Path, match: str) -> UnsafeSwapError:
    """Opening refuses the partition and changes nothing in it."""
    before = _files(directory)
    with pytest.raises(UnsafeSwapError, match=match) as info:
        PartitionLog(directory, CONFIG)
    assert _files(directory) == before
    assert "Traceback" not in str(info.value)
    assert "nothing in the partition dir was renamed or deleted" in str(info.value)
    return info.value


# --- unsafe swaps: refused, nothing changed ------------------------------------------------
def test_garbage_swap_at_an_existing_segment_base(part: Path) -> None:
    swap_file = part / _name(0, ".log.swap")
    swap_file.write_bytes(b"not a batch at all" * 10)
    error = _refused(part, "not a complete swapped segment: at byte 0")
    assert str(error).startswith(f"{swap_file}: ")


def test_orphan_swap_beyond_the_log(part: Path) -> None:
    """Well-formed batches (CRCs right), but past the active segment: nothing to replace."""
    data = bytearray((part / _name(0)).read_bytes())
    for i, (pos, _, _, _) in enumerate(_batches(part / _name(0))):
        set_base_offset(data, 99_999 + i, pos)
    (part / _name(99_999, ".log.swap")).write_bytes(data)
    error = _refused(part, "past the log's last segment")
    assert _name(99_999, ".log.swap") in str(error)


def test_copy_of_a_segment_under_a_higher_base(part: Path) -> None:
    shutil.copy(part / _name(0), part / _name(99_999, ".log.swap"))
    _refused(part, "first batch has base offset 0, below its name's 99999")


def test_swap_with_a_bad_crc(part: Path) -> None:
    base = _bases(part)[1]
    data = bytearray((part / _name(base)).read_bytes())
    pos, size, _, _ = _batches(part / _name(base))[2]
    data[pos + size - 1] ^= 0xFF  # the last byte of the record value, covered by the CRC
    (part / _name(base, ".log.swap")).write_bytes(data)
    _refused(part, f"at byte {pos}: CRC mismatch")


def test_truncated_swap(part: Path) -> None:
    base = _bases(part)[1]
    data = (part / _name(base)).read_bytes()
    pos = _batches(part / _name(base))[-1][0]
    (part / _name(base, ".log.swap")).write_bytes(data[:-3])
    _refused(part, f"at byte {pos}: batch length field runs past the end")


def test_swap_reaching_into_a_segment_it_does_not_replace(part: Path) -> None:
    """Named inside a segment's offsets: Kafka would leave that segment and add the swap, so
    the offsets from the swap's base on would be in the log twice."""
    base = _bases(part)[1]
    batches = _batches(part / _name(base))
    data = (part / _name(base)).read_bytes()[batches[1][0] :]
    first, last = batches[1][2], batches[-1][3]
    (part / _name(first, ".log.swap")).write_bytes(data)
    _refused(
        part,
        f"its offsets from {first} reach into {_name(base)}, which it does not replace"
        rf" \(that segment holds offsets up to {last}\)",
    )


def test_swap_reaching_into_the_active_segment(part: Path) -> None:
    """Covering offsets of the active segment: Kafka would delete it, and appends with it."""
    bases = _bases(part)
    last_inactive, active = bases[-2], bases[-1]
    head = _batches(part / _name(active))[0]
    data = (part / _name(last_inactive)).read_bytes()
    data += (part / _name(active)).read_bytes()[: head[1]]
    (part / _name(last_inactive, ".log.swap")).write_bytes(data)
    _refused(part, f"would replace the active segment {_name(active)}")


@pytest.mark.parametrize(
    "name", ["foo.log.swap", "foo.index.swap", "5.log.swap", "00000000000000000000.snap.swap"]
)
def test_swap_names_that_do_not_parse(part: Path, name: str) -> None:
    (part / name).write_bytes(b"")
    error = _refused(part, "a swap file name must start with a 20-digit base offset")
    assert str(error).startswith(f"{part / name}: ")


def test_cleaned_names_that_do_not_parse(part: Path) -> None:
    (part / "foo.log.cleaned").write_bytes(b"")
    _refused(part, "foo.log.cleaned: a .cleaned file name must start with a 20-digit base offset")


def test_index_swap_without_a_segment(part: Path) -> None:
    (part / _name(99_999, ".index.swap")).write_bytes(b"")
    _refused(part, "it has no segment: neither 00000000000000099999.log.swap nor")


def test_index_swap_over_a_live_index(part: Path) -> None:
    """No .log.swap, and the segment's index is there: not a state any swap leaves."""
    base = _bases(part)[1]
    shutil.copy(part / _name(base, ".index"), part / _name(base, ".index.swap"))
    _refused(part, f"{_name(base, '.index')} exists: this is not part of an interrupted swap")


def test_unsafe_swap_error_is_a_storage_error() -> None:
    """Callers that handle StorageError (the CLI, the daemon) handle this one too."""
    assert issubclass(UnsafeSwapError, StorageError)


# --- valid swaps: completed or rolled back as Kafka does -----------------------------------
def _cleaned_copy(log: PartitionLog, n: int) -> tuple[LogSegment, list[LogSegment]]:
    """A .cleaned segment replacing the first n segments: each key's newest record among them
    plus their last record (so the offset range is covered, as the cleaner keeps it)."""
    old = log.segments[:n]
    end = old[-1].next_offset()
    records = [r for r in log.records() if r.offset < end]
    newest = {r.key: r for r in records}
    keep = sorted({*newest.values(), records[-1]}, key=lambda r: r.offset)
    new = LogSegment.create(log.directory, old[0].base_offset, CONFIG, temp_suffix=CLEANED_SUFFIX)
    for r in keep:
        new.append(
            build_batch([r], partition_leader_epoch=0),
            largest_offset=r.offset,
            largest_timestamp=r.timestamp,
            offset_of_max_timestamp=r.offset,
        )
    new.on_become_inactive()
    return new, old


def _expected(before: Contents, end: int) -> Contents:
    """The log after ``_cleaned_copy`` replaced the segments below ``end``."""
    newest = {key: off for off, key, _ in before if off < end}
    survivors = {*newest.values(), end - 1}
    return [r for r in before if r[0] >= end or r[0] in survivors]


def test_a_valid_swap_is_completed(part: Path) -> None:
    before = _contents(part)
    log = PartitionLog(part, CONFIG)
    new, old = _cleaned_copy(log, 3)
    end, replaced = old[-1].next_offset(), [s.log_path.name for s in old]
    new.change_suffix(SWAP_SUFFIX)  # the crash came right after the new files reached .swap
    log.close()
    assert (part / _name(0, ".log.swap")).exists()
    reopened = PartitionLog(part, CONFIG)
    assert _name(0) in reopened.report.recovery.completed
    assert set(replaced) - {_name(0)} <= set(reopened.report.recovery.deleted)
    got = [(r.offset, r.key, r.value) for r in reopened.records()]
    reopened.close()
    assert got == _expected(before, end)
    assert got != before
    assert not swap.leftover_temp_files(part)


def test_kafka_renames_the_log_first(part: Path) -> None:
    """Kafka's last step renames a segment's .log before its indexes: an index .swap next to
    its final .log (and no final index of that kind) is completed."""
    base = _bases(part)[1]
    index = part / _name(base, ".timeindex")
    os.replace(index, index.with_name(index.name + SWAP_SUFFIX))
    before_log = (part / _name(base)).read_bytes()
    log = PartitionLog(part, CONFIG)
    assert log.report.recovery.completed == [index.name]
    log.close()
    assert index.exists()
    assert (part / _name(base)).read_bytes() == before_log


def test_a_garbage_swap_next_to_cleaned_files_is_rolled_back(part: Path) -> None:
    """Kafka's rule: a .swap at or above a .cleaned file's base is an interrupted swap; it is
    deleted unread, and the old segments, never touched in that window, stay."""
    before = _contents(part)
    segs_before = {n: b for n, b in _files(part).items() if n.endswith(".log")}
    (part / _name(0, ".log.swap")).write_bytes(b"not a batch at all" * 10)
    (part / _name(0, ".index.cleaned")).write_bytes(b"")
    log = PartitionLog(part, CONFIG)
    assert sorted(log.report.recovery.rolled_back) == [
        _name(0, ".index.cleaned"),
        _name(0, ".log.swap"),
    ]
    log.close()
    assert _contents(part) == before
    assert {n: b for n, b in _files(part).items() if n.endswith(".log")} == segs_before


class _Crash(Exception):
    pass


@contextlib.contextmanager
def _crash_after(n: int, *, unlinks: bool) -> Iterator[None]:
    """Raise _Crash at the n-th rename (and, with ``unlinks``, file removal) from now on."""
    calls = 0
    real_replace, real_unlink = os.replace, Path.unlink

    def step() -> None:
        nonlocal calls
        if calls == n:
            raise _Crash
        calls += 1

    def replace(a: object, b: object) -> None:
        step()
        real_replace(a, b)  # type: ignore[arg-type]

    def unlink(self: Path, missing_ok: bool = False) -> None:
        step()
        real_unlink(self, missing_ok=missing_ok)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", replace)
        if unlinks:
            mp.setattr(Path, "unlink", unlink)
        yield


@pytest.mark.slow
def test_a_crash_inside_recovery_still_recovers(part: Path, tmp_path: Path) -> None:
    """Crash the swap after each rename, then recovery after each of its own steps: every state
    left is accepted by the checks, and opening gives the old log or the new one."""
    old_contents = _contents(part)
    seen: set[str] = set()
    for swap_step in range(20):
        crashed = tmp_path / f"s{swap_step}" / "t-0"
        shutil.copytree(part, crashed)
        log = PartitionLog(crashed, CONFIG)
        new, old = _cleaned_copy(log, 3)
        with _crash_after(swap_step, unlinks=False), contextlib.suppress(_Crash):
            log.replace_segments([new], old)
        finished = not swap.leftover_temp_files(crashed)
        for recovery_step in range(20):
            state = tmp_path / f"s{swap_step}-r{recovery_step}" / "t-0"
            shutil.copytree(crashed, state)
            recovered = False
            with _crash_after(recovery_step, unlinks=True), contextlib.suppress(_Crash):
                swap.recover_temp_files(state, CONFIG)
                recovered = True
            got = _contents(state)
            seen.add("old" if got == old_contents else "new")
            assert not swap.leftover_temp_files(state)
            assert got == _contents(state)
            if recovered:
                break
        if finished:
            break
    assert seen == {"old", "new"}


# --- the command line ------------------------------------------------------------------------
@pytest.mark.slow
def test_compact_refuses_a_garbage_swap(tmp_path: Path) -> None:
    """Issue 9 case 1, as a user meets it: exit 1, one line naming the file, nothing changed."""
    logdir = tmp_path / "L"
    cleanerd = [sys.executable, "-m", "cleanerd"]
    gen = ["gen", str(logdir), "--topic", "ftxn", "--records", "400", "--keys", "100"]
    gen += ["--records-per-batch", "20", "--segment-bytes", "6000"]
    gen += ["--transactional-producers", "2", "--abort-ratio", "0.4", "--seed", "8"]
    subprocess.run([*cleanerd, *gen], check=True, capture_output=True)
    first = [*cleanerd, "compact", str(logdir), "--delete-retention-ms", "0"]
    subprocess.run(first, check=True, capture_output=True)
    part = logdir / "ftxn-0"
    garbage = part / _name(0, ".log.swap")
    garbage.write_bytes(b"not a batch at all" * 10)
    before = _files(part)
    done = subprocess.run(
        [*cleanerd, "compact", str(logdir)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"{garbage}: not a complete swapped segment" in done.stderr
    assert _files(part) == before
