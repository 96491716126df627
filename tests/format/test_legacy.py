"""Legacy message sets (magic 0 and 1, docs/kafka-format.md §2.8) written by kafka-python: read
as kafka-python reads them, and hostile ones refused with file and position, within bounds."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import xxhash
from kafka.record import MemoryRecords

from cleanerd.format import (
    MAX_DECOMPRESSED_BYTES,
    Compression,
    CorruptRecordError,
    _legacy as legacy_module,
    _payloads as payloads_module,
    batch_records_bound,
    index_batches,
    kernels as k,
    limit_decompression,
    scan_batches,
)
from cleanerd.format._legacy import LegacyRecord, build_legacy, records_of, xxh32_short
from cleanerd.inspect import verify_path
from tests.support.bombs import compressed_bomb
from tests.support.legacy import Rec, legacy_set, set_crc, v2_batch, wrapper

PATH = "/data/old-0/00000000000000000000.log"


def _records(n: int, first: int = 0, tombstone_at: int = -1) -> list[Rec]:
    return [
        (first + i, 1000 + i, b"key-%d" % (i % 3), None if i == tombstone_at else b"value-%d" % i)
        for i in range(n)
    ]


def _index(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    scan = scan_batches(data, path=PATH)
    scan.raise_error()
    payload, recs = index_batches(data, scan.batches, path=PATH, check_crc=True)
    out = []
    for r in recs:
        kl, vl = int(r[k.R_KEY_LEN]), int(r[k.R_VALUE_LEN])
        key = None if kl < 0 else payload[r[k.R_KEY_POS] : r[k.R_KEY_POS] + kl].tobytes()
        val = None if vl < 0 else payload[r[k.R_VALUE_POS] : r[k.R_VALUE_POS] + vl].tobytes()
        out.append((int(r[k.R_OFFSET]), int(r[k.R_TIMESTAMP]), key, val))
    return out


def _kafka_python(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    mr = MemoryRecords(data)
    out = []
    while (batch := mr.next_batch()) is not None:
        # kafka-python says None where Kafka's NO_TIMESTAMP is -1 (magic 0)
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
                for r in batch]  # fmt: skip
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_read_as_kafka_python_reads(magic: int, codec: str) -> None:
    """Offsets (relative v1 inner offsets made absolute), timestamps, keys and values; the
    batch rows say first and last offset, count and magic."""
    data = legacy_set(magic, codec, _records(4, 100, tombstone_at=2))
    data += legacy_set(magic, codec, _records(3, 104))
    assert _index(data) == _kafka_python(data)
    rows = scan_batches(data).batches
    if codec == "none":
        assert rows[:, k.B_COUNT].tolist() == [1] * 7
    else:
        assert rows[:, k.B_BASE_OFFSET].tolist() == [100, 104]
        assert rows[:, k.B_LAST_OFFSET].tolist() == [103, 106]
        assert rows[:, k.B_COUNT].tolist() == [4, 3]
    assert set(rows[:, k.B_MAGIC].tolist()) == {magic}


def test_log_append_time_wrapper_gives_its_time_to_inner_messages() -> None:
    data = legacy_set(1, "gzip", _records(3), log_append_time=777)
    assert [r[1] for r in _index(data)] == [777, 777, 777]
    assert _index(data) == _kafka_python(data)


def test_mixed_v0_v1_v2_in_one_buffer() -> None:
    data = (
        legacy_set(0, "none", _records(2, 0))
        + legacy_set(1, "lz4", _records(3, 2))
        + v2_batch(5, "none", _records(2, 5))
        + legacy_set(0, "gzip", _records(2, 7))  # Kafka never writes this order; it reads it
        + v2_batch(9, "gzip", _records(3, 9))
    )
    assert _index(data) == _kafka_python(data)
    assert scan_batches(data).batches[:, k.B_MAGIC].tolist() == [0, 0, 1, 2, 0, 2]


def test_xxh32_short_is_xxhash32() -> None:
    for n in range(16):
        data = bytes(range(7, 7 + n))
        assert xxh32_short(data) == xxhash.xxh32(data, seed=0).intdigest()


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_build_legacy_is_read_by_kafka_python(magic: int, codec: int) -> None:
    """What the cleaner writes: magic and codec kept, v1 inner offsets relative, wrapper at the
    last offset, CRC32s kafka-python validates (v0 lz4 with Kafka's old header checksum)."""
    recs = [LegacyRecord(50 + 3 * i, magic, -1 if magic == 0 else 10 + i, b"k", b"v%d" % i)
            for i in range(3)]  # fmt: skip
    data, ts = build_legacy(magic, codec, -1, recs)
    mr = MemoryRecords(data)
    got = []
    while (batch := mr.next_batch()) is not None:  # uncompressed: one message each
        assert batch.magic == magic
        assert batch.compression_type == codec
        assert batch.validate_crc()
        got += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
        assert all(r.validate_crc() for r in batch)
    assert got == [(r.offset, r.timestamp if magic else None, r.key, r.value) for r in recs]
    assert ts == (-1 if magic == 0 else 12)
    row = scan_batches(data).batches[0]
    assert [r.offset for r in records_of(np.frombuffer(data, np.uint8), row)][:1] == [50]


def test_build_legacy_log_append_time() -> None:
    recs = [LegacyRecord(5 + i, 1, 1 + i, b"k", b"v") for i in range(2)]
    data, ts = build_legacy(1, 0x08 | 1, 999, recs)
    batch = MemoryRecords(data).next_batch()
    assert ts == 999
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [999, 999]


# --- hostile input -------------------------------------------------------------------------------


def _error(data: bytes) -> CorruptRecordError:
    scan = scan_batches(data, path=PATH)
    if scan.error is None:
        with pytest.raises(CorruptRecordError) as info:
            index_batches(data, scan.batches, path=PATH, check_crc=True)
        return info.value
    return scan.error


def _wrapper(magic: int, codec: int, value: bytes, offset: int = 10) -> bytes:
    return wrapper(magic, codec, value, offset)


GOOD = legacy_set(1, "none", _records(1, 0))
POS = len(GOOD)


def test_outer_crc32_mismatch_named_with_position() -> None:
    bad = bytearray(legacy_set(1, "gzip", _records(3, 1)))
    bad[-1] ^= 0xFF
    err = _error(GOOD + bytes(bad))
    assert err.position == POS
    assert err.path == PATH
    assert "CRC32 mismatch" in err.reason
    assert "magic 1" in err.reason
    assert err.last_good_offset == 0


def test_inner_crc32_mismatch() -> None:
    inner = bytearray(legacy_set(1, "none", _records(2, 1)))
    inner[-1] ^= 0x01
    err = _error(GOOD + _wrapper(1, 1, gzip.compress(bytes(inner))))
    assert err.position == POS
    assert "inner message" in err.reason
    assert "CRC32" in err.reason


def test_nested_wrapper_refused() -> None:
    nested = legacy_set(1, "gzip", _records(2, 1))
    err = _error(GOOD + _wrapper(1, 1, gzip.compress(nested)))
    assert err.position == POS
    assert "nested compressed" in err.reason


@pytest.mark.parametrize("size", [-5, 3, 21, 1 << 30])
def test_message_size_out_of_range(size: int) -> None:
    bad = bytearray(legacy_set(1, "none", _records(1, 1)))
    struct.pack_into(">i", bad, 8, size)
    err = _error(GOOD + bytes(bad))
    assert err.position == POS


def test_inner_size_past_the_value_checked_before_reading() -> None:
    inner = bytearray(legacy_set(1, "none", _records(2, 1)))
    struct.pack_into(">i", inner, 8, 1 << 30)  # first inner message claims 1 GiB
    err = _error(GOOD + _wrapper(1, 1, gzip.compress(bytes(inner))))
    assert err.position == POS
    assert "size" in err.reason


@pytest.mark.parametrize("field_at", [26, 31])  # key length, value length of a v1 message
def test_key_or_value_length_past_the_message(field_at: int) -> None:
    bad = bytearray(legacy_set(1, "none", [(1, 5, b"kk", b"vv")]))
    struct.pack_into(">i", bad, field_at, 1 << 20)
    set_crc(bad)
    err = _error(GOOD + bytes(bad))
    assert err.position == POS
    assert "length" in err.reason


def test_zstd_and_unknown_codecs_refused_before_magic_2() -> None:
    for codec in (4, 5):
        err = _error(GOOD + _wrapper(1, codec, b"\x00" * 8))
        assert err.position == POS
        assert f"codec id {codec}" in err.reason


def test_empty_and_null_wrappers_refused() -> None:
    assert "no inner messages" in _error(GOOD + _wrapper(1, 1, gzip.compress(b""))).reason
    null = bytearray(_wrapper(1, 1, b""))
    struct.pack_into(">i", null, len(null) - 4, -1)
    struct.pack_into(">i", null, 8, len(null) - 12 - 0)
    set_crc(null)
    assert "null value" in _error(GOOD + bytes(null)).reason


def test_wrapper_offset_below_its_inner_offsets_refused() -> None:
    inner = legacy_set(1, "none", _records(3, 5))  # v1 relative offsets would be 0..2
    err = _error(GOOD + _wrapper(1, 1, gzip.compress(inner), offset=6))
    assert err.position == POS
    assert "wrapper offset" in err.reason


def test_decompression_bomb_stops_at_the_bound() -> None:
    head = legacy_set(1, "none", _records(1, 1))
    bomb = compressed_bomb(Compression.GZIP, head, 64 << 20)
    with limit_decompression(1 << 20):
        err = _error(GOOD + _wrapper(1, 1, bomb, offset=1))
    assert err.position == POS
    assert "max.decompressed.message.bytes" in err.reason


def _tiny_messages(count: int, first: int) -> bytes:
    """``count`` v0 messages of 26 bytes (null key, empty value) at offsets ``first`` on."""
    body = bytes((0, 0)) + struct.pack(">ii", -1, 0)
    msg = np.frombuffer(struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body, np.uint8)
    out = np.tile(msg, count).reshape(count, msg.shape[0])
    offsets = (first + np.arange(count)).astype(">i8")
    out[:, :8] = offsets.view(np.uint8).reshape(count, 8)
    return out.tobytes()


@pytest.mark.parametrize("extra", [0, 1])
def test_a_wrapper_holds_no_more_messages_than_reading_them_may_take(
    extra: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Legacy messages are read in Python (about 512 bytes each), so a wrapper within the
    bound on its value could hold 5M 26-byte messages and take 2.6 GB to read. At most
    ``batch_records_bound(limit, LEGACY_MESSAGE_BYTES)`` read; one more is refused, naming the
    setting. Tried at 300 messages by raising the per-message cost."""
    monkeypatch.setattr(legacy_module, "LEGACY_MESSAGE_BYTES", (3 * 128 << 20) // 300)
    most = batch_records_bound(MAX_DECOMPRESSED_BYTES, legacy_module.LEGACY_MESSAGE_BYTES)
    assert most == 300
    value = gzip.compress(_tiny_messages(most + extra, 1))
    data = GOOD + _wrapper(0, 1, value, offset=most + extra)
    if not extra:
        assert [r[0] for r in _index(data)] == list(range(most + 1))
        return
    err = _error(data)
    assert err.position == POS
    assert f"holds more than the {most} inner messages" in err.reason
    assert "raise max.decompressed.message.bytes for this topic" in err.reason


@pytest.mark.slow
def test_a_wrapper_of_one_message_past_the_default_bound_is_refused() -> None:
    """At the default setting: 786,433 messages of 26 bytes (20 MB, within the bound) in one
    gzip wrapper are refused, the bound's worth read first."""
    most = batch_records_bound(MAX_DECOMPRESSED_BYTES, legacy_module.LEGACY_MESSAGE_BYTES)
    data = GOOD + _wrapper(0, 1, gzip.compress(_tiny_messages(most + 1, 1), 1), offset=most + 1)
    err = _error(data)
    assert err.position == POS
    assert f"holds more than the {most} inner messages" in err.reason


def test_dump_and_verify_read_a_legacy_partition(tmp_path: Path) -> None:
    part = tmp_path / "old-0"
    part.mkdir()
    data = legacy_set(0, "gzip", _records(3)) + legacy_set(1, "snappy", _records(2, 3))
    (part / "00000000000000000000.log").write_bytes(data + v2_batch(5, "lz4", _records(2, 5)))
    report = verify_path(tmp_path)
    assert report.ok, report
    seg = part / "00000000000000000000.log"
    bad = bytearray(seg.read_bytes())
    bad[40] ^= 0x10  # inside the first (gzip) wrapper: its CRC32 no longer matches
    seg.write_bytes(bytes(bad))
    assert not verify_path(tmp_path).ok


def test_many_wrappers_each_under_the_bound_stop_at_the_chunk_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As for v2 chunks: wrappers read together take at most the chunk's bound decompressed
    (four times the setting, here with no floor under it)."""
    monkeypatch.setattr(payloads_module, "CHUNK_PAYLOADS_FLOOR", 1)
    big = [
        wrapper(1, 1, gzip.compress(legacy_set(1, "none", [(i, 0, b"k", bytes(900_000))])), i)
        for i in range(1, 7)
    ]
    data = GOOD + b"".join(big)
    with limit_decompression(1 << 20):
        scan = scan_batches(data, path=PATH)
        assert scan.error is None  # each wrapper alone is within the bound
        with pytest.raises(CorruptRecordError, match="together") as info:
            index_batches(data, scan.batches, path=PATH)
    assert info.value.position is not None
    assert info.value.position > POS
