"""Control records (kafka-format.md §2.4): key = (version, type), EndTransactionMarker values."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from cleanerd.format._errors import CorruptRecordError

_KEY = struct.Struct(">hh")
_END_TXN = struct.Struct(">hi")
CONTROL_KEY_SIZE = _KEY.size
END_TXN_MARKER_SIZE = _END_TXN.size


class ControlType(enum.IntEnum):
    """Control record types; anything Kafka does not know reads as UNKNOWN."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def control_key(kind: ControlType, version: int = 0) -> bytes:
    """The 4-byte key of a control record."""
    return _KEY.pack(version, int(kind))


def parse_control_key(key: bytes | None) -> ControlType:
    """Type of a control record from its key (Kafka: a higher version parses as version 0)."""
    if key is None or len(key) < CONTROL_KEY_SIZE:
        raise CorruptRecordError(f"control record key must be at least 4 bytes, got {key!r}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        return ControlType(type_id)
    except ValueError:
        return ControlType.UNKNOWN


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The value of a COMMIT/ABORT control record."""

    kind: ControlType
    coordinator_epoch: int
    version: int = 0

    def key(self) -> bytes:
        return control_key(self.kind)

    def value(self) -> bytes:
        return _END_TXN.pack(self.version, self.coordinator_epoch)

    @classmethod
    def parse(cls, kind: ControlType, value: bytes | None) -> EndTransactionMarker:
        """Decode a marker value; Kafka requires at least the 6 bytes of version 0."""
        if kind not in (ControlType.ABORT, ControlType.COMMIT):
            raise CorruptRecordError(f"{kind.name} is not a transaction marker")
        if value is None or len(value) < END_TXN_MARKER_SIZE:
            raise CorruptRecordError(f"end transaction marker value too short: {value!r}")
        version, epoch = _END_TXN.unpack_from(value)
        if version < 0:
            raise CorruptRecordError(f"end transaction marker has negative version {version}")
        return cls(kind, epoch, version)
