"""``scan_batches`` checks CRC32C with the one-call kernel where the CPU has it and the library
otherwise; both report the same first bad batch in the same words."""

from __future__ import annotations

import pytest

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
