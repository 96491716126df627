"""Every codec writes the bytes Kafka's own writer writes (docs/kafka-format.md §2.5).

Oracles, none of them cleanerd's own code:
- the Kafka-written fixtures: every batch rebuilt from its records equals Kafka's, CRC included
  (``test_kafka_fixtures.py``, gzip and snappy);
- the JVM libraries Kafka wraps, driven as Kafka's compression classes drive them (snappy-java,
  zstd-jni, lz4-java, the JDK's ``GZIPOutputStream``), through a py4j gateway (slow);
- zstd's frame format (RFC 8878) read here field by field, and Debian's ``zstd`` CLI decoding
  what cleanerd writes.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cramjam
import pytest
import zstandard

from cleanerd.format import _snappy, iter_batches
from cleanerd.format._codecs import Compression, compress, decompress
from cleanerd.format._snappy import DEBIAN_PACKAGE, SONAME, raw_compressor
from cleanerd.storage import PartitionLog
from cleanerd.workload import WorkloadSpec, generate
from tests.support.cli import ok
from tests.support.tools import require

KAFKA_ZSTD = (1, 5, 6)  # libzstd in zstd-jni 1.5.6-x, Kafka 3.8 to 4.x (gradle/dependencies.gradle)


def _records(n: int, pad: int, seed: int) -> bytes:
    """Record-like bytes: JSON values behind keys, as a producer's batch holds them."""
    rng = random.Random(seed)
    out = bytearray()
    for i in range(n):
        value = json.dumps(
            {"id": i, "user": f"u{rng.randrange(1000)}", "pad": "x" * rng.randrange(pad)}
        ).encode()
        out += struct.pack(">i", len(value)) + b"key-%06d" % rng.randrange(10**6) + value
    return bytes(out)


SAMPLES = {
    "empty": b"",
    "one-byte": b"a",
    "small": _records(3, 50, 1),
    "16KiB+1": _records(150, 100, 2)[: 16 * 1024 + 1],
    "128KiB+1": _records(1500, 150, 3)[: 128 * 1024 + 1],
    "240KB": _records(2000, 200, 4)[:240_000],
    "1.3MB": _records(6000, 300, 5),
    "random": random.Random(6).randbytes(200_000),
    "zeros": bytes(300_000),
    "mixed": random.Random(7).randbytes(50_000) + bytes(90_000) + _records(300, 400, 8),
}


# -- snappy: C++ snappy 1.1.x ------------------------------------------------------------------


def test_snappy_encoder_is_cpp_snappy_1_1() -> None:
    """The system's libsnappy is loaded and passes its probe; without it snappy batches would
    be written by cramjam, decodable but with other bytes and CRCs than Kafka's."""
    if raw_compressor() is None:
        pytest.fail(
            f"{SONAME} is missing or is not snappy 1.1.x: apt-get install {DEBIAN_PACKAGE} "
            "(tests/run installs it)",
            pytrace=False,
        )


# -- zstd: zstd-jni's stream, read by RFC 8878 --------------------------------------------------


def test_libzstd_is_kafkas() -> None:
    """zstd's bytes depend on the libzstd version (1.5.7 compresses otherwise than 1.5.6)."""
    assert zstandard.ZSTD_VERSION == KAFKA_ZSTD, "pyproject pins zstandard 0.23.x for this"


def _zstd_blocks(frame: bytes) -> list[tuple[bool, int, int]]:
    """(last, block type, block size) of each block of one frame, after checking the frame
    header is zstd-jni's: no content size, not single-segment, no checksum, no dictionary."""
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    fhd = frame[4]
    assert fhd >> 6 == 0, "no Frame_Content_Size (the size is never pledged)"
    assert not fhd & 0x20, "Single_Segment_flag clear: a Window_Descriptor follows"
    assert not fhd & 0x04, "no Content_Checksum"
    assert fhd & 0x03 == 0, "no Dictionary_ID"
    pos = 6  # magic, FHD, Window_Descriptor
    blocks = []
    while True:
        header = int.from_bytes(frame[pos : pos + 3], "little")
        last, kind, size = bool(header & 1), (header >> 1) & 3, header >> 3
        assert kind != 3, "reserved block type"
        blocks.append((last, kind, size))
        pos += 3 + (1 if kind == 1 else size)
        if last:
            break
    assert pos == len(frame), "nothing (no checksum) after the last block"
    return blocks


