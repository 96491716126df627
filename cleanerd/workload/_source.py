"""Draws the records of one partition: keys, values, headers, timestamps and versions.

Everything random comes from one seeded numpy Generator, drawn a batch at a time as arrays (one
call per field per batch, not per record), and keys, values and plain header sets come from pools
built once, so the per-record work is a tuple lookup and one ``Record``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from cleanerd.format import Header, Record
from cleanerd.workload._spec import WorkloadSpec

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_VERSION = struct.Struct(">q")
VALUE_POOL = 1024
VALUE_POOL_BYTES = 64 * 1024 * 1024
HEADER_POOL = 64
HEADER_NULL_RATIO = 0.1
VERSION_START = 100  # first version per key; skewed records step below it, so stays positive
VERSION_MAX_STEP = 5
KEY_NAME_CACHE = 1_000_000  # up to this many keys the names are made once; beyond, per record


def key_width(count: int) -> int:
    """Digits in key names: ``key-000000`` like the Kafka fixtures, wider past 10**6 keys."""
    return max(6, len(str(count - 1)))


def key_names(count: int) -> list[bytes]:
    width = key_width(count)
    return [b"key-%0*d" % (width, i) for i in range(count)]


def zipf_cdf(count: int, s: float) -> np.ndarray:
    """Cumulative Zipf(s) weights over key ranks 0..count-1 (rank 0 is the hottest key)."""
    weights = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** s
    cdf: np.ndarray = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


@dataclass
class Drawn:
    """One batch worth of records plus the fields the survivor tracker needs."""

    records: list[Record]
    keys: list[bytes]
    key_ids: np.ndarray
    timestamps: list[int]
    tombstones: list[bool]
    versions: list[int] | None


class RecordSource:
    """Records for one partition, in write order; ``now`` is the generator's clock (ms)."""

    def __init__(self, spec: WorkloadSpec, rng: np.random.Generator, start_timestamp: int) -> None:
        self.spec = spec
        self.rng = rng
        self.keys = key_names(spec.keys) if spec.keys <= KEY_NAME_CACHE else None
        self._width = key_width(spec.keys)
        self._cdf = zipf_cdf(spec.keys, spec.zipf_s) if spec.key_distribution == "zipf" else None
        self.values = self._value_pool()
        self.header_sets = self._header_pool()
        self._high = [VERSION_START] * spec.keys if spec.version_header else []
        self.start_timestamp = start_timestamp
        self.written = 0  # data records drawn so far

    @property
    def now(self) -> int:
        """In-order time of the next record; markers and the log's clock use it."""
        return self.start_timestamp + self.written

    def _value_pool(self) -> list[bytes]:
        """Hex text values: random enough to be distinct, compressible about 2x like real data."""
        size = self.spec.value_bytes
        count = max(1, min(VALUE_POOL, self.spec.records, VALUE_POOL_BYTES // max(size, 1)))
        digits = _HEX[self.rng.integers(0, 16, size=(count, size))]
        return [digits[i].tobytes() for i in range(count)]

    def _header_pool(self) -> list[tuple[Header, ...]]:
        """Header sets of ``spec.headers`` headers, some values null (Kafka allows that)."""
        n = self.spec.headers
        if n == 0:
            return [()]
        nulls = self.rng.random((HEADER_POOL, n)) < HEADER_NULL_RATIO
        lengths = self.rng.integers(1, 17, size=(HEADER_POOL, n))
        pool = []
        for i in range(HEADER_POOL):
            hdrs: list[Header] = []
            for j in range(n):
                value = None if nulls[i, j] else _HEX[self.rng.integers(0, 16, lengths[i, j])]
                hdrs.append((f"h{j}", None if value is None else value.tobytes()))
            pool.append(tuple(hdrs))
        return pool

    def _key_ids(self, n: int) -> np.ndarray:
        if self._cdf is None:
            return self.rng.integers(0, self.spec.keys, size=n)
        ids = np.searchsorted(self._cdf, self.rng.random(n), side="right")
        return np.minimum(ids, self.spec.keys - 1)

    def _timestamps(self, n: int) -> list[int]:
        ts = self.now + np.arange(n, dtype=np.int64)
        if self.spec.timestamps == "shuffled":
            ts += self.rng.integers(0, self.spec.timestamp_window_ms, size=n)
        out: list[int] = ts.tolist()
        return out

    def _versions(self, ids: list[int], n: int) -> list[int]:
        """Per key mostly rising; a skewed record goes below the key's highest version so far."""
        steps = self.rng.integers(1, VERSION_MAX_STEP + 1, size=n).tolist()
        skewed = (self.rng.random(n) < self.spec.version_skew).tolist()
        high = self._high
        out: list[int] = []
        for key, step, skew in zip(ids, steps, skewed, strict=True):
            if skew:
                out.append(high[key] - step)
            else:
                high[key] += step
                out.append(high[key])
        return out

    def draw(self, n: int) -> Drawn:
        """The next ``n`` records (offsets 0: the log assigns them on append)."""
        key_ids = self._key_ids(n)
        ids: list[int] = key_ids.tolist()
        if self.keys is not None:
            names = self.keys
            keys = [names[i] for i in ids]
        else:
            keys = [b"key-%0*d" % (self._width, i) for i in ids]
        timestamps = self._timestamps(n)
        tombstones: list[bool] = (self.rng.random(n) < self.spec.tombstone_ratio).tolist()
        values = self.values
        picked = self.rng.integers(0, len(values), size=n).tolist()
        vals = [None if t else values[v] for t, v in zip(tombstones, picked, strict=True)]
        pool = self.header_sets
        hsets = [pool[i] for i in self.rng.integers(0, len(pool), size=n).tolist()]
        versions = None
        if self.spec.version_header is not None:
            versions = self._versions(ids, n)
            name = self.spec.version_header
            hsets = [(*h, (name, _VERSION.pack(v))) for h, v in zip(hsets, versions, strict=True)]
        records = [
            Record(0, t, k, v, h) for k, t, v, h in zip(keys, timestamps, vals, hsets, strict=True)
        ]
        self.written += n
        return Drawn(records, keys, key_ids, timestamps, tombstones, versions)
