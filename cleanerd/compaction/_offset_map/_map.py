"""The bounded offset map of pass 1: 128-bit key hash -> winning offset (and version).

Kafka's SkimpyOffsetMap (docs/kafka-format.md §4.6) with the same sizing and "full" rule, laid out
for numba: one ``uint64[slots, width]`` table, a row per slot, so a probe touches one cache line for
hash, offset and version. ``width`` is 3 (24 bytes: h1, h2, offset) for the offset strategy and 4
(32 bytes: + version) for timestamp and header, the KIP-280 cost (docs/kafka-format.md §5).

* Empty slot: hash (0, 0). murmur3 of the empty key is (0, 0), so a real (0, 0) hash is remapped
  to ``(0, ZERO_HASH_REMAP)`` on every put, get and retain check (a clash needs a 2^-128 match).
* has_version costs no extra bytes: Kafka offsets are never negative, so a slot whose record has
  no version stores ``~offset`` (negative) in the offset column; the sign bit is the flag. Every
  int64 stays a legal version.
* Probing: Robin Hood linear probing from ``h1 mod slots``. Linear keeps probes in adjacent cache
  lines; Robin Hood bounds probe lengths and lets a lookup of an absent key (frequent in pass 2:
  keys of the clean section the dirty range never saw) stop early instead of running to an empty
  slot, which at Kafka's 0.9 load factor would average ~50 probes. Entries are never deleted
  (only ``clear``), so no tombstones or backward shifts are needed.

The probe itself (lookup, insert, the full rule) is ``_table``'s, shared with the kernels of
``_fill``, ``_touched`` and ``_filter.decide_records``. Python runs once per call; every loop over
records is a ``nogil`` kernel. Not thread-safe: one map per cleaning.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from cleanerd._kernel import kernel
from cleanerd.compaction._offset_map._table import (
    find_slot,
    insert_key,
    is_full,
    normalize,
    retains,
    stored_entry,
)
from cleanerd.topics import Strategy, StrategyConfig

Arr = npt.NDArray[Any]

OFFSET_SLOT_BYTES = 24  # h1, h2, offset
VERSIONED_SLOT_BYTES = 32  # h1, h2, offset, version
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
_EMPTY_BOOL = np.zeros(0, dtype=np.bool_)
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@kernel(nogil=True)
def _put_batch(
    tab: Arr,
    hashes: Arr,
    offsets: Arr,
    versions: Arr,
    has_version: Arr,
    keyed: Arr,
    versioned: bool,
    start: int,
    size: int,
    max_entries: int,
    latest: int,
) -> tuple[int, bool, int, int]:
    """Insert records from ``start`` in order: ``(next_index, full, size, latest_offset)``."""
    n = hashes.shape[0]
    t = tab.reshape(tab.size)
    width = tab.shape[1]
    slots = tab.shape[0]
    use_keyed = keyed.shape[0] > 0
    no_bitmap = np.zeros(0, dtype=np.uint64)
    for i in range(start, n):
        if use_keyed and not keyed[i]:
            continue
        if is_full(size, max_entries):
            return i, True, size, latest  # Kafka: full before the key is even looked up
        h1, h2 = normalize(hashes[i, 0], hashes[i, 1])
        if versioned:
            v, has = versions[i], has_version[i]
        else:
            v, has = 0, False
        size += insert_key(t, width, slots, h1, h2, offsets[i], v, has, versioned, no_bitmap, False)
        latest = offsets[i]
    return n, False, size, latest


@kernel(nogil=True)
def _get(tab: Arr, hashes: Arr, versioned: bool, out_off: Arr, out_ver: Arr, out_has: Arr) -> None:
    t = tab.reshape(tab.size)
    width = tab.shape[1]
    for i in range(hashes.shape[0]):
        h1, h2 = normalize(hashes[i, 0], hashes[i, 1])
        pos = find_slot(t, width, tab.shape[0], h1, h2)
        if pos < 0:
            out_off[i] = -1
            out_ver[i] = 0
            out_has[i] = False
        else:
            out_off[i], out_ver[i], out_has[i] = stored_entry(t, width, pos, versioned)


@kernel(nogil=True)
def _retain(
    tab: Arr, hashes: Arr, offsets: Arr, versions: Arr, has_version: Arr, versioned: bool, out: Arr
) -> None:
    t = tab.reshape(tab.size)
    width = tab.shape[1]
    for i in range(hashes.shape[0]):
        h1, h2 = normalize(hashes[i, 0], hashes[i, 1])
        if versioned:
            v, has = versions[i], has_version[i]
        else:
            v, has = 0, False
        out[i] = retains(t, width, tab.shape[0], h1, h2, offsets[i], v, has, versioned)


def slot_bytes(strategy: StrategyConfig | Strategy) -> int:
    """Bytes per slot: 24 for the offset strategy, 32 when a version is stored."""
    if isinstance(strategy, StrategyConfig):
        versioned = strategy.versioned
    else:
        versioned = Strategy(strategy) is not Strategy.OFFSET
    return VERSIONED_SLOT_BYTES if versioned else OFFSET_SLOT_BYTES


def _hashes(hashes: Arr) -> Arr:
    h = np.ascontiguousarray(hashes, dtype=np.uint64)
    if h.ndim != 2 or h.shape[1] != 2:
        raise ValueError(f"hashes must be uint64[n, 2], got shape {h.shape}")
    return h


class OffsetMap:
    """Fixed-size open-addressing map from key hash to the winning record of each key."""

    def __init__(
        self,
        budget_bytes: int,
        strategy: StrategyConfig | Strategy = Strategy.OFFSET,
        load_factor: float = DEFAULT_LOAD_FACTOR,
    ) -> None:
        self.config = strategy if isinstance(strategy, StrategyConfig) else StrategyConfig(strategy)
        if isinstance(strategy, Strategy) and strategy is Strategy.HEADER:
            raise ValueError("the header strategy needs a header name: pass a StrategyConfig")
        if not math.isfinite(load_factor) or not 0 < load_factor <= 1:
            raise ValueError(
                f"log.cleaner.io.buffer.load.factor must be in (0, 1], got {load_factor}"
            )
        self.slot_bytes = slot_bytes(self.config)
        slots = int(budget_bytes) // self.slot_bytes
        if slots * load_factor <= 1:
            raise ValueError(
                f"offset map too small: {budget_bytes} bytes give {slots} slots of "
                f"{self.slot_bytes} bytes, and slots x load factor ({load_factor}) must be > 1 "
                "(Kafka's rule); raise the dedupe buffer size (log.cleaner.dedupe.buffer.size)"
            )
        self.load_factor = load_factor
        self.versioned = self.config.versioned
        self.max_entries = int(slots * load_factor)
        self._tab = np.zeros((slots, self.slot_bytes // 8), dtype=np.uint64)
        self._size = 0
        self._latest = -1

    @property
    def slots(self) -> int:
        return int(self._tab.shape[0])

    @property
    def table(self) -> Arr:
        """The slot table (``uint64[slots, width]``), for kernels that probe it with ``_table``'s
        functions (``_fill``, ``_touched``, ``_filter.decide_records``); they report the keys they
        add with ``set_size``."""
        return self._tab

    def set_size(self, size: int) -> None:
        """Record the entry count after a kernel added keys to ``table`` (or emptied it)."""
        self._size = int(size)

    @property
    def size(self) -> int:
        """Keys stored."""
        return self._size

    @property
    def utilization(self) -> float:
        """Kafka's buffer utilization: entries / slots."""
        return self._size / self.slots

    @property
    def memory_bytes(self) -> int:
        return int(self._tab.nbytes)

    @property
    def latest_offset(self) -> int:
        """Offset of the last record put, or as set by ``update_latest_offset`` (-1 when clear)."""
        return self._latest

    def update_latest_offset(self, offset: int) -> None:
        """Kafka's ``updateLatestOffset``: the cleaner moves it over batch ends and offset gaps."""
        self._latest = int(offset)

    def clear(self) -> None:
        self._tab.fill(0)
        self._size = 0
        self._latest = -1

    def put_batch(
        self,
        hashes: Arr,
        offsets: Arr,
        versions: Arr | None = None,
        has_version: Arr | None = None,
        start_index: int = 0,
        keyed: Arr | None = None,
    ) -> tuple[int, bool]:
        """Insert records ``start_index..`` in order until done or full: ``(next_index, full)``.

        ``keyed`` (optional bool[n]) marks the records to put; the others (null keys, offsets
        before the dirty range) are skipped and never trigger the full rule. When full,
        ``next_index`` is the keyed record that did not fit: the next pass resumes there.
        """
        h = _hashes(hashes)
        n = h.shape[0]
        offs = np.ascontiguousarray(offsets, dtype=np.int64)
        if offs.shape != (n,):
            raise ValueError(f"offsets must be int64[{n}], got shape {offs.shape}")
        if n > start_index and int(offs[start_index:].min()) < 0:
            raise ValueError("offsets must not be negative")
        if self.versioned:
            vers = np.zeros(n, np.int64) if versions is None else np.ascontiguousarray(versions)
            has = (
                np.zeros(n, np.bool_) if has_version is None else np.ascontiguousarray(has_version)
            )
            vers = vers.astype(np.int64, copy=False)
            has = has.astype(np.bool_, copy=False)
            if vers.shape != (n,) or has.shape != (n,):
                raise ValueError(f"versions and has_version must have {n} entries")
        else:
            vers, has = _EMPTY_I64, _EMPTY_BOOL
        mask = _EMPTY_BOOL if keyed is None else np.ascontiguousarray(keyed, dtype=np.bool_)
        if keyed is not None and mask.shape != (n,):
            raise ValueError(f"keyed must be bool[{n}], got shape {mask.shape}")
        nxt, full, self._size, self._latest = _put_batch(
            self._tab,
            h,
            offs,
            vers,
            has,
            mask,
            self.versioned,
            int(start_index),
            self._size,
            self.max_entries,
            self._latest,
        )
        return int(nxt), bool(full)

    def get(self, hashes: Arr) -> tuple[Arr, Arr, Arr]:
        """``(offsets, versions, has_version)`` per hash; offset -1 when the key is absent."""
        h = _hashes(hashes)
        n = h.shape[0]
        off = np.empty(n, dtype=np.int64)
        ver = np.empty(n, dtype=np.int64)
        has = np.empty(n, dtype=np.bool_)
        _get(self._tab, h, self.versioned, off, ver, has)
        return off, ver, has

    def should_retain(
        self,
        hashes: Arr,
        offsets: Arr,
        versions: Arr | None = None,
        has_version: Arr | None = None,
    ) -> Arr:
        """Whether each record is the winner of its key (records of absent keys are kept).

        Offset strategy: Kafka's ``offset >= found``. Timestamp/header: the record is the stored
        winner (same offset), or it beats it. The second case only arises for a record the map
        never saw (e.g. from the clean section); keeping it never loses the true winner.
        """
        h = _hashes(hashes)
        n = h.shape[0]
        offs = np.ascontiguousarray(offsets, dtype=np.int64)
        if self.versioned:
            vers = np.zeros(n, np.int64) if versions is None else np.ascontiguousarray(versions)
            has = (
                np.zeros(n, np.bool_) if has_version is None else np.ascontiguousarray(has_version)
            )
            vers = vers.astype(np.int64, copy=False)
            has = has.astype(np.bool_, copy=False)
        else:
            vers, has = _EMPTY_I64, _EMPTY_BOOL
        out = np.empty(n, dtype=np.bool_)
        _retain(self._tab, h, offs, vers, has, self.versioned, out)
        return out

    def __repr__(self) -> str:
        return (
            f"OffsetMap({self.config.strategy.value}, slots={self.slots}, size={self._size}, "
            f"max_entries={self.max_entries}, latest_offset={self._latest})"
        )
