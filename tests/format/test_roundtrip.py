"""Property tests: build_batch -> scan/index/records gives back exactly what went in.

Also: varint/varlong edge values (Python codec and numba kernel), the kernel's MurmurHash3
against ``mmh3``, and the LZ4 / snappy framing Kafka expects.
"""

from __future__ import annotations

import gzip
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cramjam
import crc32c
import lz4.block
import lz4.frame
import mmh3
import numpy as np
import pytest
import snappy
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.util import decode_varint as kp_decode_varint, encode_varint as kp_encode_varint

from cleanerd.format import (
    INT_MAX as INT32_MAX,
    INT_MIN as INT32_MIN,
    LONG_MAX as INT64_MAX,
    LONG_MIN as INT64_MIN,
    BatchHeader,
    CorruptRecordError,
    Record,
    index_batches,
    iter_batches,
    kernels as k,
    records_from_index,
    scan_batches,
)
from cleanerd.format._builder import build_batch, build_empty_batch, encode_records, finish_crc
from cleanerd.format._codecs import XERIAL_MAGIC, Compression, compress, decompress
from cleanerd.format._varint import (
    read_varint,
    read_varlong,
    varint_size,
    write_varint,
    write_varlong,
)

SETTINGS = settings(
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
U64 = 2**64 - 1

# -- strategies --------------------------------------------------------------------------------

blobs = st.one_of(
    st.none(),
    st.binary(max_size=48),
    st.text(max_size=24).map(lambda s: s.encode("utf-8")),
    # compressible, so codecs do real work
    st.tuples(st.sampled_from([b"a", b"xyz", b"\x00\xff"]), st.integers(0, 300)).map(
        lambda t: t[0] * t[1]
    ),
)
headers_st = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=24))), max_size=4
).map(tuple)
timestamps = st.one_of(
    st.integers(-(2**50), 2**50),
    st.integers(1_700_000_000_000 - 10_000, 1_700_000_000_000 + 10_000),
    st.just(-1),
)


@dataclass
class Spec:
    records: list[Record]
    kwargs: dict[str, Any] = field(default_factory=dict)
    base_offset: int = 0
    last_offset: int = 0


@st.composite
def batch_spec(draw: st.DrawFn, min_base: int = 0) -> Spec:
    n = draw(st.integers(1, 10))
    base = draw(st.integers(min_base, min_base + 2**40))
    lead = draw(st.integers(0, 3))  # first record may sit after the base offset (compacted)
    gaps = draw(st.lists(st.integers(1, 2**20), min_size=n - 1, max_size=n - 1))
    offsets = [base + lead]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    tail = draw(st.integers(0, 5))  # and the last record before the last offset
    records = [
        Record(off, draw(timestamps), draw(blobs), draw(blobs), draw(headers_st)) for off in offsets
    ]
    transactional = draw(st.booleans())
    has_producer = transactional or draw(st.booleans())
    kwargs: dict[str, Any] = {
        "base_offset": base,
        "last_offset": offsets[-1] + tail,
        "compression": draw(st.sampled_from(list(Compression))),
        "log_append_time": draw(st.booleans()),
        "transactional": transactional,
        "control": draw(st.booleans()),
        "producer_id": draw(st.integers(0, 2**63 - 1)) if has_producer else -1,
        "producer_epoch": draw(st.integers(0, 2**15 - 1)) if has_producer else -1,
        "base_sequence": draw(st.integers(0, 2**31 - 1)) if has_producer else -1,
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
    }
    choice = draw(st.sampled_from(["first", "horizon", "explicit"]))
    if choice == "horizon":
        kwargs["delete_horizon_ms"] = draw(st.integers(0, 2**50))
    elif choice == "explicit":
        kwargs["base_timestamp"] = draw(timestamps)
    if draw(st.booleans()):
        kwargs["max_timestamp"] = draw(timestamps)
    return Spec(records, kwargs, base, offsets[-1] + tail)


@st.composite
def batch_specs(draw: st.DrawFn) -> list[Spec]:
    specs = [draw(batch_spec())]
    for _ in range(draw(st.integers(0, 3))):
        specs.append(draw(batch_spec(min_base=specs[-1].last_offset + 1)))
    return specs


