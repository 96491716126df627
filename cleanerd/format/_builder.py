"""Writes v2 batches: data, header-only (emptied) and transaction-marker batches.

Used by ``cleanerd gen``, the append path and the cleaner's rebuilds. Offsets and timestamps are
stored as deltas from the batch's base offset and base timestamp, as docs/kafka-format.md §2.3
says; the CRC32C covers bytes [21, end).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from cleanerd.format._codecs import Compression, compress
from cleanerd.format._control import ControlType, EndTransactionMarker, control_key
from cleanerd.format._crc import checksum
from cleanerd.format._header import (
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    attributes_for,
)
from cleanerd.format._limits import INT_MAX
from cleanerd.format._records import Record
from cleanerd.format._varint import write_varint, write_varlong
from cleanerd.format.layout import BASE_OFFSET_AT, CRC_AT, LEADER_EPOCH_AT

__all__ = [
    "build_batch",
    "build_control_batch",
    "build_empty_batch",
    "build_end_txn_marker",
    "encode_records",
    "finish_crc",
    "set_base_offset",
    "set_partition_leader_epoch",
]

_CRC = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


def encode_records(records: Sequence[Record], base_offset: int, base_timestamp: int) -> bytes:
    """The uncompressed record section of a batch."""
    out = bytearray()
    body = bytearray()
    for r in records:
        body.clear()
        body.append(0)  # record attributes: none defined
        write_varlong(r.timestamp - base_timestamp, body)
        write_varint(r.offset - base_offset, body)
        if r.key is None:
            write_varint(-1, body)
        else:
            write_varint(len(r.key), body)
            body += r.key
        if r.value is None:
            write_varint(-1, body)
        else:
            write_varint(len(r.value), body)
            body += r.value
        write_varint(len(r.headers), body)
        for hkey, hvalue in r.headers:
            raw = hkey.encode("utf-8")
            write_varint(len(raw), body)
            body += raw
            if hvalue is None:
                write_varint(-1, body)
            else:
                write_varint(len(hvalue), body)
                body += hvalue
        write_varint(len(body), out)
        out += body
    return bytes(out)


def finish_crc(batch: bytearray) -> bytearray:
    """Recompute and store the CRC32C of a batch in place."""
    _CRC.pack_into(batch, CRC_AT, checksum(memoryview(batch)[CRC_START:]))
    return batch


def set_base_offset(batch: bytearray, base_offset: int, position: int = 0) -> None:
    """Move a batch to another base offset; outside the CRC, so no recompute (Kafka does this)."""
    _I64.pack_into(batch, position + BASE_OFFSET_AT, base_offset)


def set_partition_leader_epoch(batch: bytearray, epoch: int, position: int = 0) -> None:
    """Stamp the leader epoch; outside the CRC like the base offset."""
    _I32.pack_into(batch, position + LEADER_EPOCH_AT, epoch)


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset: int | None = None,
    compression: Compression = Compression.NONE,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Build one v2 batch.

    ``base_offset`` defaults to the first record's offset and ``last_offset`` to the last's (the
    cleaner passes the original ones so a rebuilt batch keeps its offset range and sequences).
    With ``delete_horizon_ms`` the horizon goes into baseTimestamp and attribute bit 6 is set.
    With no records the result is a 61-byte header-only batch (baseTimestamp -1, codec none).
    """
    if not records:
        if base_offset is None or last_offset is None:
            raise ValueError("an empty batch needs base_offset and last_offset")
        return build_empty_batch(
            base_offset=base_offset,
            last_offset=last_offset,
            log_append_time=log_append_time,
            transactional=transactional,
            control=control,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            partition_leader_epoch=partition_leader_epoch,
            max_timestamp=NO_TIMESTAMP if max_timestamp is None else max_timestamp,
        )
    first = records[0].offset if base_offset is None else base_offset
    last = records[-1].offset if last_offset is None else last_offset
    prev = first - 1
    for r in records:
        if r.offset <= prev or r.offset > last:
            raise ValueError(f"record offsets must increase within [{first}, {last}]: {r.offset}")
        prev = r.offset
    if last - first > INT_MAX:
        raise ValueError(f"batch spans more than 2^31 offsets: {first}..{last}")
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    elif base_timestamp is not None:
        base_ts = base_timestamp
    else:
        base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records) if max_timestamp is None else max_timestamp
    payload = compress(compression, encode_records(records, first, base_ts))
    header = BatchHeader(
        base_offset=first,
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes_for(
            compression,
            log_append_time=log_append_time,
            transactional=transactional,
            control=control,
            delete_horizon=delete_horizon_ms is not None,
        ),
        last_offset_delta=last - first,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    return bytes(finish_crc(bytearray(header.pack() + payload)))


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    max_timestamp: int,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The 61-byte header Kafka keeps for an emptied batch (kafka-format.md §4.11, RETAIN_EMPTY)."""
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes_for(
            Compression.NONE,
            log_append_time=log_append_time,
            transactional=transactional,
            control=control,
        ),
        last_offset_delta=last_offset - base_offset,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=0,
    )
    return bytes(finish_crc(bytearray(header.pack())))


def build_control_batch(
    kind: ControlType,
    value: bytes | None,
    *,
    offset: int,
    timestamp: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A control batch holding one control record (markers, snapshot header/footer, ...)."""
    record = Record(offset, timestamp, control_key(kind), value)
    return build_batch(
        [record],
        control=True,
        transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_end_txn_marker(
    *,
    commit: bool,
    offset: int,
    timestamp: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT or ABORT marker batch (78 bytes): control + transactional, baseSequence -1."""
    marker = EndTransactionMarker(
        ControlType.COMMIT if commit else ControlType.ABORT, coordinator_epoch
    )
    return build_control_batch(
        marker.kind,
        marker.value(),
        offset=offset,
        timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        partition_leader_epoch=partition_leader_epoch,
    )
