"""Interop with kafka-python's record classes, an independent implementation of format v2.

What cleanerd builds, kafka-python reads identically (and its CRC check passes); what
kafka-python's builder writes, cleanerd reads identically. kafka-python's builder always writes
base offset 0 and partition leader epoch 0 (the broker assigns both; neither is covered by the
CRC), so tests patch them in with ``set_base_offset`` / ``set_partition_leader_epoch``.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.default_records import (
    ControlRecord,
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
)
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from cleanerd.format import (
    BatchHeader,
    Compression,
    ControlType,
    EndTransactionMarker,
    Record,
    index_batches,
    iter_batches,
    kernels as k,
    records_from_index,
    scan_batches,
)
from cleanerd.format._builder import (
    build_batch,
    build_control_batch,
    build_empty_batch,
    build_end_txn_marker,
    set_base_offset,
    set_partition_leader_epoch,
)

SETTINGS = settings(
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CODECS = list(Compression)
RecordTuple = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


# -- helpers ---------------------------------------------------------------------------------


def kp_read(data: bytes) -> list[tuple[DefaultRecordBatch, bool, list[Any]]]:
    """kafka-python's reading: (batch, crc ok, records) for every batch in ``data``."""
    mr = MemoryRecords(bytes(data))
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        crc_ok = batch.validate_crc()  # must be called before iterating
        out.append((batch, crc_ok, list(batch)))
    assert mr.valid_bytes() == len(data)
    return out


