"""The hot-path record index and the key hashes fused into its kernel.

``index_batches``/``index_and_hash`` give the same payload and record matrix, with and without the
CRC check, and for damaged input the CorruptRecordError of the first bad batch in batch order
(its position, reason and last good offset), whichever check finds it.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections.abc import Iterator

import mmh3
import numpy as np
import pytest

from cleanerd.format import (
    Compression,
    CorruptRecordError,
    Record,
    index_and_hash,
    index_batches,
    kernels as k,
    records_from_index,
    scan_batches,
)
from cleanerd.format._builder import build_batch, finish_crc

U64 = (1 << 64) - 1
PATH = "/data/t-0/00000000000000000000.log"
PROT_NONE = 0  # mprotect's "no access" (the mmap module names only the others)
CODEC_MIXES = {
    "none": [Compression.NONE],
    "lz4": [Compression.LZ4],
    "zstd": [Compression.ZSTD],
    "mixed": list(Compression),
}


def random_batches(
    seed: int,
    n_batches: int,
    codecs: list[Compression],
    max_records: int = 12,
    min_records: int = 0,
) -> list[bytes]:
    """Batches of random records: null, empty and long keys, tombstones, headers, offset gaps,
    LogAppendTime batches, empty batches; codecs drawn from ``codecs``."""
    rng = np.random.default_rng(seed)
    out = []
    offset = 0
    for _ in range(n_batches):
        codec = codecs[int(rng.integers(len(codecs)))]
        n = int(rng.integers(min_records, max_records + 1))
        base = offset
        recs = []
        for _ in range(n):
            kind = rng.integers(10)
            key = (
                None
                if kind == 0
                else b""
                if kind == 1
                else rng.bytes(int(rng.integers(1, 40 if kind == 2 else 16)))
            )
            value = None if rng.integers(6) == 0 else rng.bytes(int(rng.integers(0, 60)))
            headers = (("h", rng.bytes(3)),) if rng.integers(4) == 0 else ()
            recs.append(Record(offset, 1_700_000_000_000 + offset, key, value, headers))
            offset += 1 + int(rng.integers(0, 3))  # gaps, as compaction leaves them
        last = max(offset - 1, base) + int(rng.integers(0, 3))
        lat = bool(rng.integers(5) == 0)
        max_ts = -1 if lat and rng.integers(2) == 0 else None
        if recs:
            out.append(
                build_batch(
                    recs,
                    base_offset=base,
                    last_offset=last,
                    compression=codec,
                    log_append_time=lat,
                    max_timestamp=max_ts,
                )
            )
        else:
            out.append(build_batch([], base_offset=base, last_offset=last))
        offset = last + 1
    return out


def positions(batches: list[bytes]) -> list[int]:
    return [sum(len(b) for b in batches[:i]) for i in range(len(batches))]


def result(
    data: bytes, *, check_crc: bool = False, rows: np.ndarray | None = None
) -> tuple[bytes, np.ndarray, np.ndarray] | tuple[str, int | None, int, str]:
    """index_and_hash's result, or the error's type, position, last good offset and message."""
    scan = scan_batches(data, path=PATH, check_crc=not check_crc)
    scan.raise_error()
    batches = scan.batches if rows is None else scan.batches[rows]
    try:
        payload, records, hashes = index_and_hash(data, batches, path=PATH, check_crc=check_crc)
    except CorruptRecordError as e:
        return type(e).__name__, e.position, e.last_good_offset, str(e)
    return bytes(payload), records, hashes


def assert_same(a: object, b: object) -> None:
    assert type(a) is type(b)
    assert isinstance(a, tuple)
    assert isinstance(b, tuple)
    if isinstance(a[1], np.ndarray):
        assert a[0] == b[0]
        for x, y in zip(a[1:], b[1:], strict=True):
            assert x.dtype == y.dtype
            assert x.shape == y.shape
            assert np.array_equal(x, y)
    else:
        assert a == b


# -- the same results whichever way they are asked for -------------------------------------------


@pytest.mark.parametrize("mix", list(CODEC_MIXES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_index_batches_and_the_crc_check_give_the_same_index(mix: str, seed: int) -> None:
    data = b"".join(random_batches(seed, 40, CODEC_MIXES[mix]))
    one = result(data)
    assert isinstance(one[1], np.ndarray)
    assert one[1].shape[0] > 100
    assert_same(one, result(data, check_crc=True))
    payload, records = index_batches(data, scan_batches(data).batches)
    assert bytes(payload) == one[0]
    assert np.array_equal(records, one[1])


def test_empty_and_tiny_inputs() -> None:
    empty = np.zeros((0, k.BATCH_COLUMNS), dtype=np.int64)
    payload, records, hashes = index_and_hash(b"", empty, check_crc=True)
    assert records.shape == (0, k.RECORD_COLUMNS)
    assert hashes.shape == (0, 2)
    assert payload.shape == (0,)
    one_batch = build_batch([Record(5, 1, b"k", b"v")])
    assert_same(result(one_batch), result(one_batch, check_crc=True))
    only_empty = build_batch([], base_offset=0, last_offset=3)
    got = result(only_empty)
    assert isinstance(got[1], np.ndarray)
    assert got[1].shape == (0, k.RECORD_COLUMNS)


def test_records_that_end_at_an_unreadable_page_are_indexed() -> None:
    # the parser asks for the bytes a page ahead of each record (a prefetch hint): a segment
    # whose last record ends right before a page the process may not read (the end of a
    # mapped file) must be indexed exactly as the same bytes elsewhere, not fault
    data = b"".join(random_batches(5, 60, [Compression.NONE], max_records=20, min_records=1))
    page = mmap.PAGESIZE
    readable = -(-len(data) // page) * page
    region = mmap.mmap(-1, readable + page)  # unmapped when collected: views of it remain
    whole = np.frombuffer(region, dtype=np.uint8)
    start = readable - len(data)
    whole[start:readable] = np.frombuffer(data, dtype=np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    address = ctypes.c_void_p(whole.ctypes.data + readable)
    assert libc.mprotect(address, ctypes.c_size_t(page), PROT_NONE) == 0
    try:
        segment = whole[start:readable]
        batches = scan_batches(segment, path=PATH, check_crc=True).batches
        payload, records, hashes = index_and_hash(segment, batches, path=PATH)
    finally:
        assert libc.mprotect(address, ctypes.c_size_t(page), mmap.PROT_READ) == 0
    assert int(records[-1, k.R_POS] + records[-1, k.R_SIZE]) == len(data)  # the last byte
    want = index_and_hash(np.frombuffer(data, dtype=np.uint8), batches, path=PATH)
    assert bytes(payload) == bytes(want[0])
    assert np.array_equal(records, want[1])
    assert np.array_equal(hashes, want[2])


def test_concurrent_callers_get_their_own_results() -> None:
    """The daemon's workers index on several threads at once (the kernel releases the GIL)."""
    data = b"".join(random_batches(7, 30, CODEC_MIXES["mixed"]))
    want = result(data)
    got: list[object] = []

    def call() -> None:
        for _ in range(5):
            got.append(result(data, check_crc=True))

    workers = [threading.Thread(target=call) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(got) == 20
    for g in got:
        assert_same(want, g)


# -- fused key hashes ---------------------------------------------------------------------------


def mmh3_pair(key: bytes) -> tuple[int, int]:
    h = mmh3.hash128(key, 0, True, signed=False)
    return h & U64, h >> 64


@pytest.mark.parametrize("mix", ["none", "mixed"])
def test_fused_hashes_equal_hash_keys_and_mmh3(mix: str) -> None:
    data = b"".join(random_batches(11, 30, CODEC_MIXES[mix]))
    scan = scan_batches(data)
    payload, records, hashes = index_and_hash(data, scan.batches)
    assert hashes.dtype == np.uint64
    assert hashes.shape == (records.shape[0], 2)
    assert np.array_equal(hashes, k.hash_keys(payload, records))
    recs = list(records_from_index(payload, records))
    assert len(recs) == records.shape[0]
    for rec, (h1, h2) in zip(recs, hashes.tolist(), strict=True):
        assert (h1, h2) == ((0, 0) if rec.key is None else mmh3_pair(rec.key))


def test_fused_hashes_every_key_length() -> None:
    # every tail length of murmur3's 16-byte blocks, keys ending at the end of the buffer
    rng = np.random.default_rng(5)
    keys = [rng.bytes(n) for n in range(50)]
    recs = [Record(i, i, key, None) for i, key in enumerate(keys)]
    data = build_batch(recs)
    scan = scan_batches(data)
    _, records, hashes = index_and_hash(data, scan.batches)
    assert [tuple(h) for h in hashes.tolist()] == [mmh3_pair(key) for key in keys]
    # the kernel on its own: a key that is the last bytes of the buffer
    for key in keys:
        buf = np.frombuffer(b"xy" + key, dtype=np.uint8)
        assert tuple(int(h) for h in k.murmur3_128(buf, 2, len(key))) == mmh3_pair(key)
    assert records.shape[0] == 50


def test_murmur3_reads_only_the_key_wherever_it_lies() -> None:
    # the tail is read as whole words, some reaching back before the key: every length 0..64
    # at every start 0..9 of its buffer (the first 7 bytes take the byte-by-byte path), with
    # two different bytes around the key, must give mmh3's hash of the key alone
    rng = np.random.default_rng(11)
    for n in range(65):
        key = rng.bytes(n)
        want = mmh3_pair(key)
        for start in range(10):
            for fill in (0x00, 0xFF):
                buf = np.full(start + n + 3, fill, dtype=np.uint8)
                buf[start : start + n] = np.frombuffer(key, dtype=np.uint8)
                got = k.murmur3_128(buf[: start + n + (fill & 3)], start, n)
                assert tuple(int(h) for h in got) == want, (n, start, fill)


def test_kernel_rejects_small_outputs() -> None:
    data = np.frombuffer(build_batch([Record(i, i, b"k", b"v") for i in range(4)]), np.uint8)
    b = scan_batches(data).batches
    cols = [np.ascontiguousarray(b[:, c]) for c in (k.B_BASE_OFFSET, k.B_LAST_OFFSET)]
    args = (
        data,
        b[:, k.B_POS] + k.HEADER_SIZE,
        b[:, k.B_POS] + b[:, k.B_SIZE],
        cols[0],
        cols[1],
        np.ascontiguousarray(b[:, k.B_BASE_TIMESTAMP]),
        np.ascontiguousarray(b[:, k.B_COUNT]),
        np.full(1, -1, dtype=np.int64),
    )
    out = np.empty((4, k.RECORD_COLUMNS), dtype=np.int64)
    hashes = np.empty((4, 2), dtype=np.uint64)
    assert k.index_records_into(*args, out, hashes, 0, 1, 0, -1)[:2] == (4, k.REC_OK)
    with pytest.raises(ValueError, match="fewer rows"):
        k.index_records_into(*args, out[:3], hashes, 0, 1, 0, -1)
    with pytest.raises(ValueError, match="fewer rows"):
        k.index_records_into(*args, out, hashes[:3], 0, 1, 0, -1)
    with pytest.raises(ValueError, match="fewer rows"):
        k.index_records_into(*args, out, hashes, 0, 1, 1, -1)
    assert k.index_records_into(*args, out, k.NO_HASHES, 0, 1, 0, -1)[:2] == (4, k.REC_OK)
    # the kernel reads through raw pointers: ranges outside the inputs are refused up front
    with pytest.raises(ValueError, match="batch range"):
        k.index_records_into(*args, out, hashes, 0, 2, 0, -1)
    with pytest.raises(ValueError, match="batch range"):
        k.index_records_into(*args, out, hashes, 1, 0, 0, -1)
    short = (data[:-1], *args[1:])
    with pytest.raises(ValueError, match="outside the buffer"):
        k.index_records_into(*short, out, hashes, 0, 1, 0, -1)


# -- the first error in batch order, whichever check finds it ------------------------------------


def damage(data: bytearray, pos: int, kind: str) -> None:
    """Damage the batch at ``pos`` in a way the scan does not see (its CRC is recomputed)."""
    if kind == "record":  # first record's length varint: zig-zag -64, a negative length
        data[pos + k.HEADER_SIZE] = 0x7F
    elif kind == "count":  # a record count no payload can hold
        data[pos + 57 : pos + 61] = (0x7FFFFFF0).to_bytes(4, "big")
    elif kind == "codec":  # the compressed stream's magic number
        data[pos + k.HEADER_SIZE : pos + k.HEADER_SIZE + 4] = b"\0\0\0\0"
    finish_crc_at(data, pos, 12 + int.from_bytes(data[pos + 8 : pos + 12], "big"))


def planted(
    seed: int, codecs: list[Compression], plants: list[tuple[int, str]]
) -> tuple[bytes, list[int]]:
    batches = random_batches(seed, 24, codecs, max_records=8, min_records=1)
    pos = positions(batches)
    data = bytearray(b"".join(batches))
    for i, kind in plants:
        damage(data, pos[i], kind)
    return bytes(data), pos


def expect_error(data: bytes, pos: list[int], bad: int, *, check_crc: bool = False) -> None:
    one = result(data, check_crc=check_crc)
    assert isinstance(one[0], str), "no error"
    assert one[1] == pos[bad]


@pytest.mark.parametrize(
    ("plants", "codecs", "bad"),
    [
        ([(3, "record"), (20, "record")], [Compression.NONE], 3),
        ([(20, "record"), (3, "record")], [Compression.NONE], 3),
        ([(0, "record"), (23, "record")], [Compression.NONE], 0),
        ([(3, "record"), (20, "count")], [Compression.NONE], 3),
        ([(3, "count"), (20, "record")], [Compression.NONE], 3),
        ([(12, "record"), (13, "record")], [Compression.NONE], 12),
        ([(4, "codec"), (18, "codec")], [Compression.LZ4], 4),
        ([(15, "codec"), (18, "codec")], [Compression.ZSTD], 15),
    ],
)
def test_first_error_in_batch_order(
    plants: list[tuple[int, str]], codecs: list[Compression], bad: int
) -> None:
    data, pos = planted(9, codecs, plants)
    expect_error(data, pos, bad)
    expect_error(data, pos, bad, check_crc=True)


def test_record_error_before_a_codec_error() -> None:
    """A bad record in an uncompressed batch before a payload that does not decompress."""
    batches = [
        build_batch([Record(i, i, b"k", b"v")], compression=Compression.NONE if i < 10 else c)
        for i, c in zip(range(20), [Compression.LZ4, Compression.ZSTD] * 10, strict=True)
    ]
    pos = positions(batches)
    data = bytearray(b"".join(batches))
    damage(data, pos[15], "codec")
    damage(data, pos[5], "record")
    expect_error(bytes(data), pos, 5)
    data2 = bytearray(b"".join(batches))
    damage(data2, pos[15], "codec")
    expect_error(bytes(data2), pos, 15)


def test_codec_error_before_a_crc_error() -> None:
    data, pos = planted(6, [Compression.LZ4, Compression.ZSTD], [(4, "codec")])
    broken = bytearray(data)
    broken[pos[14] + 70] ^= 0xFF  # CRC left stale
    for kind in ("codec", "record", "count"):
        first = bytearray(broken)
        damage(first, pos[4], kind)
        expect_error(bytes(first), pos, 4, check_crc=True)
    # the CRC mismatch is reported when it comes first, or in the same batch
    same = bytearray(data)
    same[pos[4] + 70] ^= 0xFF
    one = result(bytes(same), check_crc=True)
    assert len(one) == 4
    assert one[1] == pos[4]
    assert "CRC mismatch" in str(one[3])
    expect_error(bytes(same), pos, 4, check_crc=True)


def test_crc_error_found_by_the_index() -> None:
    """check_crc in the index reports a CRC mismatch exactly as scan_batches does."""
    data, pos = planted(3, [Compression.NONE, Compression.LZ4], [(17, "record")])
    broken = bytearray(data)
    broken[pos[8] + 70] ^= 0xFF  # payload byte of batch 8; CRC left stale
    scan = scan_batches(bytes(broken), path=PATH)
    assert scan.error is not None
    assert scan.error.position == pos[8]
    want = ("CorruptRecordError", pos[8], scan.error.last_good_offset, str(scan.error))
    assert result(bytes(broken), check_crc=True) == want
    # without the CRC check, the planted record error is what is left to find
    expect_error(data, pos, 17, check_crc=True)


def test_offsets_must_increase_across_batches() -> None:
    """Batches passed out of order: the record offsets of one must follow the other's."""
    data = b"".join(random_batches(4, 16, [Compression.NONE], max_records=6))
    scan = scan_batches(data)
    n = len(scan)
    full = [int(i) for i in np.flatnonzero(scan.batches[:, k.B_COUNT])]  # batches with records
    assert len(full) >= 8
    for rows in (
        [*range(n), full[5]],
        [*range(full[7] + 1), *range(full[6], n)],
        [0, 1, 2, 3, full[1]],
        [full[3], full[2]],
        list(range(n))[::-1],
    ):
        idx = np.array(rows)
        one = result(data, rows=idx)
        assert isinstance(one[0], str), rows
        assert "offset" in one[3]


def random_damage(seed: int) -> Iterator[bytes]:
    rng = np.random.default_rng(seed)
    batches = random_batches(seed, 20, CODEC_MIXES["mixed"], max_records=6)
    pos = positions(batches)
    for _ in range(25):
        data = bytearray(b"".join(batches))
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(batches)))
            size = len(batches[i])
            at = pos[i] + int(rng.integers(k.HEADER_SIZE, size)) if size > k.HEADER_SIZE else None
            if at is None:
                continue
            data[at] = int(rng.integers(256))
            finish_crc_at(data, pos[i], size)
        yield bytes(data)


