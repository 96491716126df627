"""Kafka's compression codecs with Kafka's own framing (reference section 2.5).

snappy is written in xerial framing (what Kafka's Java producer writes) and read in both xerial
and raw form; lz4 is an LZ4 frame with independent 64 KiB blocks (Kafka rejects linked blocks);
gzip and zstd are standard streams. Rebuilt batches use each codec's default level, as Kafka's
cleaner does. gzip is written byte for byte as Java's ``GZIPOutputStream`` (JDK 16+) writes it,
so a rebuilt gzip batch gets the CRC Kafka's own cleaner would give it.
"""

from __future__ import annotations

import enum
import functools
import gzip
import struct
import threading
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

from cleanerd.format.errors import CorruptRecordError


class Compression(enum.IntEnum):
    """Codec ids of attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        """Kafka's name for the codec (``compression.type``)."""
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> Compression:
        """Parse ``none|gzip|snappy|lz4|zstd`` (case-insensitive)."""
        try:
            return cls[label.upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression {label!r}; expected one of none, gzip, snappy, lz4, zstd"
            ) from None


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_ZSTD_LEVEL = 3
_GZIP_LEVEL = 6  # Java's Deflater.DEFAULT_COMPRESSION (-1) is zlib's 6
JAVA_GZIP_HEADER = bytes.fromhex("1f8b08000000000000ff")
"""The header ``java.util.zip.GZIPOutputStream`` writes (JDK 16+): magic, deflate, no flags,
mtime 0, XFL 0, OS 255 "unknown" (JDK 15 and older wrote OS 0). Python 3.11's ``gzip`` module
writes OS 3 (Unix), which gave every rebuilt gzip batch another CRC than Kafka's."""
_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    # zstandard objects are not safe to share between threads; keep one per thread.
    c = getattr(_local, "zc", None)
    if c is None:
        c = _local.zc = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d


def _xerial_encode(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _gzip_encode(data: bytes) -> bytes:
    """One gzip member as Java writes it: its header, a raw deflate stream at the default level
    (zlib's defaults otherwise, as ``Deflater(-1, true)``), CRC-32 and size mod 2^32, LE."""
    deflater = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflater.compress(data) + deflater.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return JAVA_GZIP_HEADER + body + trailer


def _snappy_decode(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = len(_XERIAL_HEADER)
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f"xerial block length truncated at {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ValueError(f"xerial block of {size} bytes at {pos - 4} runs past the end")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)


def compress(codec: Compression, data: bytes) -> bytes:
    """Compress a batch's record bytes the way Kafka frames them."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return _gzip_encode(data)
    if codec == Compression.SNAPPY:
        return _xerial_encode(data)
    if codec == Compression.LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    if codec == Compression.ZSTD:
        return bytes(_zstd_compressor().compress(data))
    raise ValueError(f"unknown codec {codec}")


DECOMPRESS_ERRORS = (
    CorruptRecordError,
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    zlib.error,
    zstandard.ZstdError,
    cramjam.DecompressionError,
)
"""What a ``decompressor`` function raises on bad data."""


def decompressor(codec: Compression) -> Callable[[bytes | memoryview], bytes]:
    """``decompress`` for one codec, without its per-call dispatch, for loops over many batches.

    The function returns what ``decompress(codec, data)`` returns, but raises the codec
    library's own errors (one of ``DECOMPRESS_ERRORS``): callers turn them into
    ``CorruptRecordError`` (or ask ``decompress`` for the wording). Use one per loop and thread.
    """
    if codec == Compression.LZ4:
        lz4_frame: Callable[[bytes | memoryview], bytes] = lz4.frame.decompress
        return lz4_frame
    if codec == Compression.ZSTD:
        zd = zstandard.ZstdDecompressor()

        def zstd(data: bytes | memoryview) -> bytes:
            dobj = zd.decompressobj()
            out: bytes = dobj.decompress(data)
            if not dobj.eof:
                raise ValueError("zstd payload is truncated (frame not finished)")
            return out

        return zstd
    return functools.partial(decompress, codec)


def decompress(codec: Compression, data: bytes | memoryview) -> bytes:
    """Decompress a batch payload; raises CorruptRecordError (without a position) on bad data.

    ``data`` may be a memoryview (of a mapped segment), which saves copying it first.
    """
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return gzip.decompress(data)
        if codec == Compression.SNAPPY:
            return _snappy_decode(bytes(data))
        if codec == Compression.LZ4:
            return bytes(lz4.frame.decompress(data))
        if codec == Compression.ZSTD:
            dobj = _zstd_decompressor().decompressobj()
            out = bytes(dobj.decompress(data))
            if not dobj.eof:  # a streaming decompressor returns what it has: a cut frame
                raise CorruptRecordError("zstd payload is truncated (frame not finished)")
            return out
    except (
        OSError,
        EOFError,
        ValueError,
        RuntimeError,
        zlib.error,
        zstandard.ZstdError,
        cramjam.DecompressionError,
    ) as e:
        raise CorruptRecordError(f"{codec.label} payload does not decompress: {e}") from e
    raise CorruptRecordError(f"unknown compression codec id {int(codec)}")
