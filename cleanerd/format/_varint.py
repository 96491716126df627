"""Zig-zag varints as Kafka writes them (protobuf style), for builders and slow paths.

The hot-path decoder is the numba one in ``kernels``; these are the writer and a checked reader
with Kafka's limits (a varint at most 5 bytes and 32 bits, a varlong at most 10 bytes).
"""

from __future__ import annotations

from cleanerd.format._errors import CorruptRecordError
from cleanerd.format._limits import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN


def _write_unsigned(raw: int, out: bytearray) -> None:
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def write_varint(value: int, out: bytearray) -> None:
    """Append a zig-zag varint (32-bit) to ``out``."""
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    _write_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF, out)


def write_varlong(value: int, out: bytearray) -> None:
    """Append a zig-zag varlong (64-bit) to ``out``."""
    if not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    _write_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def varint_size(value: int) -> int:
    """Encoded size of a zig-zag varint."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size


def _read(buf: bytes | memoryview, pos: int, max_bytes: int, bits: int) -> tuple[int, int]:
    raw = 0
    for i in range(max_bytes):
        if pos + i >= len(buf):
            raise CorruptRecordError("varint runs past the end of the buffer", position=pos)
        b = buf[pos + i]
        raw |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            if raw >> bits:
                raise CorruptRecordError(f"varint overflows {bits} bits", position=pos)
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=pos)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``: (value, next position)."""
    return _read(buf, pos, 5, 32)


def read_varlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varlong at ``pos``: (value, next position)."""
    return _read(buf, pos, 10, 64)