def as_tuples(records: list[Any]) -> list[RecordTuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def ours(records: list[Record]) -> list[RecordTuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def cleanerd_read(data: bytes) -> tuple[list[BatchHeader], list[list[Record]]]:
    scan = scan_batches(data, path="compat.log")
    assert scan.error is None, scan.error
    assert scan.end == len(data)
    payload, index = index_batches(data, scan.batches, path="compat.log")
    records = list(records_from_index(payload, index))
    per_batch: list[list[Record]] = [[] for _ in range(len(scan))]
    for rec, row in zip(records, index[:, k.R_BATCH], strict=True):
        per_batch[int(row)].append(rec)
    return [scan.header(i) for i in range(len(scan))], per_batch


def assert_same_batch(kb: DefaultRecordBatch, h: BatchHeader) -> None:
    assert kb.base_offset == h.base_offset
    assert kb.size_in_bytes == h.size
    assert kb.leader_epoch == h.partition_leader_epoch
    assert kb.magic == h.magic == 2
    assert kb.crc == h.crc
    assert kb.attributes == h.attributes
    assert kb.compression_type == int(h.compression)
    assert kb.timestamp_type == (1 if h.timestamp_type == "LogAppendTime" else 0)
    assert kb.is_transactional == h.is_transactional
    assert kb.is_control_batch == h.is_control
    assert kb.last_offset_delta == h.last_offset_delta
    assert kb.last_offset == h.last_offset
    assert kb.next_offset == h.next_offset
    assert kb.first_timestamp == h.base_timestamp
    assert kb.max_timestamp == h.max_timestamp
    assert kb.producer_id == h.producer_id
    assert kb.has_producer_id() == h.has_producer_id
    assert kb.producer_epoch == h.producer_epoch
    assert kb.base_sequence == h.base_sequence
    assert kb.last_sequence == h.last_sequence
    assert kb.records_count == h.records_count


def assert_kp_agrees(data: bytes) -> tuple[list[BatchHeader], list[list[Record]]]:
    """Both readers agree on every batch field and record of ``data``; CRCs check out."""
    headers, per_batch = cleanerd_read(data)
    kp = kp_read(data)
    assert len(kp) == len(headers)
    for (kb, crc_ok, krecs), h, recs in zip(kp, headers, per_batch, strict=True):
        assert crc_ok
        assert_same_batch(kb, h)
        assert as_tuples(krecs) == ours(recs)
    return headers, per_batch


# -- cleanerd -> kafka-python ----------------------------------------------------------------

SAMPLE = [
    Record(0, 1_700_000_000_000, b"key-1", b"value " * 40, (("trace", b"abc"), ("null", None))),
    Record(1, 1_699_999_999_000, None, b"null key " * 30),  # negative timestamp delta
    Record(4, 1_700_000_000_500, b"key-2", None, (("", b""),)),  # tombstone, offset gap
    Record(5, 1_700_000_000_100, "ключ".encode(), "значение".encode() * 20, (("ü", None),)),
    Record(9, 1_700_000_000_200, b"\x00\xff\x80", bytes(range(256)) * 3),
]


@pytest.mark.parametrize("codec", CODECS)
def test_cleanerd_data_batch_reads_in_kafka_python(codec: Compression) -> None:
    moved = [Record(1000 + r.offset, r.timestamp, r.key, r.value, r.headers) for r in SAMPLE]
    raw = build_batch(moved, compression=codec, partition_leader_epoch=3, last_offset=1012)
    headers, per_batch = assert_kp_agrees(raw)
    assert per_batch == [moved]
    assert headers[0].compression == codec
    assert headers[0].last_offset == 1012


@pytest.mark.parametrize("codec", CODECS)
def test_cleanerd_transactional_batch_reads_in_kafka_python(codec: Compression) -> None:
    raw = build_batch(
        SAMPLE,
        compression=codec,
        transactional=True,
        producer_id=123456789012,
        producer_epoch=7,
        base_sequence=2**31 - 3,  # last sequence wraps past Int.MaxValue
    )
    headers, _ = assert_kp_agrees(raw)
    (kb, _, _) = kp_read(raw)[0]
    assert kb.is_transactional
    # MAX-2 + 9: MAX-1, MAX, then wraps to 0 (not to MIN) and goes on to 6
    assert kb.last_sequence == headers[0].last_sequence == 6


@pytest.mark.parametrize("codec", CODECS)
def test_cleanerd_log_append_time_and_delete_horizon(codec: Compression) -> None:
    lat = build_batch(SAMPLE, compression=codec, log_append_time=True, max_timestamp=1_800_000)
    (_, _, krecs) = kp_read(lat)[0]
    assert {r.timestamp for r in krecs} == {1_800_000}
    assert all(r.timestamp_type == 1 for r in krecs)
    assert_kp_agrees(lat)

    horizon = build_batch(SAMPLE, compression=codec, delete_horizon_ms=1_800_000_000_000)
    headers, per_batch = assert_kp_agrees(horizon)
    assert headers[0].delete_horizon_ms == 1_800_000_000_000
    assert per_batch == [SAMPLE]  # record timestamps survive the horizon as base timestamp


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("coordinator_epoch", [0, 5, 2**31 - 1])
def test_end_txn_markers_read_in_kafka_python(commit: bool, coordinator_epoch: int) -> None:
    raw = build_end_txn_marker(
        commit=commit,
        offset=77,
        timestamp=1234,
        producer_id=42,
        producer_epoch=3,
        coordinator_epoch=coordinator_epoch,
        partition_leader_epoch=9,
    )
    assert len(raw) == 78
    assert_kp_agrees(raw)
    ((kb, _, (krec,)),) = kp_read(raw)
    assert kb.is_control_batch
    assert kb.is_transactional
    assert isinstance(krec, ControlRecord)
    assert krec.commit is commit
    assert krec.abort is not commit
    assert krec.version == 0
    assert krec.type == (ControlType.COMMIT if commit else ControlType.ABORT)
    assert struct.unpack(">hi", krec.value) == (0, coordinator_epoch)
    (batch,) = list(iter_batches(raw))
    control = batch.control_type()
    assert control is not None
    marker = EndTransactionMarker.parse(control, batch.records()[0].value)
    assert marker.coordinator_epoch == coordinator_epoch


@pytest.mark.parametrize("kind", [ControlType.LEADER_CHANGE, ControlType.SNAPSHOT_HEADER])
def test_other_control_batches_read_in_kafka_python(kind: ControlType) -> None:
    raw = build_control_batch(kind, b"\x00\x00payload", offset=10, timestamp=99)
    assert_kp_agrees(raw)
    ((_, _, (krec,)),) = kp_read(raw)
    assert krec.type == kind
    assert krec.value == b"\x00\x00payload"


def test_empty_batch_reads_in_kafka_python() -> None:
    raw = build_empty_batch(
        base_offset=50,
        last_offset=59,
        max_timestamp=4242,
        transactional=True,
        producer_id=8,
        producer_epoch=1,
        base_sequence=17,
    )
    headers, per_batch = assert_kp_agrees(raw)
    assert per_batch == [[]]
    assert headers[0].last_sequence == 26


def test_many_cleanerd_batches_in_one_buffer() -> None:
    parts = []
    next_offset = 0
    for i, codec in enumerate(CODECS * 2):
        recs = [
            Record(next_offset + j, 10_000 + i * 10 - j, b"k%d" % j, b"v%d" % j * 50)
            for j in range(i + 1)
        ]
        parts.append(build_batch(recs, compression=codec, partition_leader_epoch=i))
        next_offset += i + 1
    parts.append(
        build_end_txn_marker(
            commit=True, offset=next_offset, timestamp=1, producer_id=1, producer_epoch=0
        )
    )
    headers, per_batch = assert_kp_agrees(b"".join(parts))
    assert len(headers) == 11
    assert sum(len(b) for b in per_batch) == next_offset + 1


# hypothesis: random data batches (control needs real control keys, tested above)
blobs = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.text(max_size=16).map(lambda s: s.encode("utf-8")),
    st.integers(0, 400).map(lambda n: b"z" * n),
)
headers_st = st.lists(
    st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=16))), max_size=3
).map(tuple)