def _expected_header(spec: Spec, raw: bytes) -> BatchHeader:
    kw = spec.kwargs
    attrs = int(kw["compression"])
    attrs |= 0x08 if kw["log_append_time"] else 0
    attrs |= 0x10 if kw["transactional"] else 0
    attrs |= 0x20 if kw["control"] else 0
    attrs |= 0x40 if "delete_horizon_ms" in kw else 0
    if "delete_horizon_ms" in kw:
        base_ts = kw["delete_horizon_ms"]
    elif "base_timestamp" in kw:
        base_ts = kw["base_timestamp"]
    else:
        base_ts = spec.records[0].timestamp
    return BatchHeader(
        base_offset=spec.base_offset,
        batch_length=len(raw) - 12,
        partition_leader_epoch=kw["partition_leader_epoch"],
        magic=2,
        crc=crc32c.crc32c(raw[21:]),
        attributes=attrs,
        last_offset_delta=spec.last_offset - spec.base_offset,
        base_timestamp=base_ts,
        max_timestamp=kw.get("max_timestamp", max(r.timestamp for r in spec.records)),
        producer_id=kw["producer_id"],
        producer_epoch=kw["producer_epoch"],
        base_sequence=kw["base_sequence"],
        records_count=len(spec.records),
    )


def _expected_records(spec: Spec, header: BatchHeader) -> list[Record]:
    if not spec.kwargs["log_append_time"]:
        return spec.records
    # LogAppendTime: every record reads as the batch max timestamp (Kafka's DefaultRecord.readFrom)
    return [Record(r.offset, header.max_timestamp, r.key, r.value, r.headers) for r in spec.records]


def _as_buffer(data: bytes, kind: str) -> Any:
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(data)
    if kind == "numpy":
        return np.frombuffer(data, dtype=np.uint8).copy()
    return data


def _mmh3_pair(key: bytes) -> tuple[int, int]:
    h = mmh3.hash128(key, 0, True, signed=False)
    return h & U64, h >> 64


# -- batches round trip ------------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(specs=batch_specs(), kind=st.sampled_from(["bytes", "bytearray", "memoryview", "numpy"]))
def test_build_scan_index_roundtrip(specs: list[Spec], kind: str) -> None:
    raws = [build_batch(s.records, **s.kwargs) for s in specs]
    data = b"".join(raws)
    buf = _as_buffer(data, kind)

    scan = scan_batches(buf, path="rt.log")
    assert scan.error is None
    assert scan.end == len(data)
    assert len(scan) == len(specs)

    expected_records: list[Record] = []
    expected_batch_rows: list[int] = []
    pos = 0
    for i, (spec, raw) in enumerate(zip(specs, raws, strict=True)):
        want = _expected_header(spec, raw)
        got = scan.header(i)
        assert got == want
        assert BatchHeader.parse(data, pos) == want
        assert int(scan.batches[i, k.B_POS]) == pos
        assert got.delete_horizon_ms == spec.kwargs.get("delete_horizon_ms")
        assert got.compression == spec.kwargs["compression"]
        pos += len(raw)
        recs = _expected_records(spec, want)
        expected_records += recs
        expected_batch_rows += [i] * len(recs)

    payload, index = index_batches(buf, scan.batches, path="rt.log")
    assert list(records_from_index(payload, index)) == expected_records
    assert [int(b) for b in index[:, k.R_BATCH]] == expected_batch_rows
    # key/value lengths in the index (-1 for null) match the records
    assert [int(x) for x in index[:, k.R_KEY_LEN]] == [
        -1 if r.key is None else len(r.key) for r in expected_records
    ]
    assert [int(x) for x in index[:, k.R_VALUE_LEN]] == [
        -1 if r.value is None else len(r.value) for r in expected_records
    ]

    # per-batch slow path agrees
    batches = list(iter_batches(buf, path="rt.log"))
    assert [r for b in batches for r in b.records()] == expected_records
    assert [bytes(b.raw) for b in batches] == raws

    # the kernel's key hash over the payload, for keys at arbitrary positions
    hashes = k.hash_keys(payload, index)
    for r, (h1, h2) in zip(expected_records, hashes, strict=True):
        want_hash = (0, 0) if r.key is None else _mmh3_pair(r.key)
        assert (int(h1), int(h2)) == want_hash


