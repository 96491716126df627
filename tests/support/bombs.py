"""Decompression bombs for the tests: small, CRC-valid batches that only decompression tells
apart from honest ones; and record bombs, batches of millions of tiny records.

A bomb is a batch of one honest record whose payload is replaced by that record followed by a
long run of zeros, compressed by the codec libraries themselves (streamed, so building a 2 GiB
bomb never holds 2 GiB).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import cramjam
import lz4.frame
import numpy as np
import zstandard

from cleanerd.format import Compression, Record, compress, kernels as k, scan_batches
from cleanerd.format._builder import build_batch, finish_crc
from cleanerd.format.layout import (
    ATTRIBUTES_AT,
    LAST_OFFSET_DELTA_AT,
    LENGTH_AT,
    RECORDS_COUNT_AT,
)
from cleanerd.workload import WorkloadSpec, generate

GIB = 1 << 30
_STEP = 64 << 20
_ZEROS = bytes(_STEP)


def _zero_run(total: int) -> Iterator[bytes]:
    while total > 0:
        yield _ZEROS[: min(total, _STEP)]
        total -= _STEP


def compressed_bomb(codec: Compression, head: bytes, zeros: int) -> bytes:
    """``head`` then ``zeros`` zero bytes, compressed as Kafka frames the codec, in steps."""
    if codec == Compression.GZIP:
        deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        parts = [deflate.compress(head)]
        parts += [deflate.compress(z) for z in _zero_run(zeros)]
        return b"".join([*parts, deflate.flush()])
    if codec == Compression.ZSTD:
        zc = zstandard.ZstdCompressor(level=1).compressobj()
        parts = [zc.compress(head)] + [zc.compress(z) for z in _zero_run(zeros)]
        return b"".join([*parts, zc.flush()])
    if codec == Compression.LZ4:
        lz = lz4.frame.LZ4FrameCompressor(
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False
        )
        parts = [lz.begin(), lz.compress(head)] + [lz.compress(z) for z in _zero_run(zeros)]
        return b"".join([*parts, lz.flush()])
    # snappy in Kafka's xerial framing: 32 KiB blocks, each its own raw snappy block
    out = [compress(Compression.SNAPPY, head)]
    whole, rest = divmod(zeros, 32 * 1024)
    for count, size in ((whole, 32 * 1024), (1 if rest else 0, rest)):
        block = bytes(cramjam.snappy.compress_raw(bytes(size)))
        out.append((len(block).to_bytes(4, "big") + block) * count)
    return b"".join(out)


def bomb_batch(codec: Compression, base_offset: int, zeros: int) -> bytes:
    """A batch at ``base_offset`` claiming one record whose payload decompresses to that record
    and ``zeros`` more bytes; CRC valid."""
    honest = build_batch([Record(base_offset, 1_000, b"bomb", b"v")], base_offset=base_offset)
    record = honest[k.HEADER_SIZE :]
    raw = bytearray(honest[: k.HEADER_SIZE])
    raw += compressed_bomb(codec, record, zeros)
    raw[ATTRIBUTES_AT + 1] |= int(codec)
    raw[LENGTH_AT : LENGTH_AT + 4] = (len(raw) - 12).to_bytes(4, "big")
    return bytes(finish_crc(raw))


def bomb_logdir(root: Path, codec: Compression, zeros: int) -> tuple[Path, Path]:
    """A log dir of one compacted partition: a few honest segments, then the bomb batch
    appended to the active segment."""
    return logdir_ending_in(root / f"L-{codec.label}", lambda base: bomb_batch(codec, base, zeros))


def tiny_records_batch(count: int, base_offset: int, codec: Compression) -> bytes:
    """An honest batch of ``count`` 11-byte records (1-byte keys, null values): the offset delta
    always in 4 varint bytes (Kafka's readers take a varint's bytes as they come), so numpy
    lays millions of records out at once. A record bomb: millions of records in a small batch
    whose payload is well within ``max.decompressed.message.bytes``."""
    # length 10 (zig-zag 20), attributes, timestamp delta, offset delta (4 bytes, filled in
    # below), key length 1 (zig-zag 2), the key, value length -1 (zig-zag 1), no headers
    rec = np.array([20, 0, 0, 0, 0, 0, 0, 2, ord("K"), 1, 0], np.uint8)
    payload = np.tile(rec, count).reshape(count, rec.shape[0])
    zigzag = 2 * np.arange(count, dtype=np.int64)
    for i in range(4):
        payload[:, 3 + i] = ((zigzag >> (7 * i)) & 0x7F) | (0x80 if i < 3 else 0)
    honest = build_batch([Record(base_offset, 1_000, b"K", None)], base_offset=base_offset)
    raw = bytearray(honest[: k.HEADER_SIZE])
    raw += compress(codec, payload.tobytes()) if codec else payload.tobytes()
    raw[ATTRIBUTES_AT + 1] |= int(codec)
    raw[LENGTH_AT : LENGTH_AT + 4] = (len(raw) - 12).to_bytes(4, "big")
    raw[LAST_OFFSET_DELTA_AT : LAST_OFFSET_DELTA_AT + 4] = (count - 1).to_bytes(4, "big")
    raw[RECORDS_COUNT_AT : RECORDS_COUNT_AT + 4] = count.to_bytes(4, "big")
    return bytes(finish_crc(raw))


def logdir_ending_in(logdir: Path, batch_at: Callable[[int], bytes]) -> tuple[Path, Path]:
    """A log dir of one compacted partition: a few honest segments, then ``batch_at(its next
    offset)`` appended to the active segment."""
    spec = WorkloadSpec(topic="t", records=300, keys=50, records_per_batch=10, segment_bytes=4000)
    generate(logdir, spec)
    part = logdir / "t-0"
    active = sorted(part.glob("*.log"))[-1]
    scan = scan_batches(active.read_bytes())
    last = int(scan.batches[-1, k.B_LAST_OFFSET])
    with active.open("ab") as f:
        f.write(batch_at(last + 1))
    return logdir, part


def files_of(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.rglob("*")) if p.is_file()}
