"""Cleaning a log that began before Kafka 0.11: magic 0 and 1 message sets, then v2 batches after
the upgrade, one segment holding both (docs/kafka-format.md §2.8, §4.9). The log is written by
kafka-python; what survives is checked against an oracle written from Kafka's rules
(``LogCleaner``'s ``shouldRetainRecord`` and ``legacyDeleteHorizonMs``), and read back with
kafka-python: each kept record still in its magic and codec, every CRC32 valid."""

from __future__ import annotations

import gzip
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from cleanerd.compaction._filter import LegacyEmptyBatchError
from cleanerd.inspect import verify_path
from cleanerd.storage import PartitionLog
from tests.support.cleaning import DAY, clean, set_high_watermark, write_segment
from tests.support.legacy import CODECS, ReadRecord, Rec, legacy_set, read_back, v2_batch, wrapper

T0 = 1_600_000_000_000  # an mtime, in ms


@dataclass(frozen=True)
class Set:
    """One outer batch or message set as written: its magic, codec and records."""

    magic: int
    codec: str
    records: list[Rec]


@dataclass(frozen=True)
class Seg:
    base: int
    mtime_ms: int
    sets: list[Set]


def _records(rng: random.Random, first: int, n: int, keys: int) -> list[Rec]:
    out: list[Rec] = []
    for off in range(first, first + n):
        roll = rng.random()
        key = None if roll < 0.05 else b"key-%d" % rng.randrange(keys)
        value = None if 0.05 <= roll < 0.25 else b"value-%d" % off
        out.append((off, 1_000 + off, key, value))
    return out


def _layout(seed: int, keys: int = 12) -> list[Seg]:
    """v0 (plain, gzip, lz4), then v1 (plain, snappy, lz4, gzip), then a segment of v1 and v2,
    then v2 only, then the active segment."""
    rng = random.Random(seed)
    plan = [
        [(0, "none", 1), (0, "none", 1), (0, "gzip", 5), (0, "lz4", 4), (0, "none", 1)],
        [(1, "none", 1), (1, "snappy", 6), (1, "lz4", 3), (1, "gzip", 5), (1, "none", 1)],
        [(1, "gzip", 4), (1, "none", 1), (2, "gzip", 5), (2, "none", 3)],
        [(2, "lz4", 6), (2, "none", 4)],
        [(2, "none", 2)],
    ]
    segs: list[Seg] = []
    off = 0
    for i, sets in enumerate(plan):
        base = off
        out = []
        for magic, codec, n in sets:
            if codec == "none" and magic < 2:  # plain legacy messages: one record each
                out += [Set(magic, codec, _records(rng, off + j, 1, keys)) for j in range(n)]
            else:
                out.append(Set(magic, codec, _records(rng, off, n, keys)))
            off += n
        segs.append(Seg(base, T0 + i * 10 * DAY, out))
    # the last record of the cleaning round is a keyed value (KAFKA-17076 keeps its batch)
    last = segs[-2].sets[-1]
    last.records[-1] = (last.records[-1][0], 9, b"key-last", b"kept")
    return segs


def _write(directory: Path, segs: list[Seg]) -> PartitionLog:
    for seg in segs:
        data = [
            legacy_set(s.magic, s.codec, s.records)
            if s.magic < 2
            else v2_batch(s.records[0][0], s.codec, s.records)
            for s in seg.sets
        ]
        write_segment(directory, seg.base, data)
    log = PartitionLog(directory)
    for seg in segs:
        os.utime(directory / f"{seg.base:020d}.log", ns=(seg.mtime_ms * 10**6,) * 2)
    return log