def finish_crc_at(data: bytearray, pos: int, size: int) -> None:
    data[pos : pos + size] = finish_crc(bytearray(data[pos : pos + size]))


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_random_damage_same_result_with_and_without_the_crc_check(seed: int) -> None:
    """The damage comes with a recomputed CRC: the CRC check finds nothing more."""
    errors = 0
    for data in random_damage(seed):
        one = result(data)
        assert_same(one, result(data, check_crc=True))
        errors += isinstance(one[0], str)
    assert errors > 0


# -- scan bounds -------------------------------------------------------------------------------


def test_scan_bounds_are_checked() -> None:
    data = build_batch([Record(0, 1, b"k", b"v")])
    with pytest.raises(ValueError, match=r"start=0, end=200 .* 10-byte buffer"):
        scan_batches(data[:10], end=200)
    with pytest.raises(ValueError, match="start=-1"):
        scan_batches(data, start=-1)
    with pytest.raises(ValueError, match=r"start=5, end=4"):
        scan_batches(data, start=5, end=4)
    with pytest.raises(ValueError, match=f"start={len(data) + 1}, end=None"):
        scan_batches(data, start=len(data) + 1)
    assert len(scan_batches(data, end=len(data))) == 1
    assert len(scan_batches(data, start=len(data))) == 0
    assert len(scan_batches(b"")) == 0
    scan = scan_batches(data, end=30)
    assert len(scan) == 0
    assert scan.error is not None