@pytest.mark.parametrize("codec", list(Compression))
def test_large_batch_every_codec(codec: Compression) -> None:
    # payloads beyond one LZ4 block (64 KiB) and one xerial block (32 KiB)
    rng = np.random.default_rng(int(codec))
    records = [
        Record(
            1000 + 3 * i,
            1_700_000_000_000 - 7 * i,
            f"key-{i:06d}".encode(),
            bytes(rng.integers(0, 4, 3000, dtype=np.uint8)) if i % 5 else None,
            (("h", None), ("ü", b"\x00")),
        )
        for i in range(80)
    ]
    raw = build_batch(records, compression=codec)
    (batch,) = list(iter_batches(raw))
    assert batch.header.compression == codec
    assert batch.records() == records


def test_log_append_time_with_unset_max_timestamp() -> None:
    # Kafka gives every record of a LogAppendTime batch its maxTimestamp, even -1
    records = [Record(4, 100, b"a", b"1"), Record(5, 200, b"b", None)]
    for codec in (Compression.NONE, Compression.GZIP):
        lat = build_batch(records, log_append_time=True, max_timestamp=-1, compression=codec)
        other = build_batch([Record(9, 7, b"c", b"2")], log_append_time=True, max_timestamp=50)
        data = lat + other
        scan = scan_batches(data)
        payload, index = index_batches(data, scan.batches)
        assert [r.timestamp for r in records_from_index(payload, index)] == [-1, -1, 50]
        (b0, _) = list(iter_batches(data))
        assert [r.timestamp for r in b0.records()] == [-1, -1]


@pytest.mark.parametrize("codec", list(Compression))
def test_empty_batch_with_codec_bits_has_no_records(codec: Compression) -> None:
    # Kafka's DefaultRecordBatch.iterator() returns nothing for count 0 without decompressing,
    # so a header-only batch that still carries codec bits must read as empty, not as corrupt.
    raw = bytearray(build_empty_batch(base_offset=3, last_offset=8, max_timestamp=9))
    raw[22] |= int(codec)
    finish_crc(raw)
    (batch,) = list(iter_batches(bytes(raw)))
    assert batch.header.compression == codec
    assert batch.records() == []
    scan = scan_batches(bytes(raw))
    _, index = index_batches(bytes(raw), scan.batches)
    assert index.shape[0] == 0