@st.composite
def cleanerd_batches(draw: st.DrawFn) -> bytes:
    out = []
    offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 8))
        recs = []
        for _ in range(n):
            offset += draw(st.integers(1, 1000))
            recs.append(
                Record(
                    offset,
                    draw(st.integers(-(2**45), 2**45)),
                    draw(blobs),
                    draw(blobs),
                    draw(headers_st),
                )
            )
        txn = draw(st.booleans())
        kwargs: dict[str, Any] = {
            "compression": draw(st.sampled_from(CODECS)),
            "log_append_time": draw(st.booleans()),
            "transactional": txn,
            "producer_id": draw(st.integers(0, 2**62)) if txn else -1,
            "producer_epoch": draw(st.integers(0, 32767)) if txn else -1,
            "base_sequence": draw(st.integers(0, 2**31 - 1)) if txn else -1,
            "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
            "last_offset": offset + draw(st.integers(0, 3)),
        }
        if draw(st.booleans()):
            kwargs["delete_horizon_ms"] = draw(st.integers(0, 2**45))
        if draw(st.booleans()):
            kwargs["max_timestamp"] = draw(st.sampled_from([-1, 0, 2**45]))
        out.append(build_batch(recs, **kwargs))
        offset = kwargs["last_offset"]
    return b"".join(out)


@pytest.mark.slow
@SETTINGS
@given(data=cleanerd_batches())
def test_cleanerd_random_batches_read_in_kafka_python(data: bytes) -> None:
    assert_kp_agrees(data)


# -- kafka-python -> cleanerd ----------------------------------------------------------------


