"""``format._native_lay_out``: what the kernel decodes through liblz4's and libzstd's C decoders
is exactly what the codec bindings decode, and what it leaves (another frame layout, a corrupt
frame, no room, past a bound) the bindings decide.

The oracles are python-lz4's frame decoder and the zstandard binding as ``format._codecs`` calls
them; frames come from liblz4's and libzstd's encoders with Kafka's settings and others, whole,
cut short and with bytes changed.
"""

from __future__ import annotations

import os
import random
import threading
from typing import Any

import lz4.frame
import numpy as np
import pytest
import zstandard

from cleanerd.format import (
    Compression,
    CorruptRecordError,
    Record,
    _payloads as payloads_mod,
    build_batch,
    lay_out,
    limit_decompression,
    scan_batches,
)
from cleanerd.format._codecs import decompress
from cleanerd.format._native_lay_out import (
    LZ4_CODEC,
    ZSTD_CODEC,
    Decoders,
    decoders,
    header_checksum,
    lay_out_native,
    zstd_context,
)

KAFKA_LZ4 = {
    "block_size": lz4.frame.BLOCKSIZE_MAX64KB,
    "block_linked": False,
    "content_checksum": False,
    "store_size": False,
}


def _data(rng: random.Random) -> bytes:
    n = rng.choice([0, 1, 15, 16, 17, 100, 4096, 65536, 65537, 200_000, rng.randrange(300_000)])
    kind = rng.randrange(3)
    if kind == 0:
        return os.urandom(n)
    if kind == 1:
        return bytes(rng.choice(b"ab") for _ in range(min(n, 3000))) * max(1, n // 3000)
    return b"".join(b"key-%06d {value: %d} " % (rng.randrange(50), i) for i in range(n // 24))


def _kafka_zstd(data: bytes, level: int = 3, checksum: bool = False) -> bytes:
    """A frame as a streaming writer (zstd-jni's ``ZstdOutputStream``) makes it: no content
    size in the header."""
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=checksum, write_content_size=False)
    obj = cctx.compressobj()
    return obj.compress(data) + obj.flush()


def _kernel(
    frame: bytes, codec: int = LZ4_CODEC, limit: int = 1 << 21, room: int = 1 << 22
) -> bytes | None:
    """The kernel's decoding of one batch payload, or None when it leaves it."""
    src = np.frombuffer(frame, np.uint8)
    out = np.zeros(room, np.uint8)
    ends = np.zeros(1, np.int64)
    one = np.ones(1, np.int64)
    fns = decoders().addresses
    zstd = zstd_context()
    done, q = lay_out_native(
        src, np.zeros(1, np.int64), one * len(frame), one * codec, one, out, ends, 0, 0,
        limit, room, fns, zstd.address, zstd.buffers,
    )  # fmt: skip
    return bytes(out[:q]) if done == 1 else None


def _binding(frame: bytes, codec: int = LZ4_CODEC) -> bytes | None:
    try:
        return decompress(Compression(codec), frame, 1 << 30)
    except CorruptRecordError:
        return None


def test_both_decoders_are_found_in_the_codec_packages() -> None:
    found = decoders()
    assert found.codecs == {LZ4_CODEC, ZSTD_CODEC}
    assert all(found.addresses)
    assert zstd_context().address != 0
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(zstd_context().address))
    worker.start()
    worker.join()
    assert seen[0] not in (0, zstd_context().address)  # a context per thread


def test_kafkas_lz4_frames_are_decoded_as_the_binding_decodes_them() -> None:
    rng = random.Random(24)
    for _ in range(400):
        data = _data(rng)
        frame = lz4.frame.compress(data, compression_level=rng.choice([0, 3, 12]), **KAFKA_LZ4)
        assert _kernel(frame) == data


def test_kafkas_zstd_frames_are_decoded_as_the_binding_decodes_them() -> None:
    rng = random.Random(25)
    for _ in range(200):
        data = _data(rng)
        checksum = rng.random() < 0.5
        frame = _kafka_zstd(data, level=rng.choice([1, 3, 9]), checksum=checksum)
        assert _kernel(frame, ZSTD_CODEC) == data
        assert _kernel(zstandard.ZstdCompressor().compress(data), ZSTD_CODEC) == data  # sized


@pytest.mark.parametrize(
    "settings",
    [
        {"block_linked": True},
        {"content_checksum": True},
        {"store_size": True},
        {"block_checksum": True},
    ],
)
def test_lz4_frames_with_what_kafka_does_not_write_go_to_the_binding(
    settings: dict[str, Any],
) -> None:
    data = b"a record value " * 5000
    frame = lz4.frame.compress(data, **(KAFKA_LZ4 | settings))
    assert _kernel(frame) is None
    assert _binding(frame) == data


def test_zstd_payloads_other_than_one_frame_go_to_the_binding() -> None:
    data = b"a record value " * 5000
    one = _kafka_zstd(data)
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    for payload in (one + one, skippable + one, one + b"\0", one[:-1], b"", b"\x28\xb5"):
        assert _kernel(payload, ZSTD_CODEC) is None, payload[:8]


@pytest.mark.parametrize("codec", [LZ4_CODEC, ZSTD_CODEC])
def test_a_corrupt_frame_the_kernel_takes_is_one_the_binding_takes_alike(codec: int) -> None:
    """Frames with bytes changed or cut short: never a decoding the binding would not give."""
    rng = random.Random(7 + codec)
    taken = refused = 0
    for _ in range(1500):
        data = _data(rng)
        whole = (
            lz4.frame.compress(data, **KAFKA_LZ4)
            if codec == LZ4_CODEC
            else _kafka_zstd(data, checksum=rng.random() < 0.5)
        )
        frame = bytearray(whole)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(frame))
            frame[at] = rng.randrange(256)
        if rng.random() < 0.3:
            frame = frame[: rng.randrange(len(frame) + 1)]
        got = _kernel(bytes(frame), codec)
        if got is None:
            refused += 1
            continue
        taken += 1
        assert got == _binding(bytes(frame), codec)
    assert taken > 100
    assert refused > 100