@pytest.mark.parametrize("name", [n for n in SAMPLES if SAMPLES[n]])
def test_zstd_frame_is_zstd_jnis_stream(name: str) -> None:
    data = SAMPLES[name]
    frame = compress(Compression.ZSTD, data)
    blocks = _zstd_blocks(frame)
    # the data in non-last blocks (flushed), then an empty raw last block (the frame's end)
    assert len(blocks) >= 2
    assert all(not last for last, _, _ in blocks[:-1])
    assert blocks[-1] == (True, 0, 0)
    assert frame[-3:] == b"\x01\x00\x00"
    assert all(size <= 128 * 1024 for _, _, size in blocks)
    zstd = require("zstd")
    out = subprocess.run([zstd, "-d", "-c", "-q"], input=frame, capture_output=True, check=True)
    assert out.stdout == data
    assert decompress(Compression.ZSTD, frame) == data


def test_zstd_of_nothing_is_zstd_jnis() -> None:
    # zstd-jni closing a stream nothing was written to: content size 0, an empty last block
    assert compress(Compression.ZSTD, b"") == bytes.fromhex("28b52ffd2000010000")
    assert decompress(Compression.ZSTD, compress(Compression.ZSTD, b"")) == b""


# -- the JVM libraries Kafka wraps ---------------------------------------------------------------


def _jar(directory: str, pattern: str) -> str:
    found = sorted(glob.glob(os.path.join(directory, pattern)))
    if not found:
        pytest.fail(f"no {pattern} in {directory}", pytrace=False)
    return found[-1]


def _zstd_jni_jar() -> str:
    """A zstd-jni jar wrapping the libzstd cleanerd uses (pyspark ships another version)."""
    want = ".".join(map(str, KAFKA_ZSTD))
    repo = Path.home() / ".m2/repository/com/github/luben/zstd-jni"
    found = sorted(repo.glob(f"{want}-*/zstd-jni-{want}-*.jar"))
    if not found:
        pytest.fail(
            f"no zstd-jni {want}-x jar under {repo} (Kafka's zstd-jni): "
            f"mvn dependency:get -Dartifact=com.github.luben:zstd-jni:{want}-6",
            pytrace=False,
        )
    return str(found[-1])


@pytest.fixture(scope="module")
def jvm() -> Iterator[Any]:
    """A JVM with snappy-java and lz4-java (pyspark's jars) and zstd-jni 1.5.6-x."""
    require("java")
    import pyspark  # noqa: PLC0415 (the spark extra's, which tests/run installs)
    from py4j.java_gateway import (  # noqa: PLC0415 (pyspark's dependency)
        GatewayParameters,
        JavaGateway,
        launch_gateway,
    )

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    classpath = ":".join(
        [_jar(jars, "snappy-java-*.jar"), _jar(jars, "lz4-java-*.jar"), _zstd_jni_jar()]
    )
    port, proc = launch_gateway(
        classpath=classpath,
        jarpath=_jar(jars, "py4j-*.jar"),
        die_on_exit=True,
        return_proc=True,
    )
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    try:
        yield gateway.jvm
    finally:
        gateway.shutdown()
        proc.kill()
        proc.wait()


def _written_through(jvm: Any, wrap: Callable[[Any], Any], data: bytes) -> bytes:
    """``data`` written through ``wrap(ByteArrayOutputStream)`` behind a DataOutputStream (as
    ``MemoryRecordsBuilder`` writes records) in uneven pieces, then closed."""
    sink = jvm.java.io.ByteArrayOutputStream()
    out = jvm.java.io.DataOutputStream(wrap(sink))
    rng = random.Random(len(data))
    pos = 0
    while pos < len(data):
        n = min(len(data) - pos, rng.choice((1, 7, 300, 5000, 40_000)))
        out.write(data[pos : pos + n])
        pos += n
    out.close()
    return bytes(sink.toByteArray())


def _kafka_lz4(jvm: Any, data: bytes) -> bytes:
    """Kafka's ``Lz4BlockOutputStream`` at the default level: lz4-java's fast compressor on
    each 64 KiB, a block stored raw (high bit) when it does not shrink, an int32 0 end mark."""
    compressor = jvm.net.jpountz.lz4.LZ4Factory.fastestInstance().fastCompressor()
    out = bytearray(bytes.fromhex("04224d18604082"))  # magic, FLG 0x60, BD 0x40, HC (§2.5.3)
    for i in range(0, len(data), 64 * 1024):
        block = data[i : i + 64 * 1024]
        packed = bytes(compressor.compress(block))
        if len(packed) >= len(block):
            out += struct.pack("<I", len(block) | 0x80000000) + block
        else:
            out += struct.pack("<I", len(packed)) + packed
    return bytes(out + b"\x00\x00\x00\x00")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SAMPLES))
