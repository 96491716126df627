"""Decompression bombs for the tests: small, CRC-valid batches that only decompression tells
apart from honest ones.

A bomb is a batch of one honest record whose payload is replaced by that record followed by a
long run of zeros, compressed by the codec libraries themselves (streamed, so building a 2 GiB
bomb never holds 2 GiB).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import cramjam
import lz4.frame
import zstandard

from cleanerd.format import Compression, Record, compress, kernels as k, scan_batches
from cleanerd.format._builder import build_batch, finish_crc
from cleanerd.format.layout import ATTRIBUTES_AT, LENGTH_AT
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
    logdir = root / f"L-{codec.label}"
    spec = WorkloadSpec(topic="t", records=300, keys=50, records_per_batch=10, segment_bytes=4000)
    generate(logdir, spec)
    part = logdir / "t-0"
    active = sorted(part.glob("*.log"))[-1]
    scan = scan_batches(active.read_bytes())
    last = int(scan.batches[-1, k.B_LAST_OFFSET])
    with active.open("ab") as f:
        f.write(bomb_batch(codec, last + 1, zeros))
    return logdir, part


def files_of(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.rglob("*")) if p.is_file()}
