"""The 61-byte v2 batch header (kafka-format.md §2.1, §2.2): fields, attribute bits, pack, parse."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from cleanerd.format._codecs import Compression
from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._limits import INT_MAX
from cleanerd.format.layout import (
    CRC_START as CRC_START,  # noqa: PLC0414
    HEADER_SIZE as HEADER_SIZE,  # noqa: PLC0414
    LOG_OVERHEAD as LOG_OVERHEAD,  # noqa: PLC0414
    MAGIC_V2 as MAGIC_V2,  # noqa: PLC0414
)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
NO_TIMESTAMP_TYPE = "NoTimestampType"  # Kafka's TimestampType name for magic 0

# baseOffset, batchLength, leaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert _STRUCT.size == HEADER_SIZE


def attributes_for(
    compression: Compression = Compression.NONE,
    *,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
    delete_horizon: bool = False,
) -> int:
    """Compose the attributes field."""
    return (
        int(compression)
        | (ATTR_TIMESTAMP_TYPE if log_append_time else 0)
        | (ATTR_TRANSACTIONAL if transactional else 0)
        | (ATTR_CONTROL if control else 0)
        | (ATTR_DELETE_HORIZON if delete_horizon else 0)
    )


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """One batch header, as stored; derived fields are properties."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
        """Parse the header at ``pos``; CorruptRecordError if fewer than 61 bytes remain."""
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptRecordError(
                f"batch header needs {HEADER_SIZE} bytes, {len(buf) - pos} left", position=pos
            )
        return cls(*_STRUCT.unpack_from(buf, pos))

    def pack(self) -> bytes:
        """The 61 header bytes (CRC as stored in ``crc``)."""
        return _STRUCT.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    def with_fields(self, **changes: int) -> BatchHeader:
        """A copy with some fields changed (the CRC is not recomputed)."""
        return replace(self, **changes)

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        """The codec; an unknown id is a corrupt batch."""
        cid = self.attributes & ATTR_CODEC_MASK
        try:
            return Compression(cid)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec id {cid}") from None

    @property
    def timestamp_type(self) -> str:
        if self.magic == 0:  # no timestamps before magic 1 (docs/kafka-format.md §2.8)
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: the horizon stored in baseTimestamp when attribute bit 6 is set."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta, wrapping past Int.MaxValue to 0; -1 without one."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        seq = self.base_sequence + self.last_offset_delta
        return seq - INT_MAX - 1 if seq > INT_MAX else seq

    def describe(self) -> dict[str, object]:
        """The batch fields as ``cleanerd dump --format json`` prints them."""
        return {
            "base_offset": self.base_offset,
            "last_offset": self.last_offset,
            "count": self.records_count,
            "magic": self.magic,
            "compression": Compression(self.attributes & ATTR_CODEC_MASK).label
            if self.attributes & ATTR_CODEC_MASK <= 4
            else f"unknown({self.attributes & ATTR_CODEC_MASK})",
            "timestamp_type": self.timestamp_type,
            "transactional": self.is_transactional,
            "control": self.is_control,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "base_sequence": self.base_sequence,
            "partition_leader_epoch": self.partition_leader_epoch,
            "delete_horizon_ms": self.delete_horizon_ms,
            "max_timestamp": self.max_timestamp,
            "crc": self.crc,
        }
