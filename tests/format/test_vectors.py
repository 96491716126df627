"""The test vectors of docs/kafka-format.md §2.7, built byte for byte and parsed field by field."""

from __future__ import annotations

import crc32c
import pytest

from cleanerd.format import (
    BatchHeader,
    ControlType,
    EndTransactionMarker,
    Record,
    index_batches,
    iter_batches,
    kernels as k,
    parse_control_key,
    records_from_index,
    scan_batches,
)
from cleanerd.format._builder import (
    build_batch,
    build_empty_batch,
    build_end_txn_marker,
    set_base_offset,
    set_partition_leader_epoch,
)


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# One record, key "k", value "v", base 0, leader epoch 0, CreateTime 1000, no producer (70 bytes).
ONE_RECORD = _hex(
    "0000000000000000 0000003a 00000000 02 716a6189 0000 00000000 00000000000003e8"
    " 00000000000003e8 ffffffffffffffff ffff ffffffff 00000001 | 10 00 00 00 02 6b 02 76 00"
)
# Header-only transactional batch: base 5, lastOffsetDelta 2, producer 7/0, seq 3, max ts 1234.
EMPTY_TXN = _hex(
    "0000000000000005 00000031 00000000 02 d0ed8770 0010 00000002 ffffffffffffffff"
    " 00000000000004d2 0000000000000007 0000 00000003 00000000"
)
# COMMIT marker: base 9, producer 7 epoch 0, ts 1000, coordinator epoch 0 (78 bytes).
COMMIT_MARKER = _hex(
    "0000000000000009 00000042 00000000 02 fff0903e 0030 00000000 00000000000003e8"
    " 00000000000003e8 0000000000000007 0000 ffffffff 00000001"
    " | 20 00 00 00 08 00000001 0c 000000000000 00"
)


def test_vector_lengths_and_crcs() -> None:
    # sanity of the transcription itself: sizes as stated, CRC32C over [21, end)
    assert (len(ONE_RECORD), len(EMPTY_TXN), len(COMMIT_MARKER)) == (70, 61, 78)
    for vec in (ONE_RECORD, EMPTY_TXN, COMMIT_MARKER):
        assert int.from_bytes(vec[17:21], "big") == crc32c.crc32c(vec[21:])


# -- building ---------------------------------------------------------------------------------


def test_build_one_record_vector() -> None:
    built = build_batch([Record(0, 1000, b"k", b"v")], partition_leader_epoch=0)
    assert built == ONE_RECORD


def test_build_empty_transactional_vector() -> None:
    built = build_empty_batch(
        base_offset=5,
        last_offset=7,
        max_timestamp=1234,
        transactional=True,
        producer_id=7,
        producer_epoch=0,
        base_sequence=3,
        partition_leader_epoch=0,
    )
    assert built == EMPTY_TXN


def test_build_empty_via_build_batch_matches_vector() -> None:
    built = build_batch(
        [],
        base_offset=5,
        last_offset=7,
        max_timestamp=1234,
        transactional=True,
        producer_id=7,
        producer_epoch=0,
        base_sequence=3,
        partition_leader_epoch=0,
    )
    assert built == EMPTY_TXN


def test_build_commit_marker_vector() -> None:
    built = build_end_txn_marker(
        commit=True,
        offset=9,
        timestamp=1000,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=0,
        partition_leader_epoch=0,
    )
    assert built == COMMIT_MARKER


def test_build_abort_marker_differs_only_in_type_and_crc() -> None:
    built = build_end_txn_marker(
        commit=False,
        offset=9,
        timestamp=1000,
        producer_id=7,
        producer_epoch=0,
        partition_leader_epoch=0,
    )
    assert len(built) == 78
    diff = [i for i in range(78) if built[i] != COMMIT_MARKER[i]]
    # CRC bytes 17..20 and the low byte of the control type (61 + 1 + 1 + 1 + 1 + 1 + 3)
    assert set(diff) - {17, 18, 19, 20} == {69}
    assert built[68:70] == b"\x00\x00"


# -- parsing ----------------------------------------------------------------------------------


def _header(vec: bytes) -> BatchHeader:
    scan = scan_batches(vec, path="vec.log")
    assert scan.error is None
    assert len(scan) == 1
    assert scan.end == len(vec)
    header = scan.header(0)
    assert header == BatchHeader.parse(vec)
    return header


