"""Plan B's scan and winners: each key's winner, found as the offset map would find it.

Scan: one task per source segment (every segment pass 2 will read) reads, for every keyed
record of its committed data batches, the 128-bit murmur3 key hash, the offset, the strategy's
version and whether the record lies in the dirty range (at or after the first dirty offset;
records past the first uncleanable offset in the last dirty segment count too, as Kafka's map
build reads whole segments). The batches are read and checked (CRC included) with the cleaner's
own functions (``transaction_verdicts``, ``index_and_hash``, ``compute_versions``), so a corrupt
segment fails the scan before anything is written. The task reduces its records to one row per
key (``reduce_keys``, as the offset map itself would) and cuts them into buckets by key hash.

Winners (``route``, one task per bucket, every row of a key in one bucket): under ``offset``
the highest dirty offset; under ``timestamp``/``header`` the maximum of ``(has_version,
version, offset)`` over every record of a key that has a dirty record (``strategy.wins``' order;
the clean part competes for dirty keys only, as ``update_from_clean_prefix`` does). Each winner
goes to every pass-2 group holding a record of its key, as ``(group, blob of WINNERS)``.

Rows travel between tasks as the raw bytes of numpy structured arrays: Spark only moves
opaque blobs (a few per task) and every per-row step is a vectorised numpy one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cleanerd.compaction import (
    CleanedTransactionMetadata,
    compute_versions,
    index_and_hash,
    transaction_verdicts,
)
from cleanerd.format import kernels as k, limit_decompression
from cleanerd.storage import LogSegment, collect_aborted, iter_chunks
from cleanerd.topics import LogConfig, StrategyConfig

ROWS = np.dtype(
    [
        ("h1", "<u8"),
        ("h2", "<u8"),
        ("offset", "<i8"),
        ("version", "<i8"),
        ("has", "?"),
        ("dirty", "?"),
        ("grp", "<i4"),
    ]
)
"""One row per key (per scan task, then per group): the best record of the key there (under
``offset`` the highest dirty offset, -1 for none), whether it has a dirty record, its group."""

WINNERS = np.dtype(
    [
        ("grp", "<i4"),
        ("h1", "<u8"),
        ("h2", "<u8"),
        ("offset", "<i8"),
        ("version", "<i8"),
        ("has", "?"),
    ]
)
"""A dirty key's winner, for one group that holds the key."""

Arr = Any


@dataclass(frozen=True)
class SegmentSet:
    """A partition's segments as a task opens them: read-only ``LogSegment`` objects (no
    ``PartitionLog``, which would recover and lock), and pass 2's groups of the sources."""

    directory: str
    config: LogConfig
    bases: tuple[int, ...]  # every segment, the active one last
    groups: tuple[tuple[int, ...], ...]  # indexes into ``bases`` of each group's segments

    def open(self) -> list[LogSegment]:
        return [LogSegment(Path(self.directory), b, self.config) for b in self.bases]

    def sources(self) -> list[tuple[int, int]]:
        """``(segment index, group)`` of every segment pass 2 reads."""
        return [(i, g) for g, members in enumerate(self.groups) for i in members]


@dataclass(frozen=True)
class ScanJob:
    """What a scan task needs: the segments, the dirty range and the strategy."""

    segments: SegmentSet
    start: int  # first dirty offset
    upper: int  # first uncleanable offset
    strategy: StrategyConfig

    def scan(self, index: int, group: int) -> tuple[Arr, int]:
        """Segment ``index``'s keys, one ``ROWS`` row each (``reduce_keys``), and its count of
        wrong-length version headers among dirty records (the header strategy's anomalies)."""
        with limit_decompression(self.segments.config.max_decompressed_message_bytes):
            return self._scan(index, group)

    def _scan(self, index: int, group: int) -> tuple[Arr, int]:
        segments = self.segments.open()
        seg = segments[index]
        path = str(seg.log_path)
        meta = CleanedTransactionMetadata(collect_aborted(segments, seg.base_offset, self.upper))
        wrong_total = 0
        parts: list[Arr] = []
        arr = seg.view(keep=False)
        for batches in iter_chunks(arr, path=path, prev_last_offset=seg.base_offset - 1):
            is_control, aborted = transaction_verdicts(meta, arr, batches, path)
            rows = np.flatnonzero(~is_control & ~aborted & (batches[:, k.B_COUNT] > 0))
            if rows.size == 0:
                continue
            payload, recs, hashes = index_and_hash(arr, batches[rows], path)
            keyed = recs[:, k.R_KEY_LEN] >= 0
            recs, hashes = recs[keyed], hashes[keyed]
            out = np.zeros(recs.shape[0], dtype=ROWS)
            out["h1"], out["h2"] = hashes[:, 0], hashes[:, 1]
            out["offset"] = recs[:, k.R_OFFSET]
            out["dirty"] = out["offset"] >= self.start
            out["grp"] = group
            if self.strategy.versioned:
                dirty = out["dirty"]
                v1, h1, wrong = compute_versions(self.strategy, payload, recs[dirty])
                v2, h2, _ = compute_versions(self.strategy, payload, recs[~dirty])
                for sel, v, h in ((dirty, v1, h1), (~dirty, v2, h2)):
                    has = np.asarray(h, dtype=np.bool_)
                    out["has"][sel] = has
                    out["version"][sel] = np.where(has, v, 0)
                wrong_total += wrong
            parts.append(out)
        rows_ = np.concatenate(parts) if parts else np.zeros(0, dtype=ROWS)
        return reduce_keys(rows_, self.strategy.versioned), wrong_total


