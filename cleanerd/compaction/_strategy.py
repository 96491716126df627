"""KIP-280 compaction strategies: which record of a key survives, and each record's "version".

Kafka keeps the record with the highest offset per key (``offset``). KIP-280 (never merged upstream,
docs/kafka-format.md §5) adds ``timestamp`` (highest record timestamp) and ``header`` (highest
8-byte big-endian signed value of a named header). For those two a record may lack a version (no
such header, or one of the wrong length), so "missing" is carried as a separate flag rather than a
sentinel: every int64 is a legal header version. The rule, in ``wins``: a record with a version
beats one without; between two with versions the higher wins; otherwise (neither, or equal versions)
the higher offset wins. The settings' values (``Strategy``, ``StrategyConfig``) live with the other
topic settings in ``cleanerd.topics._model``; this module holds the kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.format import R_HEADER_COUNT, R_HEADERS_POS, R_TIMESTAMP
from cleanerd.topics import Strategy, StrategyConfig

__all__ = [
    "VERSION_BYTES",
    "compute_versions",
    "header_version",
    "record_versions",
    "wins",
]

Arr = npt.NDArray[Any]

VERSION_BYTES = 8  # a header version is one big-endian int64


@kernel(nogil=True)
def wins(
    offset: int,
    version: int,
    has_version: bool,
    other_offset: int,
    other_version: int,
    other_has: bool,
) -> bool:
    """True when record (offset, version, has_version) beats the other one for the same key."""
    if has_version != other_has:
        return has_version
    if has_version and version != other_version:
        return version > other_version
    return offset > other_offset


@kernel(nogil=True)
def _uvarint(buf: Arr, p: int, end: int) -> tuple[Any, int]:
    """Zig-zag varint at ``p`` (already validated by the index kernel): (value, next position).

    Returns position -1 if it runs past ``end``, so a bad index cannot read out of bounds.
    """
    raw = np.uint64(0)
    shift = np.uint64(0)
    while p < end and shift < np.uint64(64):
        b = np.uint64(buf[p])
        p += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), p
        shift += np.uint64(7)
    return 0, -1


@kernel(nogil=True)
def header_version(payload: Arr, pos: int, count: int, name: Arr) -> tuple[Any, bool, bool]:
    """Version from the LAST header named ``name`` among ``count`` headers at ``pos``.

    Returns ``(version, has_version, wrong_length)``. The last header decides, as a consumer
    reading the latest header would: if it is not exactly 8 bytes (null included) the record has
    no version and ``wrong_length`` is set so the anomaly can be counted.
    """
    end = payload.shape[0]
    nlen = name.shape[0]
    found_pos = -2  # value position of the last match, -1 for a null value
    found_len = -1
    for _h in range(count):
        klen, pos = _uvarint(payload, pos, end)
        if pos < 0 or pos + klen > end:
            break
        match = klen == nlen
        if match:
            for j in range(nlen):
                if payload[pos + j] != name[j]:
                    match = False
                    break
        pos += klen
        vlen, pos = _uvarint(payload, pos, end)
        if pos < 0:
            break
        if match:
            found_pos = pos if vlen >= 0 else -1
            found_len = vlen
        if vlen > 0:
            pos += vlen
    if found_pos == -2:
        return 0, False, False
    if found_len != VERSION_BYTES or found_pos < 0 or found_pos + VERSION_BYTES > end:
        return 0, False, True
    v = np.uint64(0)
    for j in range(VERSION_BYTES):
        v = (v << np.uint64(8)) | np.uint64(payload[found_pos + j])
    return np.int64(v), True, False


@kernel(nogil=True)
def record_versions(
    payload: Arr, records: Arr, header_name_bytes: Arr, versions: Arr, has_version: Arr
) -> int:
    """Header-strategy versions of every record (rows with ``kernels.R_*`` columns), written to
    ``versions`` (int64) and ``has_version`` (bool), one per record; returns how many had a
    version header of the wrong length. A record without a version has version 0 and
    ``has_version`` False. The caller gives the room: a kernel returning arrays it made would
    need numba's Python side to hand them over, which imports the numba package.
    """
    n = records.shape[0]
    if versions.shape[0] < n or has_version.shape[0] < n:
        raise ValueError("record_versions: no room for the versions")
    wrong = 0
    for i in range(n):
        v, h, w = header_version(
            payload, records[i, R_HEADERS_POS], records[i, R_HEADER_COUNT], header_name_bytes
        )
        versions[i] = v
        has_version[i] = h
        if w:
            wrong += 1
    return wrong


def compute_versions(config: StrategyConfig, payload: Arr, records: Arr) -> tuple[Arr, Arr, int]:
    """Per-record ``(versions, has_version, wrong_length_count)`` for any strategy.

    ``offset`` needs no version (zeros, all missing); ``timestamp`` uses the record timestamp,
    which every record has; ``header`` parses the headers with ``record_versions``.
    """
    n = records.shape[0]
    if config.strategy is Strategy.TIMESTAMP:
        return records[:, R_TIMESTAMP].copy(), np.ones(n, dtype=np.bool_), 0
    if config.strategy is Strategy.HEADER:
        name = np.frombuffer(config.header_name_bytes, dtype=np.uint8)
        versions = np.empty(n, dtype=np.int64)
        has = np.empty(n, dtype=np.bool_)
        wrong = record_versions(payload, records, name, versions, has)
        return versions, has, int(wrong)
    return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_), 0
