"""``scan_batches`` checks CRC32C with the one-call kernel where the CPU has it and the library
otherwise; both report the same first bad batch in the same words."""

from __future__ import annotations

import crc32c
import numpy as np
import pytest
from kafka.record.util import calc_crc32c

from cleanerd.format import (
    Compression,
    Record,
    _crc as crc,
    build_batch,
    kernels as k,
    scan_batches,
)

KERNEL = [True, False] if crc.AVAILABLE else [False]


def _log() -> bytearray:
    batches = [
        build_batch(
            [Record(b * 10 + i, 1000, b"k%d" % i, b"v" * 50) for i in range(10)],
            compression=Compression.LZ4 if b % 2 else Compression.NONE,
        )
        for b in range(9)  # not a multiple of the kernel's four lanes
    ]
    return bytearray(b"".join(batches))


@pytest.mark.parametrize("kernel", KERNEL)
@pytest.mark.parametrize("damaged", [0, 3, 8])
def test_the_first_bad_crc_is_found_on_either_path(
    kernel: bool, damaged: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _log()
    clean = scan_batches(bytes(data))
    assert clean.error is None
    positions = clean.batches[:, k.B_POS].tolist()
    data[positions[damaged] + k.HEADER_SIZE + 2] ^= 0x01  # inside the records: only the CRC
    monkeypatch.setattr(crc, "AVAILABLE", kernel)
    scan = scan_batches(bytes(data), path="seg.log")
    assert scan.error is not None
    assert scan.error.position == positions[damaged]
    assert scan.error.reason.startswith("CRC mismatch: stored ")
    assert len(scan) == damaged
    assert scan_batches(bytes(data), check_crc=False).error is None


needs_kernel = pytest.mark.skipif(not crc.AVAILABLE, reason="the CRC kernel needs SSE4.2")


@needs_kernel
def test_batch_crcs_equal_the_library_and_kafka_python() -> None:
    """Every length 0..64, lengths around the three-lane blocks, and long ranges, at unaligned
    starts, one to nine ranges per call (four side by side, then what is left)."""
    rng = np.random.default_rng(24)
    buf = rng.integers(0, 256, 3 << 20, dtype=np.uint8)
    lane = 3 * crc._LANE
    lengths = [*range(65), *range(lane - 9, lane + 9), 2 * lane + 7, 40_000, 1 << 20]
    rng.shuffle(lengths)
    i = 0
    while i < len(lengths):
        group = lengths[i : i + int(rng.integers(1, 10))]
        i += len(group)
        starts = rng.integers(0, buf.size - (1 << 20) - 1, len(group)).astype(np.int64)
        ends = starts + np.array(group, dtype=np.int64)
        out = np.empty(len(group), dtype=np.uint64)
        crc.batch_crcs(buf, starts, ends, out, crc.shift_tables())
        for a, b, got in zip(starts.tolist(), ends.tolist(), out.tolist(), strict=True):
            data = buf[a:b].tobytes()
            assert got == crc32c.crc32c(data), (a, b - a)
            if b - a <= 2 * lane:  # kafka-python's CRC32C is pure Python: short ones only
                assert got == calc_crc32c(data), (a, b - a)


@needs_kernel
@pytest.mark.parametrize("where", [0, 1, 511, 512, 1024, 1535, 1536, 100_000, -1])
def test_a_byte_changed_anywhere_in_a_large_batch_is_found(where: int) -> None:
    """One batch of ~300 KB (three-lane blocks, then words and bytes): a changed byte in any
    lane or in the tail is a CRC mismatch, next to a sound batch."""
    rng = np.random.default_rng(7)
    small = build_batch([Record(0, 1000, b"k", b"v")])
    big = build_batch([Record(i, 1000, b"k%d" % i, rng.bytes(30_001)) for i in range(1, 11)])
    data = bytearray(small + big)
    sound = np.frombuffer(bytes(data), dtype=np.uint8)
    assert crc.first_bad_crc(sound, scan_batches(sound, check_crc=False).batches) == -1
    start = len(small) + k.HEADER_SIZE
    pos = start + where if where >= 0 else len(data) - 1
    data[pos] ^= 0x40
    arr = np.frombuffer(bytes(data), dtype=np.uint8)
    assert crc.first_bad_crc(arr, scan_batches(arr, check_crc=False).batches) == 1
    scan = scan_batches(bytes(data))
    assert scan.error is not None
    assert scan.error.position == len(small)
    assert scan.error.reason.startswith("CRC mismatch: stored ")
