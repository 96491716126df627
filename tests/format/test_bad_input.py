"""Bad input: every kind of damage gives a CorruptRecordError that says where.

The error must be exactly ``CorruptRecordError`` (never struct.error, IndexError or another
ValueError), its ``position`` the byte position of the bad batch, its message the path given,
its ``last_good_offset`` the last offset of the last good batch; ``iter_batches`` yields the good
batches before it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.format import (
    BatchHeader,
    Compression,
    CorruptRecordError,
    Record,
    compress,
    index_batches,
    iter_batches,
    kernels as k,
    records_from_index,
    scan_batches,
)
from cleanerd.format._builder import build_batch, finish_crc, set_base_offset

PATH = "/data/orders-3/00000000000000000000.log"


def make(base: int, n: int = 3, codec: Compression = Compression.NONE) -> bytes:
    """n records at base.., keys of 10 bytes, so every varint of the first record is 1 byte."""
    recs = [
        Record(base + i, 1000 + base + i, b"K" * 10, b"value-%d" % i, (("h", None),))
        for i in range(n)
    ]
    return build_batch(recs, compression=codec)


A = make(0)  # offsets 0..2
B = make(3)  # offsets 3..5
C = make(6)  # offsets 6..8
POS_B = len(A)
POS_C = len(A) + len(B)


def patch(batch: bytes, fix_crc: bool, *edits: tuple[int, bytes]) -> bytes:
    out = bytearray(batch)
    for pos, raw in edits:
        out[pos : pos + len(raw)] = raw
    if fix_crc:
        finish_crc(out)
    return bytes(out)


def full_read(data: bytes, path: str = PATH) -> list[Record]:
    """Scan, raise the scan's error, index every batch: the cleaner's path through a segment."""
    scan = scan_batches(data, path=path)
    scan.raise_error()
    payload, index = index_batches(data, scan.batches, path=path)
    return list(records_from_index(payload, index))


def iter_read(data: bytes, path: str = PATH) -> tuple[list[int], CorruptRecordError]:
    """Walk with iter_batches, decoding each batch: base offsets of the good ones, the error."""
    good = []
    try:
        for batch in iter_batches(data, path=path):
            batch.records()
            good.append(batch.header.base_offset)
    except CorruptRecordError as e:
        return good, e
    pytest.fail("iter_batches read bad data without a CorruptRecordError")


def assert_error(err: BaseException, position: int, last_good: int, path: str = PATH) -> None:
    assert type(err) is CorruptRecordError, repr(err)
    assert err.position == position, str(err)
    assert err.path == path
    assert path in str(err)
    assert f"at byte {position}" in str(err)
    assert err.last_good_offset == last_good, str(err)


def check(data: bytes, position: int, last_good: int, good_bases: list[int]) -> CorruptRecordError:
    """Both readers fail at ``position`` after ``last_good``; iter_batches yields the good ones."""
    with pytest.raises(CorruptRecordError) as info:
        full_read(data)
    assert_error(info.value, position, last_good)
    good, err = iter_read(data)
    assert good == good_bases
    assert_error(err, position, last_good)
    return info.value


def check_scan_prefix(data: bytes, position: int, n_good: int) -> None:
    """A scan keeps exactly the good prefix (what salvage/recovery would keep)."""
    scan = scan_batches(data, path=PATH)
    assert scan.error is not None
    assert len(scan) == n_good
    assert scan.end == position


# -- sanity --------------------------------------------------------------------------------------


def test_good_data_reads() -> None:
    assert [r.offset for r in full_read(A + B + C)] == list(range(9))
    assert [b.header.base_offset for b in iter_batches(A + B + C)] == [0, 3, 6]
    # the record layout the patches below rely on: len, attrs, ts, offset, key length, key
    assert A[61 + 4] == 20  # zig-zag 10
    assert A[61 + 5 : 61 + 15] == b"K" * 10


# -- batch-level damage (found by the scan) ---------------------------------------------------


@pytest.mark.parametrize("cut", [1, 30, 60, 61, 70, len(B) - 1])
def test_truncated_batch(cut: int) -> None:
    data = A + B[:cut]
    err = check(data, POS_B, 2, [0])
    assert "truncated" in err.reason or "runs past the end" in err.reason
    check_scan_prefix(data, POS_B, 1)


def test_truncated_last_batch_of_three() -> None:
    check(A + B + C[:-5], POS_C, 5, [0, 3])


def test_flipped_crc_byte() -> None:
    bad = patch(B, False, (18, bytes([B[18] ^ 0x01])))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "CRC mismatch" in err.reason
    check_scan_prefix(A + bad + C, POS_B, 1)


@pytest.mark.parametrize("where", [21, 30, 57, 61, 70, -1])
def test_flipped_covered_byte_is_a_crc_mismatch(where: int) -> None:
    pos = where % len(B)
    bad = patch(B, False, (pos, bytes([B[pos] ^ 0x40])))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "CRC mismatch" in err.reason


def test_flipped_payload_byte_in_compressed_batch() -> None:
    b = make(3, codec=Compression.GZIP)
    bad = patch(b, False, (len(b) - 10, bytes([b[-10] ^ 0xFF])))
    err = check(A + bad, POS_B, 2, [0])
    assert "CRC mismatch" in err.reason


def test_check_crc_false_skips_only_the_crc() -> None:
    bad = patch(B, False, (17, b"\x00\x00\x00\x00"))
    scan = scan_batches(A + bad + C, path=PATH, check_crc=False)
    assert scan.error is None
    assert len(scan) == 3


@pytest.mark.parametrize("extra", [1, 1000, 2**31 - 1 - len(C)])
def test_batch_length_beyond_the_file(extra: int) -> None:
    bad = patch(C, False, (8, struct.pack(">i", len(C) - 12 + extra)))
    err = check(A + B + bad, POS_C, 5, [0, 3])
    assert "past the end" in err.reason
    check_scan_prefix(A + B + bad, POS_C, 2)


def test_middle_batch_length_too_long_lands_in_the_next() -> None:
    # B claims 10 more bytes: its CRC no longer matches (it covers C's first bytes)
    bad = patch(B, False, (8, struct.pack(">i", len(B) - 12 + 10)))
    check(A + bad + C, POS_B, 2, [0])


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 12, 48])
def test_batch_length_too_small(length: int) -> None:
    bad = patch(B, False, (8, struct.pack(">i", length)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "smaller than a v2 batch header" in err.reason


def test_batch_length_smaller_than_its_records() -> None:
    # 49 is a legal (header-only) length, but B has records: its CRC (over 40 bytes) fails
    bad = patch(B, False, (8, struct.pack(">i", 49)))
    check(A + bad + C, POS_B, 2, [0])


@pytest.mark.parametrize("magic", [0, 1, 3, 0xFF])
def test_bad_magic(magic: int) -> None:
    bad = patch(B, False, (16, bytes([magic])))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "magic" in err.reason


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_id(codec_id: int) -> None:
    bad = patch(B, True, (22, bytes([codec_id])))
    err = check(A + bad + C, POS_B, 2, [0])
    assert f"unknown compression codec id {codec_id}" in err.reason
    with pytest.raises(CorruptRecordError):
        _ = BatchHeader.parse(bad).compression


@pytest.mark.parametrize(
    "garbage",
    [b"\x00", b"\x00" * 60, b"\x00" * 100, b"\xff" * 61, bytes(range(200)), A[:-1]],
    ids=["1-zero", "60-zeros", "100-zeros", "61-ff", "range", "almost-a-batch"],
)
def test_trailing_garbage_after_valid_batches(garbage: bytes) -> None:
    data = A + B + C + garbage
    check(data, POS_C + len(C), 8, [0, 3, 6])
    check_scan_prefix(data, POS_C + len(C), 3)


def test_trailing_copy_of_a_valid_batch_is_non_monotonic() -> None:
    # a full, CRC-valid batch after the end, but with old offsets (e.g. a replayed write)
    check(A + B + C + A, POS_C + len(C), 8, [0, 3, 6])


def test_two_batches_with_the_same_base_offset() -> None:
    err = check(A + A + B, POS_B, 2, [0])
    assert "offsets not increasing" in err.reason


@pytest.mark.parametrize("base", [0, 1, 2])
def test_overlapping_batches(base: int) -> None:
    bad = bytearray(B)
    set_base_offset(bad, base)  # outside the CRC: the batch is otherwise valid
    check(A + bytes(bad) + C, POS_B, 2, [0])


def test_next_batch_must_follow_prev_last_offset() -> None:
    scan = scan_batches(B, path=PATH, prev_last_offset=5)
    assert scan.error is not None
    assert_error(scan.error, 0, 5)


def test_negative_last_offset_delta() -> None:
    bad = patch(B, True, (23, struct.pack(">i", -1)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "negative" in err.reason


# -- record-level damage (found by the index) -------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "raw"),
    [
        (61 + 4, b"\xff\xff\xff\xff\x7f"),  # key length: 35 bits in 5 bytes
        (61 + 4, b"\xff\xff\xff\xff\xff\x01"),  # key length: a 6-byte varint
        (61 + 3, b"\x80\x80\x80\x80\x80\x01"),  # offset delta: a 6-byte varint
        (61 + 2, b"\x80" * 10 + b"\x01"),  # timestamp delta: an 11-byte varlong
        (61 + 0, b"\xff\xff\xff\xff\x7f"),  # record length: 35 bits
    ],
    ids=["key-len-35-bits", "key-len-6-bytes", "offset-6-bytes", "ts-11-bytes", "length"],
)
def test_varint_overflow_in_a_record(offset: int, raw: bytes) -> None:
    bad = patch(B, True, (offset, raw))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "varint" in err.reason
    # the scan itself is fine: the damage is inside the batch
    assert scan_batches(A + bad + C).error is None


def test_varint_overflow_in_a_compressed_batch() -> None:
    plain = bytearray(make(3))
    plain[61 + 4 : 61 + 9] = b"\xff\xff\xff\xff\x7f"
    data = bytes(plain[61:])
    h = BatchHeader.parse(bytes(plain))
    payload = compress(Compression.LZ4, data)
    header = h.with_fields(batch_length=49 + len(payload), attributes=int(Compression.LZ4))
    bad = bytes(finish_crc(bytearray(header.pack() + payload)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "varint" in err.reason


@pytest.mark.parametrize("count", [4, 100, 2**31 - 1, 2, 0, -1])
def test_record_count_mismatch(count: int) -> None:
    bad = patch(B, True, (57, struct.pack(">i", count)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "record count" in err.reason or "past the end" in err.reason


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
@pytest.mark.parametrize("count", [4, 2])
def test_record_count_mismatch_compressed(codec: Compression, count: int) -> None:
    b = make(3, codec=codec)
    bad = patch(b, True, (57, struct.pack(">i", count)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "record count" in err.reason


def test_record_offset_beyond_last_offset() -> None:
    # B's records have offset deltas 0..2; claim the batch ends at delta 1
    bad = patch(B, True, (23, struct.pack(">i", 1)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "offset outside" in err.reason


def test_record_offset_below_base_offset() -> None:
    # first record's offset delta -1 (zig-zag 1): one byte, same size
    bad = patch(B, True, (61 + 3, b"\x01"))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "offset outside" in err.reason


def test_record_offsets_not_increasing() -> None:
    # second record's offset delta 0, same as the first
    first_len = B[61] // 2 + 1
    bad = patch(B, True, (61 + first_len + 3, b"\x00"))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "offset outside" in err.reason or "not increasing" in err.reason


def test_record_length_mismatch() -> None:
    # first record claims one byte less than it has
    bad = patch(B, True, (61, bytes([B[61] - 2])))
    check(A + bad + C, POS_B, 2, [0])


def test_negative_key_length_other_than_minus_one() -> None:
    bad = patch(B, True, (61 + 4, b"\x03"))  # zig-zag -2
    err = check(A + bad + C, POS_B, 2, [0])
    assert "negative length" in err.reason


CORRUPTIONS: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("truncated", lambda p: p[: len(p) // 2]),
    ("cut-last-byte", lambda p: p[:-1]),
    ("garbage", lambda p: b"this is not a compressed stream at all" * 2),
    ("empty", lambda p: b""),
    ("zeros", lambda p: bytes(len(p))),
]


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
@pytest.mark.parametrize(("how", "corrupt"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_corrupt_compressed_payload(
    codec: Compression, how: str, corrupt: Callable[[bytes], bytes]
) -> None:
    good = make(3, n=20, codec=codec)
    h = BatchHeader.parse(good)
    payload = corrupt(good[61:])
    header = h.with_fields(batch_length=49 + len(payload))
    bad = bytes(finish_crc(bytearray(header.pack() + payload)))
    data = A + bad + make(23)
    assert scan_batches(data).error is None  # CRC-valid: the damage is in the stream
    check(data, POS_B, 2, [0])


@pytest.mark.parametrize("cut", [1, 4])
def test_zstd_frame_cut_in_its_checksum(cut: int) -> None:
    # every record decodes from the cut frame; only the end of the frame is missing
    good = make(3)
    h = BatchHeader.parse(good)
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(good[61:])
    payload = frame[:-cut]
    header = h.with_fields(
        batch_length=49 + len(payload), attributes=h.attributes | int(Compression.ZSTD)
    )
    bad = bytes(finish_crc(bytearray(header.pack() + payload)))
    err = check(A + bad + C, POS_B, 2, [0])
    assert "truncated" in err.reason
    # the uncut frame is fine
    header = h.with_fields(
        batch_length=49 + len(frame), attributes=h.attributes | int(Compression.ZSTD)
    )
    fine = bytes(finish_crc(bytearray(header.pack() + frame)))
    assert [r.offset for r in full_read(A + fine + C)] == list(range(9))


# -- paths and positions ----------------------------------------------------------------------


def test_error_without_path_names_the_buffer() -> None:
    bad = patch(B, False, (16, b"\x07"))
    scan = scan_batches(A + bad)
    assert scan.error is not None
    assert scan.error.path is None
    assert str(scan.error).startswith(f"<buffer> at byte {POS_B}:")


def test_positions_with_a_start_offset() -> None:
    # scanning from the middle of a buffer: positions stay positions in the buffer
    prefix = b"\xee" * 17
    bad = patch(B, False, (18, b"\x00"))
    data = prefix + A + bad
    scan = scan_batches(data, start=len(prefix), path=PATH)
    assert scan.error is not None
    assert_error(scan.error, len(prefix) + POS_B, 2)


def test_located_shifts_positions() -> None:
    err = CorruptRecordError("boom", position=10, last_good_offset=4)
    moved = err.located("/x/y.log", 100)
    assert_error(moved, 110, 4, path="/x/y.log")


# -- fuzz: any single-byte damage is either harmless or a CorruptRecordError --------------------

CLEAN = b"".join(
    [
        make(0),
        make(3, codec=Compression.GZIP),
        make(6, codec=Compression.SNAPPY),
        make(9, codec=Compression.LZ4),
        make(12, codec=Compression.ZSTD),
        make(15),
    ]
)
STARTS = [int(p) for p in scan_batches(CLEAN).batches[:, k.B_POS]]


@settings(
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    pos=st.integers(0, len(CLEAN) - 1),
    xor=st.integers(1, 255),
    fix_crc=st.booleans(),
    cut=st.one_of(st.none(), st.integers(0, len(CLEAN))),
)
def test_single_byte_damage(pos: int, xor: int, fix_crc: bool, cut: int | None) -> None:
    data = bytearray(CLEAN)
    data[pos] ^= xor
    batch_index = max(i for i, s in enumerate(STARTS) if s <= pos)
    start = STARTS[batch_index]
    if fix_crc and pos >= start + 21:
        end = STARTS[batch_index + 1] if batch_index + 1 < len(STARTS) else len(data)
        view = bytearray(data[start:end])
        finish_crc(view)
        data[start:end] = view
    buf = bytes(data if cut is None else data[:cut])
    error: BaseException | None = None
    records: list[Record] = []
    try:
        records = full_read(buf)
    except Exception as e:  # anything but CorruptRecordError is the bug being tested for
        error = e
    if error is None:
        # undetected damage: only fields the layout and CRC do not pin down (leader epoch, ...)
        assert len(records) <= 18
        assert np.all(np.diff([r.offset for r in records]) > 0)
        return
    assert type(error) is CorruptRecordError, f"{type(error).__name__} escaped: {error}"
    assert error.path == PATH
    assert error.position is not None
    assert error.position in STARTS or error.position == len(CLEAN)
    # the last good offset is the last offset of the batch before the bad one, as stored
    # (a damaged base offset, outside the CRC, moves it)
    prior = [s for s in STARTS if s < error.position]
    if prior:
        (base,) = struct.unpack_from(">q", buf, prior[-1])
        (delta,) = struct.unpack_from(">i", buf, prior[-1] + 23)
        assert error.last_good_offset == base + delta
    else:
        assert error.last_good_offset == -1
