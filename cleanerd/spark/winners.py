"""Plan B's scan and shuffle: each key's winner, found as the offset map would find it.

Scan: one Spark task per source segment (every segment pass 2 will read) yields, for every
keyed record of its committed data batches, ``(h1, h2, offset, version, has_version, group,
dirty)``: the 128-bit murmur3 key hash as two signed longs, the strategy's version, the pass-2
group of its segment, and whether it lies in the dirty range (at or after the first dirty
offset; records past the first uncleanable offset in the last dirty segment count too, as
Kafka's map build reads whole segments). The batches are read and checked (CRC included) with
the cleaner's own functions (``transaction_verdicts``, ``index_and_hash``, ``compute_versions``),
so a corrupt segment fails the scan before anything is written.

Winners, by a shuffle on the key hash: under ``offset`` the highest dirty offset; under
``timestamp``/``header`` the maximum of ``(has_version, version, offset)`` over every record of
a key that has a dirty record (``strategy.wins``' order; the clean part competes for dirty keys
only, as ``update_from_clean_prefix`` does). Then a join on the key hash gives each group the
winners of the keys it holds; it is repartitioned by group for the write stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cleanerd.compaction.batches import index_and_hash, transaction_verdicts
from cleanerd.compaction.strategy import StrategyConfig, compute_versions
from cleanerd.compaction.transactions import CleanedTransactionMetadata
from cleanerd.format import kernels as k
from cleanerd.storage.aborted import collect_aborted
from cleanerd.storage.chunks import iter_chunks
from cleanerd.storage.log_config import LogConfig
from cleanerd.storage.segment import LogSegment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCAN_SCHEMA = "h1 long, h2 long, offset long, version long, has boolean, grp int, dirty boolean"
"""One row per keyed committed data record; a row with ``grp`` -1 carries a scan task's count
of wrong-length version headers (in ``version``), the header strategy's anomaly counter."""

WINNER_COLUMNS = ("grp", "h1", "h2", "offset", "version", "has")


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

    def scan(self, index: int, group: int) -> Iterator[Any]:
        """Arrow record batches of ``SCAN_SCHEMA`` for segment ``index``."""
        segments = self.segments.open()
        seg = segments[index]
        path = str(seg.log_path)
        meta = CleanedTransactionMetadata(collect_aborted(segments, seg.base_offset, self.upper))
        wrong_total = 0
        arr = seg.view(keep=False)
        for batches in iter_chunks(arr, path=path, prev_last_offset=seg.base_offset - 1):
            is_control, aborted = transaction_verdicts(meta, arr, batches, path)
            rows = np.flatnonzero(~is_control & ~aborted & (batches[:, k.B_COUNT] > 0))
            if rows.size == 0:
                continue
            payload, recs, hashes = index_and_hash(arr, batches[rows], path)
            keyed = recs[:, k.R_KEY_LEN] >= 0
            recs, hashes = recs[keyed], hashes[keyed]
            dirty = recs[:, k.R_OFFSET] >= self.start
            order = np.concatenate([np.flatnonzero(dirty), np.flatnonzero(~dirty)])
            recs, hashes, dirty = recs[order], hashes[order], dirty[order]
            n_dirty = int(dirty.sum())
            versions = np.zeros(recs.shape[0], dtype=np.int64)
            has = np.zeros(recs.shape[0], dtype=np.bool_)
            if self.strategy.versioned:
                v1, h1, wrong = compute_versions(self.strategy, payload, recs[:n_dirty])
                v2, h2, _ = compute_versions(self.strategy, payload, recs[n_dirty:])
                versions = np.where(np.concatenate([h1, h2]), np.concatenate([v1, v2]), 0)
                has = np.concatenate([h1, h2]).astype(np.bool_)
                wrong_total += wrong
            signed = np.ascontiguousarray(hashes, dtype=np.uint64).view(np.int64)
            yield _batch(
                signed, recs[:, k.R_OFFSET], versions, has, np.full(len(recs), group), dirty
            )
        if wrong_total:
            one = np.ones(1, dtype=np.int64)
            yield _batch(
                np.zeros((1, 2), np.int64),
                -one,
                wrong_total * one,
                ~one.astype(bool),
                -one,
                ~one.astype(bool),
            )


def _batch(hashes: Any, offsets: Any, versions: Any, has: Any, group: Any, dirty: Any) -> Any:
    """One Arrow record batch of ``SCAN_SCHEMA`` from column arrays."""
    import pyarrow as pa  # noqa: PLC0415 (the spark extra, on the executor)

    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.ascontiguousarray(hashes[:, 0], dtype=np.int64)),
            pa.array(np.ascontiguousarray(hashes[:, 1], dtype=np.int64)),
            pa.array(np.ascontiguousarray(offsets, dtype=np.int64)),
            pa.array(np.ascontiguousarray(versions, dtype=np.int64)),
            pa.array(np.ascontiguousarray(has, dtype=np.bool_)),
            pa.array(np.ascontiguousarray(group, dtype=np.int32)),
            pa.array(np.ascontiguousarray(dirty, dtype=np.bool_)),
        ],
        names=["h1", "h2", "offset", "version", "has", "grp", "dirty"],
    )


def scan_rows(spark: SparkSession, job: ScanJob) -> DataFrame:
    """The scan stage (not yet run): the ``cleanerd-plan-b-scan`` source, a task per segment."""
    from cleanerd.spark.stages import SCAN_SOURCE, encode  # noqa: PLC0415 (pyspark there)

    return spark.read.format(SCAN_SOURCE).option("job", encode(job)).load()


def winners(rows: DataFrame, versioned: bool) -> DataFrame:
    """Each dirty key's winner ``(h1, h2, offset, version, has)``: a shuffle on the key hash."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415 (the spark extra)

    if not versioned:
        return (
            rows.where(F.col("dirty"))
            .groupBy("h1", "h2")
            .agg(F.max("offset").alias("offset"))
            .select(
                "h1",
                "h2",
                "offset",
                F.lit(0).cast("long").alias("version"),
                F.lit(False).alias("has"),
            )
        )
    dirty_keys = rows.where(F.col("dirty")).select("h1", "h2").distinct()
    best = (
        rows.join(dirty_keys.hint("shuffle_hash"), ["h1", "h2"], "left_semi")
        .groupBy("h1", "h2")
        .agg(F.max(F.struct("has", "version", "offset")).alias("w"))
    )
    return best.select("h1", "h2", "w.offset", "w.version", "w.has")


def winners_by_group(
    spark: SparkSession, rows: DataFrame, versioned: bool, groups: int
) -> DataFrame:
    """The winners each group needs (a join on the key hash), one partition per group, plus a
    marker row (offset -1) per group so that every group gets its write task."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415 (the spark extra)

    keys = rows.select("grp", "h1", "h2").distinct()
    won = winners(rows, versioned).hint("shuffle_hash")  # partitioned by key hash, never broadcast
    assigned = keys.join(won, ["h1", "h2"]).select(*WINNER_COLUMNS)
    markers = spark.range(groups).select(
        F.col("id").cast("int").alias("grp"),
        F.lit(0).cast("long").alias("h1"),
        F.lit(0).cast("long").alias("h2"),
        F.lit(-1).cast("long").alias("offset"),
        F.lit(0).cast("long").alias("version"),
        F.lit(False).alias("has"),
    )
    return assigned.unionByName(markers).repartition(max(groups, 1), "grp")