def kp_build(
    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    *,
    codec: Compression,
    producer: tuple[int, int, int, bool] | None = None,
) -> bytearray:
    """A batch from kafka-python's builder; record offsets are its offset *deltas*."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    if producer is not None:
        builder.set_producer_state(*producer)
    for delta, ts, key, value, headers in records:
        assert builder.append(delta, ts, key, value, headers) is not None
    return bytearray(builder.build())


KP_SAMPLE: list[RecordTuple] = [
    (0, 1_700_000_000_000, b"a", b"alpha " * 50, [("h1", b"x"), ("h2", None)]),
    (1, 1_700_000_000_005, None, b"no key " * 50, []),
    (3, 1_699_999_999_990, b"c", None, [("tomb", None)]),  # tombstone, gap, earlier timestamp
    (7, 1_700_000_000_010, "ä".encode(), "ü".encode() * 100, [("ключ", "значение".encode())]),
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "producer", [None, (4711, 2, 100, False), (4711, 2, 2**31 - 2, True)], ids=str
)
def test_kafka_python_batch_reads_in_cleanerd(
    codec: Compression, producer: tuple[int, int, int, bool] | None
) -> None:
    buf = kp_build(KP_SAMPLE, codec=codec, producer=producer)
    # kafka-python leaves the broker-assigned fields at 0
    assert struct.unpack_from(">q", buf, 0)[0] == 0
    assert struct.unpack_from(">i", buf, 12)[0] == 0
    # it keeps the codec only when compression pays off; the sample is compressible
    assert buf[22] & 7 == int(codec)
    set_base_offset(buf, 5000)
    set_partition_leader_epoch(buf, 12)
    data = bytes(buf)
    headers, per_batch = assert_kp_agrees(data)
    h = headers[0]
    assert h.base_offset == 5000
    assert h.partition_leader_epoch == 12
    assert h.last_offset == 5007
    assert h.base_timestamp == 1_700_000_000_000
    assert h.max_timestamp == 1_700_000_000_010
    if producer is None:
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
        assert not h.is_transactional
    else:
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer[:3]
        assert h.is_transactional is producer[3]
    want = [(5000 + d, ts, key, v, hs) for d, ts, key, v, hs in KP_SAMPLE]
    assert ours(per_batch[0]) == want


def test_kafka_python_batches_concatenated_with_patched_offsets() -> None:
    parts = []
    base = 0
    for i, codec in enumerate(CODECS):
        recs: list[RecordTuple] = [
            (j, 1000 * i + j, b"k%d" % j, b"v" * 200, [("n", None)] * (j % 2)) for j in range(i + 2)
        ]
        buf = kp_build(recs, codec=codec)
        set_base_offset(buf, base)
        parts.append(bytes(buf))
        base += len(recs)
    data = b"".join(parts)
    headers, per_batch = assert_kp_agrees(data)
    assert [h.compression for h in headers] == CODECS
    offsets = [r.offset for recs in per_batch for r in recs]
    assert offsets == list(range(base))
    # cleanerd's own per-batch view agrees with the index
    assert [r for b in iter_batches(data) for r in b.records()] == [
        r for recs in per_batch for r in recs
    ]


def test_kafka_python_memory_records_builder_offset_is_a_delta() -> None:
    # MemoryRecordsBuilder(offset=N) does not set the base offset: it writes N as the first
    # record's offset *delta* (base offset stays 0), so the batch spans [0, N + count - 1].
    mb = MemoryRecordsBuilder(magic=2, compression_type=1, batch_size=1 << 20, offset=100)
    for i in range(3):
        mb.append(2000 + i, b"k%d" % i, b"value" * 40, [("h", None)])
    mb.close()
    data = bytes(mb.buffer())
    headers, per_batch = assert_kp_agrees(data)
    assert headers[0].base_offset == 0
    assert headers[0].last_offset == 102
    assert [r.offset for r in per_batch[0]] == [100, 101, 102]


@st.composite
def kp_records(draw: st.DrawFn) -> list[RecordTuple]:
    n = draw(st.integers(1, 10))
    delta = draw(st.integers(0, 5))
    out: list[RecordTuple] = []
    for _ in range(n):
        out.append(
            (
                delta,
                draw(st.integers(0, 2**44)),
                draw(blobs),
                draw(blobs),
                [(hk, hv) for hk, hv in draw(headers_st)],
            )
        )
        delta += draw(st.integers(1, 100_000))
    return out


@pytest.mark.slow
@SETTINGS
@given(
    records=kp_records(),
    codec=st.sampled_from(CODECS),
    base=st.integers(0, 2**50),
    epoch=st.integers(-1, 2**31 - 1),
    producer=st.one_of(
        st.none(),
        st.tuples(
            st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, 2**31 - 1), st.booleans()
        ),
    ),
)
def test_kafka_python_random_batches_read_in_cleanerd(
    records: list[RecordTuple],
    codec: Compression,
    base: int,
    epoch: int,
    producer: tuple[int, int, int, bool] | None,
) -> None:
    buf = kp_build(records, codec=codec, producer=producer)
    set_base_offset(buf, base)
    set_partition_leader_epoch(buf, epoch)
    _, per_batch = assert_kp_agrees(bytes(buf))
    assert ours(per_batch[0]) == [(base + d, ts, key, v, hs) for d, ts, key, v, hs in records]