def test_parse_one_record_vector() -> None:
    h = _header(ONE_RECORD)
    assert h.base_offset == 0
    assert h.batch_length == 0x3A
    assert h.size == 70
    assert h.partition_leader_epoch == 0
    assert h.magic == 2
    assert h.crc == 0x716A6189
    assert h.attributes == 0
    assert h.last_offset_delta == 0
    assert h.last_offset == 0
    assert h.next_offset == 1
    assert h.base_timestamp == 1000
    assert h.max_timestamp == 1000
    assert h.producer_id == -1
    assert not h.has_producer_id
    assert h.producer_epoch == -1
    assert h.base_sequence == -1
    assert h.last_sequence == -1
    assert h.records_count == 1
    assert h.timestamp_type == "CreateTime"
    assert not h.is_transactional
    assert not h.is_control
    assert h.delete_horizon_ms is None
    assert h.compression.label == "none"
    assert h.pack() == ONE_RECORD[:61]

    (batch,) = list(iter_batches(ONE_RECORD))
    assert batch.position == 0
    assert batch.size == 70
    assert bytes(batch.raw) == ONE_RECORD
    assert batch.records() == [Record(0, 1000, b"k", b"v", ())]
    assert batch.control_type() is None

    scan = scan_batches(ONE_RECORD)
    payload, index = index_batches(ONE_RECORD, scan.batches)
    assert list(records_from_index(payload, index)) == [Record(0, 1000, b"k", b"v")]
    # record at 61: length, attributes, ts delta, offset delta, key length, key, value length
    assert int(index[0, k.R_KEY_POS]) == 66
    assert int(index[0, k.R_VALUE_POS]) == 68
    assert int(index[0, k.R_SIZE]) == 9  # 1 length byte + 8 body bytes


def test_parse_empty_transactional_vector() -> None:
    h = _header(EMPTY_TXN)
    assert h.base_offset == 5
    assert h.batch_length == 0x31
    assert h.size == 61
    assert h.partition_leader_epoch == 0
    assert h.magic == 2
    assert h.crc == 0xD0ED8770
    assert h.attributes == 0x10
    assert h.is_transactional
    assert not h.is_control
    assert h.last_offset_delta == 2
    assert h.last_offset == 7
    assert h.base_timestamp == -1
    assert h.max_timestamp == 1234
    assert h.producer_id == 7
    assert h.has_producer_id
    assert h.producer_epoch == 0
    assert h.base_sequence == 3
    assert h.last_sequence == 5
    assert h.records_count == 0

    (batch,) = list(iter_batches(EMPTY_TXN))
    assert batch.records() == []
    assert batch.control_type() is None


def test_parse_commit_marker_vector() -> None:
    h = _header(COMMIT_MARKER)
    assert h.base_offset == 9
    assert h.batch_length == 0x42
    assert h.size == 78
    assert h.partition_leader_epoch == 0
    assert h.crc == 0xFFF0903E
    assert h.attributes == 0x30
    assert h.is_control
    assert h.is_transactional
    assert h.last_offset == 9
    assert h.base_timestamp == 1000
    assert h.max_timestamp == 1000
    assert h.producer_id == 7
    assert h.producer_epoch == 0
    assert h.base_sequence == -1
    assert h.records_count == 1

    (batch,) = list(iter_batches(COMMIT_MARKER))
    (rec,) = batch.records()
    assert rec.offset == 9
    assert rec.timestamp == 1000
    assert rec.key == b"\x00\x00\x00\x01"
    assert rec.value == b"\x00\x00\x00\x00\x00\x00"
    assert rec.headers == ()
    assert batch.control_type() is ControlType.COMMIT
    assert parse_control_key(rec.key) is ControlType.COMMIT
    marker = EndTransactionMarker.parse(ControlType.COMMIT, rec.value)
    assert marker == EndTransactionMarker(ControlType.COMMIT, 0, 0)
    assert marker.coordinator_epoch == 0
    assert marker.version == 0


@pytest.mark.parametrize("epoch", [1, 7, 2**31 - 1, -1])
def test_marker_coordinator_epoch_roundtrip(epoch: int) -> None:
    built = build_end_txn_marker(
        commit=False,
        offset=3,
        timestamp=5,
        producer_id=1,
        producer_epoch=2,
        coordinator_epoch=epoch,
    )
    (batch,) = list(iter_batches(built))
    assert batch.control_type() is ControlType.ABORT
    (rec,) = batch.records()
    marker = EndTransactionMarker.parse(ControlType.ABORT, rec.value)
    assert marker.coordinator_epoch == epoch
    assert batch.header.partition_leader_epoch == -1
    assert batch.header.base_sequence == -1


def test_three_vectors_concatenated() -> None:
    data = ONE_RECORD + EMPTY_TXN + COMMIT_MARKER
    scan = scan_batches(data)
    assert scan.error is None
    assert scan.end == len(data)
    assert [int(p) for p in scan.batches[:, k.B_POS]] == [0, 70, 131]
    assert [scan.header(i).base_offset for i in range(3)] == [0, 5, 9]
    payload, index = index_batches(data, scan.batches)
    recs = list(records_from_index(payload, index))
    assert [r.offset for r in recs] == [0, 9]
    assert [int(b) for b in index[:, k.R_BATCH]] == [0, 2]
    kinds = [b.control_type() for b in iter_batches(data)]
    assert kinds == [None, None, ControlType.COMMIT]


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    moved = bytearray(ONE_RECORD)
    set_base_offset(moved, 1_000_000)
    set_partition_leader_epoch(moved, 42)
    assert moved[17:] == ONE_RECORD[17:]
    (batch,) = list(iter_batches(bytes(moved)))
    assert batch.header.base_offset == 1_000_000
    assert batch.header.partition_leader_epoch == 42
    assert batch.records() == [Record(1_000_000, 1000, b"k", b"v")]
