"""A ``compact`` that fails before any swap leaves the partition dir byte-identical.

The damage is a batch whose record count (a header field) disagrees with its records, its CRC
recomputed so that it passes every CRC check: only decoding the records finds it, during the
cleaning, after the open has repaired indexes and ``--roll-active`` has rolled. The roll was
the run's own, not a writer's, so it is taken back with the repairs; a segment a writer has
appended to since is the writer's and stays.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from click.testing import CliRunner, Result

from cleanerd.cli import cli
from cleanerd.format import Record
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig

NOW = "9999999999999"
COUNT_AT = 57  # the record count: the last header field, bytes 57-60 of a batch
CRC_AT, CRC_FROM = 17, 21


def tree(logdir: Path) -> dict[str, bytes]:
    """Every file under ``logdir`` (names relative to it) with its bytes, but the log dir's
    ``.lock``, which a broker too creates on the first run and leaves."""
    files = (p for p in sorted(logdir.rglob("*")) if p.is_file() and p.name != ".lock")
    return {str(p.relative_to(logdir)): p.read_bytes() for p in files}


def build(tmp_path: Path, segments: int) -> tuple[Path, Path]:
    """A log dir with partition ``t-0``: ``segments`` segments of four 3-record batches each
    (the last one active), written by the project's own writer."""
    logdir = tmp_path / "logs"
    part = logdir / "t-0"
    log = PartitionLog.create(part, LogConfig())
    try:
        for s in range(segments):
            if s:
                log.roll()
            for n in range(4):
                ts = 1_000 + 12 * s + 3 * n
                log.append([Record(0, ts + i, f"k{i}".encode(), b"v") for i in range(3)])
    finally:
        log.close()
    return logdir, part


def miscount_second_batch(segment: Path) -> None:
    """Record count 3 -> 2 in the segment's second batch, with a CRC that matches again."""
    raw = bytearray(segment.read_bytes())
    pos = 12 + struct.unpack_from(">i", raw, 8)[0]
    end = pos + 12 + struct.unpack_from(">i", raw, pos + 8)[0]
    assert struct.unpack_from(">i", raw, pos + COUNT_AT) == (3,)
    struct.pack_into(">i", raw, pos + COUNT_AT, 2)
    struct.pack_into(">I", raw, pos + CRC_AT, crc32c.crc32c(bytes(raw[pos + CRC_FROM : end])))
    segment.write_bytes(bytes(raw))


def compact(logdir: Path, *extra: str) -> Result:
    args = ["compact", str(logdir), "--now", NOW, "--delete-retention-ms", "0", *extra]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def assert_failed_cleanly(result: Result, segment: Path) -> None:
    assert result.exit_code == 1, result.output
    assert f"{segment} at byte " in result.stderr
    assert "record count in the header does not match the records" in result.stderr
    assert result.stderr.rstrip().endswith("(partition left as it was)"), result.stderr


@pytest.mark.parametrize("indexes", ["kept", "missing"])
def test_roll_active_on_a_single_segment_leaves_nothing_behind(
    tmp_path: Path, indexes: str
) -> None:
    """The roll's new segment and its indexes go, and so do the closed segment's index
    changes: the rebuilt ones when they were missing, the roll's final time-index entry."""
    logdir, part = build(tmp_path, segments=1)
    (segment,) = part.glob("*.log")
    miscount_second_batch(segment)
    if indexes == "missing":
        for suffix in (".index", ".timeindex", ".txnindex"):
            segment.with_suffix(suffix).unlink(missing_ok=True)
    before = tree(logdir)

    result = compact(logdir, "--roll-active")
    assert_failed_cleanly(result, segment)
    assert tree(logdir) == before


def test_plain_compact_undoes_the_index_repairs_of_its_open(tmp_path: Path) -> None:
    logdir, part = build(tmp_path, segments=2)
    first = sorted(part.glob("*.log"))[0]
    miscount_second_batch(first)
    for p in part.glob("*index"):
        p.unlink()  # every segment's indexes are rebuilt by the open
    before = tree(logdir)

    result = compact(logdir)
    assert_failed_cleanly(result, first)
    assert tree(logdir) == before


def test_a_rolled_segment_a_writer_appended_to_is_not_taken_back(tmp_path: Path) -> None:
    _, part = build(tmp_path, segments=1)
    log = PartitionLog(part, LogConfig())
    try:
        closed = log.active_segment
        started = log.roll()
        other = PartitionLog(part, LogConfig())  # another writer, as another process would
        other.append([Record(0, 5_000, b"late", b"v")])
        other.close()
        assert not log.unroll(closed, started)
        assert log.active_segment is started

        again = log.roll()
        assert again is not started
        assert log.unroll(started, again)
        assert log.active_segment is started
        assert not again.log_path.exists()
        assert not again.offset_index.path.exists()
    finally:
        log.close()
    names = sorted(p.name for p in part.glob("*.log"))
    assert names == [closed.log_path.name, started.log_path.name]
    reopened = PartitionLog(part, LogConfig())
    try:
        assert [r.key for r in reopened.records(12)] == [b"late"]
    finally:
        reopened.close()