def test_bytes_equal_the_jvm_libraries(jvm: Any, name: str) -> None:
    data = SAMPLES[name]
    io = jvm.java.io
    # SnappyCompression.wrapForOutput: SnappyOutputStream, 32 KiB blocks
    snappy_java = _written_through(jvm, jvm.org.xerial.snappy.SnappyOutputStream, data)
    assert compress(Compression.SNAPPY, data) == snappy_java
    # ZstdCompression.wrapForOutput: a 16 KiB BufferedOutputStream over zstd-jni at level 3
    zstd = jvm.com.github.luben.zstd

    def zstd_stream(sink: Any) -> Any:
        inner = zstd.ZstdOutputStreamNoFinalizer(sink, zstd.RecyclingBufferPool.INSTANCE, 3)
        return io.BufferedOutputStream(inner, 16 * 1024)

    assert compress(Compression.ZSTD, data) == _written_through(jvm, zstd_stream, data)

    # GzipCompression.wrapForOutput: GZIPOutputStream (8 KiB buffer) behind 16 KiB buffering
    def gzip_stream(sink: Any) -> Any:
        return io.BufferedOutputStream(jvm.java.util.zip.GZIPOutputStream(sink, 8 * 1024), 16384)

    assert compress(Compression.GZIP, data) == _written_through(jvm, gzip_stream, data)
    assert compress(Compression.LZ4, data) == _kafka_lz4(jvm, data)


@pytest.mark.slow
@pytest.mark.parametrize("codec", [Compression.ZSTD.label, Compression.SNAPPY.label])
def test_compacted_batches_are_what_kafka_would_write(jvm: Any, tmp_path: Path, codec: str) -> None:
    """``cleanerd compact`` rebuilds the batches it keeps part of; each compressed payload of
    the cleaned log is what Kafka's library writes for the same records (docs/kafka-format.md
    §2.5): every writer of compressed batches goes through the one codec home."""
    logdir = tmp_path / "logs"
    spec = WorkloadSpec(
        records=4000, keys=300, value_bytes=600, records_per_batch=100, codec=codec, seed=3
    )
    generate(logdir, spec)
    (partition,) = sorted(logdir.glob("demo-*"))
    log = PartitionLog(partition)
    log.roll()
    log.close()
    ok("compact", logdir, "--now", 1_800_000_000_000, "--delete-retention-ms", "0")

    zstd = jvm.com.github.luben.zstd
    writers = {
        "snappy": jvm.org.xerial.snappy.SnappyOutputStream,
        "zstd": lambda sink: jvm.java.io.BufferedOutputStream(
            zstd.ZstdOutputStreamNoFinalizer(sink, zstd.RecyclingBufferPool.INSTANCE, 3), 16384
        ),
    }
    rebuilt = 0
    for segment in sorted(partition.glob("*.log")):
        data = segment.read_bytes()
        for batch in iter_batches(data, path=str(segment)):
            h = batch.header
            if h.compression.label != codec:
                continue
            payload = bytes(batch.raw[61:])
            records = decompress(h.compression, payload)
            assert payload == _written_through(jvm, writers[codec], records), segment.name
            rebuilt += h.records_count < h.last_offset - h.base_offset + 1
    assert rebuilt > 10  # the cleaner did rewrite batches, not only copy them


@pytest.mark.slow
def test_snappy_probe_is_snappy_javas(jvm: Any) -> None:
    """The probe that admits a libsnappy holds snappy-java's own block for its input."""
    from cleanerd.format import _snappy  # noqa: PLC0415 (its private probe)

    block = bytes(jvm.org.xerial.snappy.Snappy.compress(_snappy._PROBE))
    assert hashlib.sha256(block).hexdigest() == _snappy._PROBE_SHA256
    assert bytes(cramjam.snappy.compress_raw(_snappy._PROBE)) != block  # it tells them apart
    raw = _snappy.raw_compressor()
    assert raw is not None
    for data in (SAMPLES["1.3MB"][:100_000], SAMPLES["small"]):  # past the held buffer, within
        assert raw(data) == bytes(jvm.org.xerial.snappy.Snappy.compress(data))


def test_a_missing_libsnappy_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without C++ snappy 1.1 the operator is told which package writes Kafka's bytes."""
    assert (_snappy.snappy_fallback_reason() is None) == (raw_compressor() is not None)
    monkeypatch.setattr(_snappy, "raw_compressor", lambda: None)
    why = _snappy.snappy_fallback_reason()
    assert why is not None
    assert DEBIAN_PACKAGE in why
    assert SONAME in why