def test_batches_through_mmap(tmp_path: Path) -> None:
    specs = [
        [Record(0, 10, b"a", b"1"), Record(2, 5, None, None, (("x", None),))],
        [Record(7, -3, b"b", b"2" * 1000)],
    ]
    data = build_batch(specs[0], compression=Compression.GZIP) + build_batch(
        specs[1], compression=Compression.ZSTD
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        scan = scan_batches(mm, path=str(path))
        assert scan.error is None
        payload, index = index_batches(mm, scan.batches)
        assert list(records_from_index(payload, index)) == specs[0] + specs[1]
        del payload, index, scan  # release exported buffers before the mmap closes


# -- varints ---------------------------------------------------------------------------------


def _edges(lo: int, hi: int, bits: int) -> list[int]:
    vals = {0, 1, -1, lo, hi, lo + 1, hi - 1}
    for e in range(bits):
        for s in (1, -1):
            for d in (-1, 0, 1):
                vals.add(s * 2**e + d)
    # zig-zag size boundaries: raw = 2^(7m) <=> n = 2^(7m-1) or -2^(7m-1) - 1
    for m in range(1, 10):
        for d in (-1, 0, 1):
            vals.add(2 ** (7 * m - 1) + d)
            vals.add(-(2 ** (7 * m - 1)) - 1 + d)
    return sorted(v for v in vals if lo <= v <= hi)


INT32_EDGES = _edges(INT32_MIN, INT32_MAX, 32)
INT64_EDGES = _edges(INT64_MIN, INT64_MAX, 64)


def _reference_varint(value: int, bits: int) -> bytes:
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_edge_lists_cover_the_extremes() -> None:
    assert {INT32_MIN, INT32_MAX, 0, -1, 1, 2**31 - 2, -(2**31) + 1} <= set(INT32_EDGES)
    assert {INT64_MIN, INT64_MAX, 2**32, -(2**32), 2**62} <= set(INT64_EDGES)


def test_varint_edges() -> None:
    for value in INT32_EDGES:
        out = bytearray(b"\xaa")  # writes append
        write_varint(value, out)
        enc = bytes(out[1:])
        assert enc == _reference_varint(value, 32), value
        assert len(enc) == varint_size(value) <= 5, value
        assert read_varint(bytes(out), 1) == (value, len(out)), value
        assert read_varint(memoryview(bytes(out) + b"\xff\xff"), 1) == (value, len(out)), value
        # kafka-python encodes int32 values identically (64-bit zig-zag agrees on that range)
        kp = bytearray()
        kp_encode_varint(value, kp.append)
        assert bytes(kp) == enc, value
        assert kp_decode_varint(enc, 0) == (value, len(enc)), value
        # the numba decoder
        arr = np.frombuffer(enc + b"\x00", dtype=np.uint8)
        got, nxt, err = k._varint(arr, 0, len(arr), 5)
        assert (int(got), int(nxt), int(err)) == (value, len(enc), k.REC_OK), value


def test_varlong_edges() -> None:
    for value in INT64_EDGES:
        out = bytearray()
        write_varlong(value, out)
        enc = bytes(out)
        assert enc == _reference_varint(value, 64), value
        assert len(enc) == varint_size(value) <= 10, value
        assert read_varlong(enc, 0) == (value, len(enc)), value
        kp = bytearray()
        kp_encode_varint(value, kp.append)
        assert bytes(kp) == enc, value
        arr = np.frombuffer(enc, dtype=np.uint8)
        got, nxt, err = k._varint(arr, 0, len(arr), 10)
        assert (int(got), int(nxt), int(err)) == (value, len(enc), k.REC_OK), value


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, 2**40, -(2**63)])
def test_varint_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        write_varint(value, bytearray())
    # and a reader refuses a varlong-sized value where a varint is expected
    enc = _reference_varint(value, 64)
    with pytest.raises(CorruptRecordError):
        read_varint(enc, 0)
    arr = np.frombuffer(enc, dtype=np.uint8)
    assert int(k._varint(arr, 0, len(arr), 5)[2]) == k.REC_VARINT_TOO_LONG


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varlong_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        write_varlong(value, bytearray())


