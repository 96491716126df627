"""The hot-path index on several threads, and the key hashes fused into the index kernel.

``index_batches``/``index_and_hash`` with ``threads`` > 1 must give exactly what one thread gives:
the same payload, record matrix and hashes, and for damaged input the same CorruptRecordError
(the first bad batch in batch order, its position, reason and last good offset), wherever the
chunk boundaries fall. Most tests lower the minimum chunk size so that small buffers are split
into many chunks (a boundary at every batch when there are few batches).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import mmh3
import numpy as np
import pytest

from cleanerd.format import indexing
from cleanerd.format import kernels as k
from cleanerd.format.builder import build_batch, finish_crc
from cleanerd.format.codecs import Compression
from cleanerd.format.errors import CorruptRecordError
from cleanerd.format.reader import (
    index_and_hash,
    index_batches,
    records_from_index,
    scan_batches,
)
from cleanerd.format.records import Record

U64 = (1 << 64) - 1
PATH = "/data/t-0/00000000000000000000.log"
THREADS = [2, 3, 4, 16]
CODEC_MIXES = {
    "none": [Compression.NONE],
    "lz4": [Compression.LZ4],
    "zstd": [Compression.ZSTD],
    "mixed": list(Compression),
}


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexing, "_MIN_RECORDS_PER_CHUNK", 1)


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
    data: bytes, threads: int, *, check_crc: bool = False, rows: np.ndarray | None = None
) -> tuple[bytes, np.ndarray, np.ndarray] | tuple[str, int | None, int, str]:
    """index_and_hash's result, or the error's type, position, last good offset and message."""
    scan = scan_batches(data, path=PATH, check_crc=not check_crc)
    scan.raise_error()
    batches = scan.batches if rows is None else scan.batches[rows]
    try:
        payload, records, hashes = index_and_hash(
            data, batches, path=PATH, check_crc=check_crc, threads=threads
        )
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


# -- same results on any number of threads ------------------------------------------------------


@pytest.mark.parametrize("mix", list(CODEC_MIXES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_threads_match_one_thread(mix: str, seed: int) -> None:
    data = b"".join(random_batches(seed, 40, CODEC_MIXES[mix]))
    one = result(data, 1)
    assert isinstance(one[1], np.ndarray)
    assert one[1].shape[0] > 100
    for threads in THREADS:
        assert_same(one, result(data, threads))
        assert_same(one, result(data, threads, check_crc=True))
    # index_batches gives the same payload and records
    scan = scan_batches(data)
    for threads in [1, *THREADS]:
        payload, records = index_batches(data, scan.batches, threads=threads)
        assert bytes(payload) == one[0]
        assert np.array_equal(records, one[1])


def test_default_chunk_size_splits_large_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real minimum chunk size
    assert indexing._MIN_RECORDS_PER_CHUNK >= 1000
    n = 2 * indexing._MIN_RECORDS_PER_CHUNK + 500
    recs = [Record(i, i, b"key-%d" % (i % 97), b"v" * (i % 13)) for i in range(n)]
    data = b"".join(build_batch(recs[i : i + 250]) for i in range(0, n, 250))
    one = result(data, 1)
    assert_same(one, result(data, 2))
    assert_same(one, result(data, 8, check_crc=True))


def test_empty_and_tiny_inputs() -> None:
    empty = np.zeros((0, k.BATCH_COLUMNS), dtype=np.int64)
    for threads in [1, 4]:
        payload, records, hashes = index_and_hash(b"", empty, threads=threads, check_crc=True)
        assert records.shape == (0, k.RECORD_COLUMNS)
        assert hashes.shape == (0, 2)
        assert payload.shape == (0,)
    one_batch = build_batch([Record(5, 1, b"k", b"v")])
    assert_same(result(one_batch, 1), result(one_batch, 4, check_crc=True))
    only_empty = build_batch([], base_offset=0, last_offset=3)
    assert_same(result(only_empty, 1), result(only_empty, 3))


def test_threads_must_be_positive() -> None:
    data = build_batch([Record(0, 1, b"k", b"v")])
    scan = scan_batches(data)
    with pytest.raises(ValueError, match="threads"):
        index_batches(data, scan.batches, threads=0)
    with pytest.raises(ValueError, match="threads"):
        index_and_hash(data, scan.batches, threads=-1)


def test_concurrent_callers_share_the_pool() -> None:
    data = b"".join(random_batches(7, 30, CODEC_MIXES["mixed"]))
    want = result(data, 1)
    got: list[object] = []

    def call() -> None:
        for _ in range(5):
            got.append(result(data, 3, check_crc=True))

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
    for threads in [1, 3]:
        payload, records, hashes = index_and_hash(data, scan.batches, threads=threads)
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


def test_kernel_rejects_small_outputs() -> None:
    data = np.frombuffer(build_batch([Record(i, i, b"k", b"v") for i in range(4)]), np.uint8)
    b = scan_batches(data).batches
    cols = [np.ascontiguousarray(b[:, c]) for c in (k.B_BASE_OFFSET, k.B_LAST_OFFSET)]
    args = (
        data,
        b[:, k.B_POS] + k.HEADER_SIZE,
        b[:, k.B_POS] + b[:, k.B_SIZE],
        *cols,
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


# -- the first error in batch order, whatever the chunks -----------------------------------------


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
    one = result(data, 1, check_crc=check_crc)
    assert isinstance(one[0], str), "no error"
    assert one[1] == pos[bad]
    for threads in THREADS:
        assert result(data, threads, check_crc=check_crc) == one


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
    one = result(bytes(same), 1, check_crc=True)
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
    for threads in [1, *THREADS]:
        assert result(bytes(broken), threads, check_crc=True) == want
    # without the CRC check, the planted record error is what is left to find
    expect_error(data, pos, 17, check_crc=True)


def test_offsets_must_increase_across_chunks() -> None:
    """Batches passed out of order: the check that crosses a chunk boundary."""
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
        one = result(data, 1, rows=idx)
        assert isinstance(one[0], str), rows
        assert "offset" in one[3]
        for threads in THREADS:
            assert result(data, threads, rows=idx) == one, (rows, threads)


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
def test_random_damage_same_error_on_every_thread_count(seed: int) -> None:
    for data in random_damage(seed):
        one = result(data, 1)
        for threads in THREADS:
            assert_same(one, result(data, threads))
            assert_same(one, result(data, threads, check_crc=True))


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