def take(rows: Arr, index: Arr) -> Arr:
    """``rows[index]`` for a structured array, as a copy of whole records (numpy's own
    structured gather goes field by field, three times slower)."""
    raw = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), rows.dtype.itemsize)
    return np.take(raw, index, axis=0).reshape(-1).view(rows.dtype)


def _runs(rows: Arr, versioned: bool) -> tuple[Arr, Arr, Arr]:
    """The order that sorts ``rows`` by key, the start of each key's run in it, and each key's
    best row's position (``timestamp``/``header``: the maximum of ``(has, version, offset)``)
    or, under ``offset``, its highest dirty offset (-1 for none)."""
    h1, h2 = rows["h1"], rows["h2"]
    if versioned:
        order = np.lexsort((rows["offset"], rows["version"], rows["has"], h2, h1))
    else:
        order = np.argsort(h1)  # a 64-bit hash: h2 decides only when two keys share h1
        h1s, h2s = h1[order], h2[order]
        if bool(((h1s[1:] == h1s[:-1]) & (h2s[1:] != h2s[:-1])).any()):
            order = np.lexsort((h2, h1))
    h1s, h2s = h1[order], h2[order]
    new = np.ones(len(order), dtype=np.bool_)
    new[1:] = (h1s[1:] != h1s[:-1]) | (h2s[1:] != h2s[:-1])
    starts = np.flatnonzero(new)
    if versioned:
        return order, starts, np.append(starts[1:], len(order)) - 1
    best = np.where(rows["dirty"], rows["offset"], -1)[order]
    return order, starts, np.maximum.reduceat(best, starts)


def _best(rows: Arr, versioned: bool) -> tuple[Arr, Arr, Arr]:
    """Per key of ``rows``: its best row (under ``offset`` its highest dirty offset, -1 for
    none; ``dirty``: whether the key has a dirty row), and ``_runs``' order and run starts."""
    order, starts, best = _runs(rows, versioned)
    if versioned:
        out = take(rows, order[best])
        out["dirty"] = np.logical_or.reduceat(rows["dirty"][order], starts)
    else:
        out = take(rows, order[starts])
        out["offset"] = best
        out["dirty"] = best >= 0
    return out, order, starts


def reduce_keys(rows: Arr, versioned: bool) -> Arr:
    """One row per key of ``rows``: its best record, whether any is dirty (``_best``)."""
    if len(rows) == 0:
        return rows
    return _best(rows, versioned)[0]


def route(rows: Arr, versioned: bool) -> Iterator[tuple[int, bytes]]:
    """The winners of the keys in ``rows`` (every row of those keys, ``ROWS`` from any
    groups), as ``(group, WINNERS bytes)`` for each group holding a dirty key."""
    if len(rows) == 0:
        return
    won, order, starts = _best(rows, versioned)
    run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
    grp = rows["grp"][order]
    keep = won["dirty"][run]
    groups = int(grp.max()) + 1
    pairs = np.unique(run[keep].astype(np.int64) * groups + grp[keep])
    if len(pairs) == 0:
        return
    winner = take(won, pairs // groups)
    out = np.zeros(len(pairs), dtype=WINNERS)
    out["grp"] = pairs % groups
    for name in ("h1", "h2", "offset"):
        out[name] = winner[name]
    if versioned:
        out["version"], out["has"] = winner["version"], winner["has"]
    out = take(out, np.argsort(out["grp"], kind="stable"))
    cuts = np.flatnonzero(np.diff(out["grp"])) + 1
    for part in np.split(out, cuts):
        yield int(part["grp"][0]), part.tobytes()


def buckets(rows: Arr, count: int) -> Iterator[tuple[int, bytes]]:
    """``rows`` cut by key hash into ``count`` buckets, as ``(bucket, ROWS bytes)``."""
    if len(rows) == 0:
        return
    bucket = (rows["h1"] % np.uint64(count)).astype(np.int64)
    order = np.argsort(bucket, kind="stable")
    rows, bucket = take(rows, order), bucket[order]
    cuts = np.flatnonzero(np.diff(bucket)) + 1
    for part in np.split(rows, cuts):
        yield int(part["h1"][0] % np.uint64(count)), part.tobytes()


def from_blobs(blobs: list[bytes], dtype: Any) -> Arr:
    """The rows of some blobs of ``dtype`` (``ROWS`` or ``WINNERS``), in one array."""
    if not blobs:
        return np.zeros(0, dtype=dtype)
    return np.concatenate([np.frombuffer(b, dtype=dtype) for b in blobs])


def among(rows: Arr, keys: Arr) -> Arr:
    """Which of ``rows`` have one of the keys of ``keys`` (both with ``h1`` and ``h2``)."""
    maybe = np.flatnonzero(np.isin(rows["h1"], keys["h1"]))
    wanted = set(zip(keys["h1"].tolist(), keys["h2"].tolist(), strict=True))
    hit = np.zeros(len(rows), dtype=np.bool_)
    for i in maybe.tolist():
        hit[i] = (int(rows["h1"][i]), int(rows["h2"][i])) in wanted
    return hit