def test_varint_reader_limits() -> None:
    five_byte_overflow = b"\xff\xff\xff\xff\x1f"  # 35 bits
    with pytest.raises(CorruptRecordError, match="overflows"):
        read_varint(five_byte_overflow, 0)
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        read_varint(b"\x80\x80\x80\x80\x80\x00", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(CorruptRecordError, match="past the end"):
        read_varint(b"\x80\x80", 0)
    arr = np.frombuffer(b"\x80\x80", dtype=np.uint8)
    assert int(k._varint(arr, 0, 2, 5)[2]) == k.REC_OUT_OF_BOUNDS
    arr = np.frombuffer(b"\x80" * 10 + b"\x00", dtype=np.uint8)
    assert int(k._varint(arr, 0, 11, 10)[2]) == k.REC_VARINT_TOO_LONG


@given(st.integers(INT32_MIN, INT32_MAX))
@SETTINGS
def test_varint_property(value: int) -> None:
    out = bytearray()
    write_varint(value, out)
    assert bytes(out) == _reference_varint(value, 32)
    assert read_varint(bytes(out), 0) == (value, len(out))


@given(st.integers(INT64_MIN, INT64_MAX))
@SETTINGS
def test_varlong_property(value: int) -> None:
    out = bytearray()
    write_varlong(value, out)
    assert bytes(out) == _reference_varint(value, 64)
    assert read_varlong(bytes(out), 0) == (value, len(out))


LENGTH_EDGES = [0, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384]


@pytest.mark.parametrize("codec", list(Compression))
def test_kernel_decodes_edge_fields(codec: Compression) -> None:
    """Records whose varint fields sit on encoding boundaries, through the numba index."""
    base_offset = 2**40
    ts_edges = INT64_EDGES  # timestamp deltas from base timestamp 0: the full varlong range
    off_edges = [d for d in INT32_EDGES if d >= 0]
    n = max(len(ts_edges), len(off_edges))
    off_deltas = sorted(set(off_edges) | set(range(2**31 - 1 - n, 2**31 - 1)))[:n]
    off_deltas[-1] = INT32_MAX
    records = []
    for i in range(n):
        klen = LENGTH_EDGES[i % len(LENGTH_EDGES)]
        vlen = LENGTH_EDGES[(i + 3) % len(LENGTH_EDGES)]
        value = None if i % 7 == 0 else bytes([i % 251]) * vlen
        nh = 64 if i == 5 else i % 3
        headers = tuple(
            (f"h{j}", None if j % 2 else b"v" * (64 if j == 0 else j)) for j in range(nh)
        )
        records.append(
            Record(
                base_offset + off_deltas[i],
                ts_edges[i % len(ts_edges)],
                bytes([i % 256]) * klen if i % 11 else None,
                value,
                headers,
            )
        )
    raw = build_batch(records, base_timestamp=0, compression=codec)
    scan = scan_batches(raw)
    assert scan.error is None
    h = scan.header(0)
    assert h.base_timestamp == 0
    assert h.last_offset_delta == INT32_MAX
    assert h.max_timestamp == INT64_MAX
    payload, index = index_batches(raw, scan.batches)
    assert list(records_from_index(payload, index)) == records
    assert INT64_MIN in [int(t) for t in index[:, k.R_TIMESTAMP]]


# -- MurmurHash3 x64 128 ---------------------------------------------------------------------


def test_mmh3_orders_h1_in_the_low_bits() -> None:
    # Published vector (e.g. Guava's murmur3_128 hex 6c1b07bc7bbc4be347939ac4a93c437a):
    # h1 = e34bbc7bbc071b6c, h2 = 7a433ca9c49a9347
    key = b"The quick brown fox jumps over the lazy dog"
    h = mmh3.hash128(key, 0, True, signed=False)
    assert h & U64 == 0xE34BBC7BBC071B6C
    assert h >> 64 == 0x7A433CA9C49A9347
    # the canonical byte output is h1 then h2, little-endian
    raw = mmh3.hash_bytes(key, 0, True)
    assert struct.unpack("<QQ", raw) == (h & U64, h >> 64)
    assert mmh3.hash64(key, 0, True, signed=False) == (h & U64, h >> 64)
    arr = np.frombuffer(key, dtype=np.uint8)
    h1, h2 = k.murmur3_128(arr, 0, len(key))
    assert (int(h1), int(h2)) == (0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347)


def test_murmur3_empty_key_is_zero() -> None:
    h1, h2 = k.murmur3_128(np.zeros(0, dtype=np.uint8), 0, 0)
    assert (int(h1), int(h2)) == (0, 0) == _mmh3_pair(b"")


def test_murmur3_every_tail_length() -> None:
    for length in range(65):
        key = bytes((i * 37 + length) % 256 for i in range(length))
        arr = np.frombuffer(key, dtype=np.uint8) if key else np.zeros(0, dtype=np.uint8)
        h1, h2 = k.murmur3_128(arr, 0, length)
        assert (int(h1), int(h2)) == _mmh3_pair(key), length


@SETTINGS
@given(key=st.binary(max_size=64), prefix=st.binary(max_size=20), suffix=st.binary(max_size=20))
def test_murmur3_matches_mmh3(key: bytes, prefix: bytes, suffix: bytes) -> None:
    buf = np.frombuffer(prefix + key + suffix + b"\x00", dtype=np.uint8)
    h1, h2 = k.murmur3_128(buf, len(prefix), len(key))
    assert (int(h1), int(h2)) == _mmh3_pair(key)


# -- codec framing ---------------------------------------------------------------------------


LZ4_HC = (xxhash.xxh32(bytes([0x60, 0x40]), seed=0).intdigest() >> 8) & 0xFF


def _lz4_blocks(frame: bytes) -> list[tuple[bool, bytes]]:
    """Split a Kafka-style LZ4 frame (7-byte header, no checksums) into (compressed, data)."""
    pos = 7
    blocks = []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        stored = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        assert size <= 64 * 1024
        blocks.append((not stored, frame[pos : pos + size]))
        pos += size
    assert pos == len(frame), "no content checksum may follow the end mark"
    return blocks


@pytest.mark.parametrize(
    "data",
    [
        b"x",
        b"abc" * 10,
        bytes(range(256)) * 700,  # 179,200 bytes: several compressible blocks
        np.random.default_rng(1).bytes(150_000),  # incompressible: stored blocks
    ],
    ids=["one-byte", "small", "multi-block", "random"],
)
def test_lz4_frame_is_what_kafka_reads(data: bytes) -> None:
    frame = compress(Compression.LZ4, data)
    assert frame[:4] == struct.pack("<I", 0x184D2204)
    assert frame[4] == 0x60  # version 01, independent blocks, no checksums, no content size
    assert frame[5] == 0x40  # 64 KiB max block
    assert frame[6] == LZ4_HC
    assert (xxhash.xxh32(frame[4:6]).intdigest() >> 8) & 0xFF == LZ4_HC
    # every block decodes on its own (Kafka rejects linked blocks)
    out = b""
    for compressed, block in _lz4_blocks(frame):
        out += lz4.block.decompress(block, uncompressed_size=64 * 1024) if compressed else block
    assert out == data
    assert decompress(Compression.LZ4, frame) == data
    assert lz4.frame.decompress(frame) == data


def test_lz4_reads_frames_with_content_size_and_checksum() -> None:
    data = b"kafka" * 5000
    frame = lz4.frame.compress(data, block_linked=False, content_checksum=True, store_size=True)
    assert decompress(Compression.LZ4, frame) == data


@pytest.mark.parametrize("size", [1, 100, 32 * 1024, 32 * 1024 + 1, 100_000])
def test_snappy_xerial_framing(size: int) -> None:
    data = (bytes(range(200)) * (size // 200 + 1))[:size]
    out = compress(Compression.SNAPPY, data)
    assert out[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    pos, blocks, decoded = 16, 0, b""
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        pos += 4
        decoded += snappy.uncompress(out[pos : pos + n])  # raw snappy blocks
        pos += n
        blocks += 1
    assert decoded == data
    assert blocks == -(-size // (32 * 1024))  # 32 KiB of input per block, like snappy-java
    assert decompress(Compression.SNAPPY, out) == data


@pytest.mark.parametrize("size", [1, 100, 100_000])
def test_snappy_raw_input_decodes(size: int) -> None:
    data = (b"raw snappy " * (size // 11 + 1))[:size]
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_gzip_and_zstd_are_standard_streams() -> None:
    data = b"gzip and zstd " * 1000
    gz = compress(Compression.GZIP, data)
    assert gz[:2] == b"\x1f\x8b"
    assert gzip.decompress(gz) == data
    zs = compress(Compression.ZSTD, data)
    assert zs[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompressobj().decompress(zs) == data
    # a one-shot frame declaring its content size (other writers' way; zstd-jni's stream never
    # declares it) also decodes
    one_shot = zstandard.ZstdCompressor(level=3).compress(data)
    assert zstandard.frame_content_size(one_shot) == len(data)
    assert zstandard.frame_content_size(zs) == -1
    assert decompress(Compression.ZSTD, one_shot) == data
    assert compress(Compression.NONE, data) == data


def test_encode_records_layout() -> None:
    # one record with a header with a null value, by hand
    rec = Record(12, 995, None, b"v", (("h", None),))
    body = encode_records([rec], base_offset=10, base_timestamp=1000)
    # length 10, attrs 0, ts delta -5 -> 9, offset delta 2 -> 4, key -1 -> 1, value 1 -> 2 'v',
    # 1 header -> 2, key len 1 -> 2 'h', value -1 -> 1
    assert body == bytes([0x14, 0, 9, 4, 1, 2, ord("v"), 2, 2, ord("h"), 1])