def test_the_lz4_header_checksum_is_liblz4s() -> None:
    for block_size in (lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB,
                       lz4.frame.BLOCKSIZE_MAX1MB, lz4.frame.BLOCKSIZE_MAX4MB):  # fmt: skip
        for linked in (False, True):
            frame = lz4.frame.compress(b"x", **(KAFKA_LZ4 | {"block_size": block_size,
                                                            "block_linked": linked}))  # fmt: skip
            assert header_checksum(frame[4], frame[5]) == frame[6]


@pytest.mark.parametrize("codec", [LZ4_CODEC, ZSTD_CODEC])
def test_the_kernel_stops_at_its_bounds(codec: int) -> None:
    data = os.urandom(1000) * 100  # 100 kB, compresses well
    frame = lz4.frame.compress(data, **KAFKA_LZ4) if codec == LZ4_CODEC else _kafka_zstd(data)
    assert _kernel(frame, codec) == data
    assert _kernel(frame, codec, limit=len(data) - 1) is None  # past the batch bound
    assert _kernel(frame, codec, room=len(data) - 1) is None  # past the room it has
    assert _kernel(frame, codec, limit=len(data), room=len(data)) == data


def _without_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    none = Decoders(0, 0, 0, 0)
    monkeypatch.setattr(payloads_mod, "decoders", lambda: none)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
@pytest.mark.parametrize("corrupt", [None, "frame", "bomb", "chunk"])
def test_lay_out_gives_what_the_binding_path_gives(
    codec: Compression, corrupt: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk of compressed batches (with an uncompressed one and one of another codec between
    them), whole, with one frame corrupt, with one batch past
    ``max.decompressed.message.bytes``, and adding up past the chunk's bound: the same payloads,
    and the same error at the same batch, with the kernel and with the bindings alone (the
    chunk's bound here four times the limit, with no floor under it)."""
    limit = 1 << 20
    monkeypatch.setattr(payloads_mod, "CHUNK_PAYLOADS_FLOOR", 1)
    rng = random.Random(3)
    raw = []
    for i in range(12):
        this = {5: Compression.NONE, 2: Compression.GZIP}.get(i, codec)
        value = os.urandom(rng.randrange(100, 2000)) * rng.randrange(1, 40)
        if corrupt == "bomb" and i == 7:
            value = bytes(limit + 1)
        if corrupt == "chunk":
            value = bytes(limit - 200)
        raw.append(bytearray(build_batch([Record(i, 5, b"k%d" % i, value)], compression=this)))
    arr = np.frombuffer(b"".join(raw), np.uint8).copy()
    scan = scan_batches(arr)
    scan.raise_error()
    if corrupt == "frame":  # after the scan: the CRC would refuse it first
        arr[sum(len(b) for b in raw[:8]) + 61] ^= 0xFF  # the frame's magic
    results = []
    for kernel in (True, False):
        if not kernel:
            _without_kernel(monkeypatch)
        with limit_decompression(limit):
            laid = lay_out(arr, scan.batches)
        payloads = [bytes(laid.buffer[s:e]) for s, e in zip(laid.starts, laid.ends, strict=True)]
        error = None if laid.error is None else laid.error.reason
        results.append((laid.usable, payloads, error))
    assert results[0] == results[1]
    usable, _, error = results[0]
    if corrupt is None:
        assert (usable, error) == (12, None)
    else:
        assert error is not None
        assert usable == {"frame": 8, "bomb": 7, "chunk": 4}[corrupt]
