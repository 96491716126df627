"""``reader.lay_out``: the one place batch payloads are decompressed and laid out, used by the
reader's record index and the cleaner's pass 1 alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cleanerd.format import Compression, Record, index_batches, kernels as k, lay_out, scan_batches
from cleanerd.format._builder import build_batch, build_empty_batch, finish_crc
from cleanerd.format._payloads import batch_payload
from cleanerd.format.layout import ATTRIBUTES_AT

Arr = np.ndarray[Any, Any]


def _batch(base: int, codec: Compression, n: int = 50) -> bytes:
    # values of one repeated byte: they compress far beyond lay_out's first guess of the size,
    # so its buffer has to grow
    recs = [Record(base + i, 1000 + i, b"k%d" % i, bytes([65 + i % 26]) * 2000) for i in range(n)]
    return build_batch(recs, compression=codec)


def _empty_compressed(base: int, codec: Compression) -> bytes:
    """A batch with no records whose attributes name a codec: Kafka never decompresses it."""
    raw = bytearray(build_empty_batch(base_offset=base, last_offset=base, max_timestamp=5))
    raw[ATTRIBUTES_AT + 1] |= int(codec)
    return bytes(finish_crc(raw))


def _log(codec: Compression) -> Arr:
    parts = [_batch(0, codec), _batch(50, Compression.NONE), _empty_compressed(100, codec)]
    parts.append(_batch(101, codec))
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
@pytest.mark.parametrize("reuse", [False, True])
def test_every_payload_is_the_batch_payload(codec: Compression, reuse: bool) -> None:
    arr = _log(codec)
    scan = scan_batches(arr)
    scan.raise_error()
    laid = lay_out(arr, scan.batches, reuse=reuse)
    assert laid.error is None
    assert laid.usable == 4
    got = [bytes(laid.buffer[s:e]) for s, e in zip(laid.starts, laid.ends, strict=True)]
    assert got == [bytes(batch_payload(arr, row)) for row in scan.batches]
    assert got[2] == b""
    assert len(got[0]) > 3 * int(scan.batches[0, k.B_SIZE])
    assert list(laid.starts[1:]) == list(laid.ends[:-1])  # end to end, no gaps


def test_uncompressed_batches_are_read_where_they_lie() -> None:
    arr = np.frombuffer(_batch(0, Compression.NONE) + _batch(50, Compression.NONE), np.uint8)
    laid = lay_out(arr, scan_batches(arr).batches)
    assert laid.buffer is arr
    assert [int(s) for s in laid.starts] == [k.HEADER_SIZE, arr.shape[0] // 2 + k.HEADER_SIZE]


def test_reused_buffer_is_the_threads_until_its_next_call() -> None:
    arr = _log(Compression.LZ4)
    batches = scan_batches(arr).batches
    first = lay_out(arr, batches, reuse=True).buffer
    assert lay_out(arr, batches, reuse=True).buffer is first
    assert lay_out(arr, batches).buffer.base is not first  # a fresh buffer is the caller's


def test_a_payload_that_does_not_decompress_stops_the_layout_with_the_readers_error() -> None:
    good = _batch(0, Compression.ZSTD)
    bad = bytearray(_batch(50, Compression.ZSTD))
    bad[k.HEADER_SIZE : k.HEADER_SIZE + 8] = b"\x00" * 8  # no longer a zstd frame
    arr = np.frombuffer(good + bytes(finish_crc(bad)) + _batch(100, Compression.ZSTD), np.uint8)
    batches = scan_batches(arr).batches
    assert batches.shape[0] == 3
    laid = lay_out(arr, batches, reuse=True)
    assert laid.usable == 1
    assert laid.error is not None
    assert "zstd payload does not decompress" in laid.error.reason
    with pytest.raises(type(laid.error)) as raised:
        index_batches(arr, batches)
    assert raised.value.reason == laid.error.reason
    assert raised.value.position == len(good)
