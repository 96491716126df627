"""``format._lz4``: what the kernel decodes is exactly what the lz4 library decodes, and what it
leaves (another frame layout, a corrupt frame, no room, past a bound) the library decides.

The oracle is python-lz4 (liblz4's own frame decoder); frames come from liblz4's encoder with
Kafka's settings and others, whole, cut short and with bytes changed.
"""

from __future__ import annotations

import os
import random
from typing import Any

import lz4.frame
import numpy as np
import pytest

from cleanerd.format import (
    Compression,
    Record,
    _payloads as payloads_mod,
    build_batch,
    lay_out,
    limit_decompression,
    scan_batches,
)
from cleanerd.format._lz4 import LZ4_CODEC, header_checksum, lay_out_lz4

KAFKA = {
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


def _kernel(frame: bytes, limit: int = 1 << 21, room: int = 1 << 22) -> bytes | None:
    """The kernel's decoding of one lz4 batch payload, or None when it leaves it."""
    src = np.frombuffer(frame, np.uint8)
    out = np.zeros(room, np.uint8)
    ends = np.zeros(1, np.int64)
    one = np.ones(1, np.int64)
    done, q = lay_out_lz4(
        src, np.zeros(1, np.int64), one * len(frame), one * LZ4_CODEC, one, out, ends, 0, 0,
        limit, room,
    )  # fmt: skip
    return bytes(out[:q]) if done == 1 else None


def _library(frame: bytes) -> bytes | None:
    try:
        return bytes(lz4.frame.decompress(frame))
    except RuntimeError:
        return None


def test_kafkas_frames_are_decoded_by_the_kernel_as_the_library_decodes_them() -> None:
    rng = random.Random(24)
    taken = 0
    for _ in range(400):
        data = _data(rng)
        frame = lz4.frame.compress(data, compression_level=rng.choice([0, 3, 12]), **KAFKA)
        got = _kernel(frame)
        if got is not None:
            taken += 1
            assert got == data
    assert taken >= 390  # all but a rare exact 15-literal tail, which the library decodes


@pytest.mark.parametrize(
    "settings",
    [
        {"block_linked": True},
        {"content_checksum": True},
        {"store_size": True},
        {"block_checksum": True},
    ],
)
def test_frames_with_what_kafka_does_not_write_go_to_the_library(settings: dict[str, Any]) -> None:
    data = b"a record value " * 5000
    frame = lz4.frame.compress(data, **(KAFKA | settings))
    assert _kernel(frame) is None
    assert _library(frame) == data


def test_a_corrupt_frame_the_kernel_takes_is_one_the_library_takes_alike() -> None:
    """Frames with bytes changed or cut short: never a decoding the library would not give."""
    rng = random.Random(7)
    taken = refused = 0
    for _ in range(3000):
        frame = bytearray(lz4.frame.compress(_data(rng), **KAFKA))
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(frame))
            frame[at] = rng.randrange(256)
        if rng.random() < 0.3:
            frame = frame[: rng.randrange(len(frame) + 1)]
        got = _kernel(bytes(frame))
        if got is None:
            refused += 1
            continue
        taken += 1
        assert got == _library(bytes(frame))
    assert taken > 100
    assert refused > 100


def test_the_header_checksum_is_liblz4s() -> None:
    for block_size in (lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB,
                       lz4.frame.BLOCKSIZE_MAX1MB, lz4.frame.BLOCKSIZE_MAX4MB):  # fmt: skip
        for linked in (False, True):
            frame = lz4.frame.compress(b"x", **(KAFKA | {"block_size": block_size,
                                                        "block_linked": linked}))  # fmt: skip
            assert header_checksum(frame[4], frame[5]) == frame[6]


def test_the_kernel_stops_at_its_bounds() -> None:
    data = os.urandom(1000) * 100  # 100 kB, compresses well
    frame = lz4.frame.compress(data, **KAFKA)
    assert _kernel(frame) == data
    assert _kernel(frame, limit=len(data) - 1) is None  # past the batch bound
    assert _kernel(frame, room=len(data) - 1) is None  # past the room it has
    assert _kernel(frame, limit=len(data), room=len(data)) == data


def _without_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payloads_mod, "lay_out_lz4", lambda *a: (a[7], a[8]))


@pytest.mark.parametrize("corrupt", [None, "frame", "bomb", "chunk"])
def test_lay_out_gives_what_the_library_path_gives(
    corrupt: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk of lz4 batches (with an uncompressed one between them), whole, with one frame
    corrupt, with one batch past ``max.decompressed.message.bytes``, and adding up past the
    chunk's bound: the same payloads, and the same error at the same batch, with the kernel
    and with the library alone."""
    limit = 1 << 20
    rng = random.Random(3)
    raw = []
    for i in range(12):
        codec = Compression.NONE if i == 5 else Compression.LZ4
        value = os.urandom(rng.randrange(100, 2000)) * rng.randrange(1, 40)
        if corrupt == "bomb" and i == 7:
            value = bytes(limit + 1)
        if corrupt == "chunk":
            value = bytes(limit - 200)
        raw.append(bytearray(build_batch([Record(i, 5, b"k%d" % i, value)], compression=codec)))
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