def kafka_survivors(
    segs: list[Seg], first_dirty: int, upper: int, retention_ms: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Kafka's rule, written out from ``LogCleaner``: the map takes every keyed record of
    [first dirty, upper); a record stays past the map's last offset, else if keyed and the
    newest of its key; a tombstone of magic 0/1 only while its segment was modified after
    ``legacyDeleteHorizonMs`` (the last segment below the first dirty offset, its mtime less
    delete.retention.ms; 0 with none), a v2 tombstone until its batch's delete horizon, which the
    first clean only stamps."""
    newest: dict[bytes, int] = {}
    latest = -1
    for seg in segs:
        for s in seg.sets:
            for off, _, key, _ in s.records:
                if first_dirty <= off < upper:
                    latest = off
                    if key is not None:
                        newest[key] = off
    below = [seg for seg in segs if seg.base < first_dirty]
    horizon = below[-1].mtime_ms - retention_ms if below else 0
    out = []
    for seg in segs:
        retain_legacy = seg.mtime_ms > horizon
        for s in seg.sets:
            for off, _, key, value in s.records:
                if off >= upper or off > latest:
                    keep = True
                elif key is None or off < newest.get(key, -1):
                    keep = False
                else:
                    keep = value is not None or s.magic == 2 or retain_legacy
                if keep:
                    out.append((off, key, value))
    return out


def _read(directory: Path) -> tuple[list[ReadRecord], list[tuple[int, int, int]]]:
    recs: list[ReadRecord] = []
    batches: list[tuple[int, int, int]] = []
    for path in sorted(directory.glob("*.log")):
        r, b = read_back(path)
        recs += r
        batches += b
    return recs, batches


def _origin(segs: list[Seg]) -> dict[int, tuple[int, int]]:
    return {r[0]: (s.magic, CODECS[s.codec]) for seg in segs for s in seg.sets for r in s.records}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("first_dirty_segment", [0, 3])
def test_mixed_legacy_and_v2_log_cleans_as_kafka_does(
    tmp_path: Path, seed: int, first_dirty_segment: int
) -> None:
    """A full clean (first dirty 0: no legacy horizon, legacy tombstones stay) and one whose
    clean part is the legacy segments (their tombstones go where the segment is older than the
    last clean segment's mtime less delete.retention.ms)."""
    segs = _layout(seed)
    d = tmp_path / "t-0"
    log = _write(d, segs)
    first_dirty, upper = segs[first_dirty_segment].base, segs[-1].base
    clean(log, first_dirty, upper)
    expected = kafka_survivors(segs, first_dirty, upper, DAY)
    recs, batches = _read(d)
    assert [(r.offset, r.key, r.value) for r in recs] == expected
    origin = _origin(segs)
    for r in recs:
        assert r.magic == origin[r.offset][0], f"offset {r.offset} changed magic"
    for magic, codec, last in batches:
        assert (magic, codec) == origin[last], f"batch ending at {last} changed magic or codec"
    assert verify_path(d).ok


def test_legacy_tombstones_follow_the_segment_age(tmp_path: Path) -> None:
    """The legacy rule picked apart: the v0 segment (mtime T0) is older than the horizon
    (mtime of segment 2 less a day), the v1 segment (T0 + 10 days) too, segment 2 is not; a
    tombstone that wins its key stays only there."""
    t = b"tomb"
    segs = [
        Seg(0, T0, [Set(0, "gzip", [(0, 0, t + b"0", None), (1, 0, b"a", b"1")])]),
        Seg(2, T0 + 10 * DAY, [Set(1, "none", [(2, 5, t + b"1", None)])]),
        Seg(3, T0 + 20 * DAY, [Set(1, "lz4", [(3, 6, t + b"2", None), (4, 7, b"b", b"2")])]),
        Seg(5, T0 + 30 * DAY, [Set(2, "none", [(5, 8, b"c", b"3")])]),
        Seg(6, T0 + 40 * DAY, [Set(2, "none", [(6, 9, b"d", b"4")])]),
    ]
    d = tmp_path / "t-0"
    log = _write(d, segs)
    clean(log, 5, 6)
    recs, batches = _read(d)
    assert [(r.offset, r.key, r.value) for r in recs] == kafka_survivors(segs, 5, 6, DAY)
    assert [r.offset for r in recs] == [1, 3, 4, 5, 6]
    assert batches[:2] == [(0, 1, 1), (1, 3, 4)]  # the gzip wrapper rebuilt at offset 1


def test_wrapper_losing_records_is_rebuilt_in_its_magic_and_codec(tmp_path: Path) -> None:
    """Kafka's ``buildRetainedRecordsInto`` for v1: the new wrapper sits at its last kept offset,
    its inner offsets relative to its first kept one, its timestamp the largest kept one; a
    LogAppendTime wrapper keeps its time for every record."""
    d = tmp_path / "t-0"
    recs = [(10 + i, 100 + i, b"k%d" % (i % 2), b"v%d" % i) for i in range(5)]
    write_segment(d, 10, [legacy_set(1, "snappy", recs[:3]), legacy_set(1, "gzip", recs[3:], 777)])
    write_segment(d, 20, [v2_batch(20, "none", [(20, 0, b"z", b"z")])])
    log = PartitionLog(d)
    clean(log, 10, 20)
    out, batches = read_back(d / f"{10:020d}.log")
    assert [(r.offset, r.timestamp, r.key) for r in out] == [(13, 777, b"k1"), (14, 777, b"k0")]
    # k0 at 10, 12 and k1 at 11 lose to 13, 14: the snappy wrapper goes whole
    assert batches == [(1, 1, 14)]


def test_emptied_legacy_message_ending_the_round_stops_the_clean(tmp_path: Path) -> None:
    """Kafka cannot keep an empty legacy batch: an unkeyed v1 message ending the round at the
    high watermark (KAFKA-20452) makes its cleaner throw, and cleanerd refuses the same way,
    leaving the log as it was."""
    d = tmp_path / "t-0"
    write_segment(d, 0, [legacy_set(1, "none", [(0, 1, b"a", b"1")]),
                         legacy_set(1, "none", [(1, 1, None, b"unkeyed")])])  # fmt: skip
    write_segment(d, 2, [v2_batch(2, "none", [(2, 0, b"z", b"z")])])
    log = PartitionLog(d)
    set_high_watermark(log, 2)
    before = (d / f"{0:020d}.log").read_bytes()
    with pytest.raises(LegacyEmptyBatchError, match="IllegalStateException"):
        clean(log, 0, 2)
    assert (d / f"{0:020d}.log").read_bytes() == before
    assert not list(d.glob("*.cleaned"))


def test_emptied_legacy_message_below_the_high_watermark_is_dropped(tmp_path: Path) -> None:
    """Below the high watermark nothing must stay as an empty batch (KAFKA-20452): the emptied
    legacy message goes and the clean completes."""
    d = tmp_path / "t-0"
    write_segment(d, 0, [legacy_set(1, "none", [(0, 1, b"a", b"1")]),
                         legacy_set(1, "none", [(1, 1, None, b"unkeyed")])])  # fmt: skip
    write_segment(d, 2, [v2_batch(2, "none", [(2, 0, b"z", b"z")])])
    log = PartitionLog(d)
    assert log.high_watermark == 3  # no checkpoint: the log end
    clean(log, 0, 2)
    out, batches = read_back(d / f"{0:020d}.log")
    assert [(r.offset, r.key) for r in out] == [(0, b"a")]
    assert batches == [(1, 0, 0)]


def test_wrapper_holding_another_magic_is_written_again_whole(tmp_path: Path) -> None:
    """KAFKA-4298: a v1 wrapper whose inner messages are v0 keeps every record but is written
    again, its inner messages now v1 (``MemoryRecords.filterTo``: ``writeOriginalBatch`` false);
    a wrapper of one magic that keeps everything is copied as it is."""
    d = tmp_path / "t-0"
    inner = legacy_set(0, "none", [(i, 0, b"k%d" % i, b"v%d" % i) for i in range(3)])
    mixed = wrapper(1, 1, gzip.compress(inner), offset=2, timestamp=50)
    same = legacy_set(1, "gzip", [(3 + i, 60 + i, b"j%d" % i, b"w") for i in range(2)])
    write_segment(d, 0, [mixed, same])
    write_segment(d, 5, [v2_batch(5, "none", [(5, 0, b"z", b"z")])])
    log = PartitionLog(d)
    clean(log, 0, 5)
    data = (d / f"{0:020d}.log").read_bytes()
    out, batches = read_back(d / f"{0:020d}.log")
    assert [(r.offset, r.key) for r in out][:3] == [(0, b"k0"), (1, b"k1"), (2, b"k2")]
    assert batches[:2] == [(1, 1, 2), (1, 1, 4)]
    from kafka.record import MemoryRecords  # noqa: PLC0415 (the independent reader)

    first = MemoryRecords(data).next_batch()
    assert {r.magic for r in first} == {1}  # was 0
    assert data.endswith(same)  # copied byte for byte
