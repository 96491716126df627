"""``compact`` checks what it decides on (issue 9, cases 3 to 6).

Each case damages a generated log the way the issue's campaign did, but at positions computed
from the log (so it does not depend on a codec library's exact output): ``compact`` must exit 1
naming the file and the position, and leave every file of the partition byte-identical; it never
exits 0 having silently cleaned less, and never rewrites damage away.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cleanerd.cli import cli
from cleanerd.format import ATTR_TRANSACTIONAL, kernels as k, scan_batches
from cleanerd.inspect import verify_path
from cleanerd.storage import Repairs
from cleanerd.workload import WorkloadSpec, generate

NOW = "9999999999999"
SPEC = {"records": 400, "keys": 100, "records_per_batch": 20, "segment_bytes": 6000}


def compact(logdir: Path) -> Result:
    args = ["compact", str(logdir), "--delete-retention-ms", "0", "--now", NOW]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def make(tmp_path: Path, **spec: object) -> Path:
    logdir = tmp_path / "L"
    generate(logdir, WorkloadSpec(**{**SPEC, **spec}))  # type: ignore[arg-type]
    return logdir


def segments(part: Path) -> list[Path]:
    return sorted(part.glob("*.log"))


def batch_rows(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(position, base offset, last offset, attributes, producer id) of every batch."""
    b = scan_batches(path.read_bytes(), path=str(path)).batches
    cols = (k.B_POS, k.B_BASE_OFFSET, k.B_LAST_OFFSET, k.B_ATTRIBUTES, k.B_PRODUCER_ID)
    return [tuple(int(b[i, c]) for c in cols) for i in range(b.shape[0])]  # type: ignore[misc]


def patch(path: Path, position: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[position : position + len(data)] = data
    path.write_bytes(bytes(raw))


def assert_refused(logdir: Path, part: Path, where: Path, *needles: str) -> Result:
    before = snapshot(part)
    result = compact(logdir)
    assert result.exit_code == 1, result.output
    assert str(where) in result.output
    for needle in needles:
        assert needle in result.output, result.output
    assert "Traceback" not in result.output
    assert snapshot(part) == before
    return result


def test_crc_damage_to_a_producer_id_fails_instead_of_cleaning_less(tmp_path: Path) -> None:
    """Case 3: a changed producer id would leave a transaction open forever (the LSO stuck at
    that segment); the producer-state walk checks the CRC and the clean fails."""
    logdir = make(tmp_path, topic="ftxn", transactional_producers=2, abort_ratio=0.4, seed=8)
    part = logdir / "ftxn-0"
    target = segments(part)[-3]  # neither the first nor the active segment
    pos = next(r[0] for r in batch_rows(target) if r[3] & ATTR_TRANSACTIONAL)
    patch(target, pos + 43, bytes(8))  # producer id: bytes 43-50 of the batch, CRC-covered
    assert_refused(logdir, part, target, f"at byte {pos}", "CRC mismatch")
    assert not verify_path(logdir).ok


def test_base_offset_overlapping_the_next_segment_is_refused(tmp_path: Path) -> None:
    """Case 4: the base offset is not CRC-covered; the last batch of a segment moved into the
    next segment's range passes every batch check but not the check across segments."""
    logdir = make(tmp_path, topic="flz4", codec="lz4", seed=7)
    part = logdir / "flz4-0"
    logs = segments(part)
    target, following = logs[1], logs[2]
    pos = batch_rows(target)[-1][0]
    patch(target, pos, struct.pack(">q", int(following.stem)))
    assert_refused(logdir, part, target, "not below the base offset", following.name)
    assert not verify_path(logdir).ok


def test_base_offset_out_of_order_inside_a_segment_is_refused(tmp_path: Path) -> None:
    """Case 5: a high byte of a base offset set to 255; the cleaned segment would have offsets
    going backwards. The walks check that offsets rise, before anything is written."""
    logdir = make(tmp_path, topic="fsnappy", codec="snappy", seed=7)
    part = logdir / "fsnappy-0"
    target = segments(part)[-4]
    rows = batch_rows(target)
    assert len(rows) >= 2
    pos = rows[0][0]  # a batch followed by another in the same segment
    patch(target, pos + 2, b"\xff")
    assert_refused(logdir, part, target, "offsets not increasing")


@pytest.mark.parametrize("cut", [5, 200])
def test_truncated_inactive_segment_is_refused_and_its_indexes_left_alone(
    tmp_path: Path, cut: int
) -> None:
    """Case 6: opening the log finds the index pointing past the cut and would rebuild it; the
    rebuild fails on the cut batch and must leave the old index files as they were."""
    logdir = make(tmp_path, topic="trunc", seed=3)
    part = logdir / "trunc-0"
    target = segments(part)[2]
    target.write_bytes(target.read_bytes()[:-cut])
    result = assert_refused(logdir, part, target)
    assert "truncated" in result.output or "runs past the end" in result.output
    assert not list(part.glob("*.tmp"))


def test_checkpoints_compaction_depends_on_fail_it_and_the_others_warn(tmp_path: Path) -> None:
    """Case 6: garbage in the cleaner checkpoint names the file and line and changes nothing;
    garbage recovery-point and leader-epoch checkpoints (which compaction does not read) are
    warnings; an out-of-range cleaner checkpoint is reset as Kafka resets it, with a warning."""
    logdir = make(tmp_path, topic="cp", seed=2)
    part = logdir / "cp-0"
    cleaner = logdir / "cleaner-offset-checkpoint"
    cleaner.write_text("garbage\n")
    before = {**snapshot(logdir), **snapshot(part)}
    result = compact(logdir)
    assert result.exit_code == 1
    assert f"{cleaner} line 1" in result.output
    assert {**snapshot(logdir), **snapshot(part)} == before

    cleaner.write_text("0\n1\ncp 0 -5\n")
    (logdir / "recovery-point-offset-checkpoint").write_text("junk\n")
    (part / "leader-epoch-checkpoint").write_text("0\n1\nzero 0\n")
    result = compact(logdir)
    assert result.exit_code == 0, result.output
    assert "recovery-point-offset-checkpoint line 1" in result.stderr
    assert "leader-epoch-checkpoint line 3" in result.stderr
    assert "cleaner-offset-checkpoint entry -5 is outside the log" in result.stderr


def test_failure_message_says_left_as_it_was_only_when_true(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(b"x")
    assert Repairs(part).undo() == "partition left as it was"
    repairs = Repairs(part)
    (part / "00000000000000000000.log").rename(part / "00000000000000000000.log.deleted")
    said = repairs.undo()
    assert said.startswith("partition changed before the failure: ")
    assert "00000000000000000000.log," in said
    assert "00000000000000000000.log.deleted" in said


def test_repairs_made_on_open_are_undone_when_the_cleaning_fails(tmp_path: Path) -> None:
    """Item 6: one segment lost its indexes (opening rebuilds them), a later one is truncated
    (the cleaning fails): the rebuilt indexes must not stay, every file is as it was."""
    logdir = make(tmp_path, topic="undo", transactional_producers=2, abort_ratio=0.5, seed=4)
    part = logdir / "undo-0"
    logs = segments(part)
    for suffix in (".index", ".timeindex", ".txnindex"):
        logs[0].with_suffix(suffix).unlink(missing_ok=True)
    logs[3].write_bytes(logs[3].read_bytes()[:-7])
    result = assert_refused(logdir, part, logs[3], "partition left as it was")
    assert "changed before the failure" not in result.output
