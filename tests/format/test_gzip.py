"""gzip is written byte for byte as Kafka writes it (Java's ``GZIPOutputStream``, JDK 16+).

Java's header is ``1f 8b 08 00 00000000 00 ff`` (OS 255, "unknown"; Python's ``gzip`` writes 3),
then a raw deflate stream at zlib's default level and the CRC-32/ISIZE trailer. The Kafka-written
fixture ``small-gzip-hdr-tomb-0`` is the witness: recompressing each batch's records must give
the very bytes Kafka wrote, and rebuilding a whole batch its very CRC.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from pathlib import Path

import pytest
from kafka.codec import gzip_decode

from cleanerd.format import as_uint8, kernels as k, scan_batches
from cleanerd.format._codecs import JAVA_GZIP_HEADER, Compression, compress, decompress
from cleanerd.format._payloads import batch_payload

JAVA_HEADER = bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])  # GZIPOutputStream.writeHeader

rng = random.Random(13)
SAMPLES = [
    b"",
    b"x",
    b"gzip as Java writes it " * 1000,
    bytes(rng.getrandbits(8) for _ in range(70_000)),  # incompressible, over 64 KiB
]


@pytest.mark.parametrize("data", SAMPLES, ids=["empty", "one", "text", "random"])
def test_header_trailer_and_decoders(data: bytes) -> None:
    out = compress(Compression.GZIP, data)
    assert out[:10] == JAVA_HEADER == JAVA_GZIP_HEADER
    assert out[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
    assert gzip.decompress(out) == data
    assert gzip_decode(out) == data  # kafka-python's decoder
    assert decompress(Compression.GZIP, out) == data
    # the body is zlib's raw deflate at level 6, as Java's Deflater(-1, true) writes it
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert out[10:-8] == deflater.compress(data) + deflater.flush()


def test_differs_from_python_gzip_at_most_in_the_os_byte() -> None:
    """Python 3.11's ``gzip`` writes OS 3 (Unix), which gave every rebuilt batch another CRC
    than Kafka's; newer Pythons write 255 as Java does."""
    data = SAMPLES[2]
    python = gzip.compress(data, compresslevel=6, mtime=0)
    ours = compress(Compression.GZIP, data)
    assert ours[9] == 0xFF
    assert python[:9] + python[10:] == ours[:9] + ours[10:]


def _fixture_log(kafka_fixtures: Path) -> bytes:
    return (kafka_fixtures / "small-gzip-hdr-tomb-0" / "00000000000000000000.log").read_bytes()


def test_kafka_gzip_payloads_are_reproduced_exactly(kafka_fixtures: Path) -> None:
    data = _fixture_log(kafka_fixtures)
    scan = scan_batches(data)
    arr = as_uint8(data)
    assert len(scan) == 100
    for row in scan.batches:
        start = int(row[k.B_POS]) + k.HEADER_SIZE
        written = data[start : int(row[k.B_POS]) + int(row[k.B_SIZE])]  # as Kafka wrote it
        assert written[:10] == JAVA_HEADER
        records = bytes(batch_payload(arr, row))
        assert compress(Compression.GZIP, records) == written
