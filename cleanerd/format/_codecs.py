"""Kafka's compression codecs with Kafka's own framing (docs/kafka-format.md §2.5).

snappy is written in xerial framing (what Kafka's Java producer writes) and read in both xerial
and raw form; lz4 is an LZ4 frame with independent 64 KiB blocks (Kafka rejects linked blocks);
gzip and zstd are standard streams. Rebuilt batches use each codec's default level, as Kafka's
cleaner does. Every codec writes the bytes Kafka's own writer writes (§2.5), so a rebuilt batch
gets the CRC Kafka's own cleaner would give it: gzip as Java's ``GZIPOutputStream`` (JDK 16+),
snappy with C++ snappy 1.1.x as snappy-java (``_snappy``; cramjam where that library is
missing), lz4 as ``Lz4BlockOutputStream``, zstd as zstd-jni's stream (libzstd 1.5.6, the
version zstandard 0.23 bundles and zstd-jni 1.5.6-x wraps).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import gzip
import struct
import threading
import zlib
from collections.abc import Callable, Iterator

import cramjam
import lz4.frame
import zstandard

from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._limits import MAX_DECOMPRESSED_BYTES
from cleanerd.format._snappy import raw_compressor


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


def _cramjam_raw(block: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(block))


def _xerial_encode(data: bytes) -> bytes:
    """snappy-java's ``SnappyOutputStream``: the header, then each 32 KiB of input (its default
    block size; Kafka's ``SnappyCompression`` keeps it, and flushes only on close) as one raw
    block after its int32 BE length."""
    raw = raw_compressor() or _cramjam_raw
    data = bytes(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = raw(data[i : i + _XERIAL_BLOCK])  # a batch of one block: no copy
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _zstd_encode(data: bytes) -> bytes:
    """zstd-jni's stream as Kafka's ``ZstdCompression`` drives it: records go in with
    ``ZSTD_e_continue`` (through a 16 KiB ``BufferedOutputStream``; how the input is cut does
    not change the output), ``close()`` flushes (``ZSTD_e_flush``: the data ends in a non-last
    block) and then ends the frame (``ZSTD_e_end``: an empty last raw block, ``01 00 00``). The
    size is never pledged, so the frame header declares no content size. For an empty input
    zstd-jni writes what ``ZSTD_e_end`` alone writes (a frame declaring content size 0), so
    that one is not flushed first."""
    c = _zstd_compressor().compressobj()
    out = c.compress(data)
    if data:
        out += c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    return bytes(out + c.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))


def _gzip_encode(data: bytes) -> bytes:
    """One gzip member as Java writes it: its header, a raw deflate stream at the default level
    (zlib's defaults otherwise, as ``Deflater(-1, true)``), CRC-32 and size mod 2^32, LE."""
    deflater = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflater.compress(data) + deflater.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return JAVA_GZIP_HEADER + body + trailer


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
        return _zstd_encode(data)
    raise ValueError(f"unknown codec {codec}")


class DecompressedTooLargeError(CorruptRecordError):
    """A payload that decompresses past ``max.decompressed.message.bytes``: a decompression bomb,
    or a genuine batch larger than the setting allows. Raised before the memory is taken."""

    def __init__(self, codec: Compression, reached: int, limit: int) -> None:
        self.codec = codec
        self.reached = reached
        self.limit = limit
        super().__init__(
            f"{codec.label} payload decompresses past {LIMIT_SETTING} = {limit} bytes "
            f"(stopped at {reached}); raise {LIMIT_SETTING} for this topic if the batch is "
            "genuine"
        )


LIMIT_SETTING = "max.decompressed.message.bytes"
"""Kafka's topic setting that bounds decompressed records; cleanerd bounds each batch by it."""
_limit: contextvars.ContextVar[int] = contextvars.ContextVar(
    "max_decompressed_message_bytes", default=MAX_DECOMPRESSED_BYTES
)


def decompression_limit() -> int:
    """The most one batch's payload may decompress to here (``max.decompressed.message.bytes``
    of the topic being read, set with ``limit_decompression``; cleanerd's default otherwise)."""
    return _limit.get()


@contextlib.contextmanager
def limit_decompression(limit: int) -> Iterator[None]:
    """Decompress every batch read in this block (this thread or task) within ``limit`` bytes.

    The bound is a context rather than an argument because every reader of batches (the record
    index, both cleaner passes, verify, dump, snapshots, Spark's tasks) decompresses through this
    module, and the topic's setting is known only to the driver that opened the partition.
    """
    if limit < 1:
        raise ValueError(f"{LIMIT_SETTING} must be at least 1, not {limit}")
    token = _limit.set(limit)
    try:
        yield
    finally:
        _limit.reset(token)


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

# Most a codec's encoding can expand its input: a payload at most ``limit / ratio`` long cannot
# pass the bound, so it takes the codec's one-call path. deflate tops out at 1032:1, LZ4 at 255:1;
# snappy and zstd carry sizes the decoder checks (below).
_DEFLATE_RATIO = 1032
_LZ4_RATIO = 256
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 * 1024  # a compressed block regenerates at most this much
_ZSTD_RATIO = 32 * 1024  # a 4-byte RLE block regenerates 128 KiB: no zstd byte does more
_STREAM_STEP = 128 * 1024


def _bounded(codec: Compression, reached: int, limit: int) -> None:
    if reached > limit:
        raise DecompressedTooLargeError(codec, reached, limit)


def _snappy_decode(data: bytes, limit: int) -> bytes:
    """Raw or xerial-framed snappy; every block's declared length is checked before it is
    decompressed (the decoder refuses a block that does not produce exactly that length)."""
    if not data.startswith(XERIAL_MAGIC):
        _bounded(Compression.SNAPPY, int(cramjam.snappy.decompress_raw_len(data)), limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = len(_XERIAL_HEADER)
    out = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f"xerial block length truncated at {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ValueError(f"xerial block of {size} bytes at {pos - 4} runs past the end")
        block = data[pos : pos + size]
        total += int(cramjam.snappy.decompress_raw_len(block))
        _bounded(Compression.SNAPPY, total, limit)
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += size
    return b"".join(out)


def _gzip_decode(data: bytes | memoryview, limit: int) -> bytes:
    """gzip members one after another (as Java's ``GZIPInputStream`` reads them), stopped at
    ``limit``."""
    if len(data) * _DEFLATE_RATIO < limit:
        return gzip.decompress(data)
    out = []
    total = 0
    rest = bytes(data)
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        part = d.decompress(rest, limit + 1 - total)
        total += len(part)
        _bounded(Compression.GZIP, total, limit)
        if not d.eof:
            raise EOFError("gzip payload is truncated (member not finished)")
        out.append(part)
        rest = d.unused_data
    return b"".join(out)


def _lz4_decode(data: bytes | memoryview, limit: int) -> bytes:
    if len(data) * _LZ4_RATIO < limit:
        return bytes(lz4.frame.decompress(data))
    d = lz4.frame.LZ4FrameDecompressor()
    out = bytes(d.decompress(data, max_length=limit + 1))
    _bounded(Compression.LZ4, len(out), limit)
    if not d.eof:
        raise EOFError("lz4 payload is truncated (frame not finished)")
    return out


def zstd_size_bound(data: bytes | memoryview) -> int | None:
    """The most the first zstd frame in ``data`` can regenerate, from its block headers alone
    (raw and RLE blocks say their size; a compressed block regenerates at most 128 KiB); the
    content size a frame may declare is not read here. None when the headers do not parse or
    run past the end (the decoder then says what is wrong)."""
    n = len(data)
    if n < 6 or data[:4] != _ZSTD_MAGIC:
        return None
    fhd = data[4]
    single = (fhd >> 5) & 1
    fcs_len = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs_len
    total = 0
    while pos + 3 <= n:
        header = int.from_bytes(data[pos : pos + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 0:  # raw
            total += size
            pos += 3 + size
        elif kind == 1:  # RLE: one byte repeated ``size`` times
            total += size
            pos += 4
        elif kind == 2:  # compressed
            total += _ZSTD_BLOCK_MAX
            pos += 3 + size
        else:
            return None
        if last:
            return total if pos <= n else None
    return None


def _zstd_decode(data: bytes | memoryview, limit: int, zd: zstandard.ZstdDecompressor) -> bytes:
    if len(data) * _ZSTD_RATIO < limit:
        fits = True
    else:
        # a declared content size is enforced by libzstd (it refuses to write past it); a
        # frame without one (what Kafka writes) is bounded by its block headers
        declared = zstandard.frame_content_size(data)
        bound = zstd_size_bound(data) if declared < 0 else declared
        fits = bound is not None and bound <= limit
    if fits:
        dobj = zd.decompressobj()
        out = bytes(dobj.decompress(data))
        if not dobj.eof:  # a streaming decompressor returns what it has: a cut frame
            raise EOFError("zstd payload is truncated (frame not finished)")
        return out
    # Past the bound on paper (a frame of many blocks, or a bomb): count it in steps first.
    total = 0
    for part in zd.read_to_iter(data, write_size=_STREAM_STEP):
        total += len(part)
        _bounded(Compression.ZSTD, total, limit)
    dobj = zd.decompressobj()  # within the bound: the one-call decoder says if it is whole
    out = bytes(dobj.decompress(data))
    if not dobj.eof:
        raise EOFError("zstd payload is truncated (frame not finished)")
    return out


def decompressor(
    codec: Compression, limit: int | None = None
) -> Callable[[bytes | memoryview], bytes]:
    """``decompress`` for one codec, without its per-call dispatch, for loops over many batches.

    The function returns what ``decompress(codec, data)`` returns, but raises the codec
    library's own errors (one of ``DECOMPRESS_ERRORS``) or ``DecompressedTooLargeError``:
    callers turn them into ``CorruptRecordError`` (or ask ``decompress`` for the wording). Use
    one per loop and thread. ``limit`` defaults to ``decompression_limit()``.
    """
    bound = decompression_limit() if limit is None else limit
    if codec == Compression.LZ4:
        return functools.partial(_lz4_decode, limit=bound)
    if codec == Compression.ZSTD:
        return functools.partial(_zstd_decode, limit=bound, zd=zstandard.ZstdDecompressor())
    if codec == Compression.GZIP:
        return functools.partial(_gzip_decode, limit=bound)
    if codec == Compression.SNAPPY:
        return lambda data: _snappy_decode(bytes(data), bound)
    return functools.partial(decompress, codec, limit=bound)


def one_call_decompressor(
    codec: Compression, limit: int
) -> tuple[Callable[[bytes | memoryview], bytes], int]:
    """``(decode, max_len)``: the codec library's own one-call decoder, for payloads shorter than
    ``max_len``, which the codec's maximum ratio keeps within ``limit`` whatever they hold. For
    loops over many small batches: they skip the bounded path's Python call (``decompressor``
    for the rest). ``max_len`` is 0 for snappy, whose declared lengths are always checked."""
    if codec == Compression.LZ4:
        lz4_frame: Callable[[bytes | memoryview], bytes] = lz4.frame.decompress
        return lz4_frame, limit // _LZ4_RATIO
    if codec == Compression.GZIP:
        return gzip.decompress, limit // _DEFLATE_RATIO
    if codec == Compression.ZSTD:
        zd = zstandard.ZstdDecompressor()

        def zstd(data: bytes | memoryview) -> bytes:
            dobj = zd.decompressobj()
            out: bytes = dobj.decompress(data)
            if not dobj.eof:
                raise EOFError("zstd payload is truncated (frame not finished)")
            return out

        return zstd, limit // _ZSTD_RATIO
    return decompressor(codec, limit), 0


def decompress(codec: Compression, data: bytes | memoryview, limit: int | None = None) -> bytes:
    """Decompress a batch payload within ``limit`` bytes (``decompression_limit()`` by default);
    raises CorruptRecordError (without a position) on bad data, ``DecompressedTooLargeError``
    past the bound.

    ``data`` may be a memoryview (of a mapped segment), which saves copying it first.
    """
    bound = decompression_limit() if limit is None else limit
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return _gzip_decode(data, bound)
        if codec == Compression.SNAPPY:
            return _snappy_decode(bytes(data), bound)
        if codec == Compression.LZ4:
            return _lz4_decode(data, bound)
        if codec == Compression.ZSTD:
            return _zstd_decode(data, bound, _zstd_decompressor())
    except CorruptRecordError:
        raise  # already worded (a payload past the bound)
    except DECOMPRESS_ERRORS as e:
        raise CorruptRecordError(f"{codec.label} payload does not decompress: {e}") from e
    raise CorruptRecordError(f"unknown compression codec id {int(codec)}")
