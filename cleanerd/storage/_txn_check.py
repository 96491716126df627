"""``.txnindex`` files checked against, and rebuilt from, the ABORT markers in the log.

The index is how the cleaner (and every reader) tells aborted data from committed data, so a
missing, stale or damaged one makes aborted records win over committed ones. It is derived data:
the producer-state walk (``producer_state``) meets every ABORT marker and knows the entry
Kafka's recovery writes for it (``LogSegment.recover``: the transaction's first offset, the
marker's offset, and the last stable offset then). This module compares each segment's index
with those markers and rewrites the indexes that disagree.

An index the cleaner wrote is not always equal to the walk's: the cleaner removes aborted
batches but re-appends the entry unchanged, so an entry may start earlier than the data still
in the log (never before the producer's previous marker), its LSO may be lower than the walk's,
and an entry may outlive the last of its data for one cleaning. Those are accepted; anything
that would classify a batch differently, or stop a reader's search too early, is not.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from cleanerd.storage._checkpoints import fsync_dir
from cleanerd.storage._errors import CorruptIndexError
from cleanerd.storage._producer_state import AbortMarker, ProducerState
from cleanerd.storage._segment import LogSegment
from cleanerd.storage._txnindex import AbortedTxn

MISSING = "missing"
EXTRA = "extra"
FIRST_OFFSET = "first-offset"
LAST_STABLE_OFFSET = "last-stable-offset"
CORRUPT = "corrupt"


@dataclass(frozen=True)
class TxnIndexProblem:
    """One way a segment's ``.txnindex`` disagrees with the log."""

    path: Path  # the segment's .txnindex (it may not exist)
    base_offset: int
    kind: str  # MISSING, EXTRA, FIRST_OFFSET, LAST_STABLE_OFFSET or CORRUPT
    message: str

    @property
    def unreadable(self) -> bool:
        """The index itself is corrupt (the segment checks report that on their own)."""
        return self.kind == CORRUPT

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _describe(txn: AbortedTxn) -> str:
    return (
        f"producer {txn.producer_id}, offsets {txn.first_offset}..{txn.last_offset}, "
        f"last stable offset {txn.last_stable_offset}"
    )


def expected_entries(
    segments: Sequence[LogSegment], state: ProducerState
) -> dict[int, list[AbortedTxn]]:
    """Base offset -> the entries Kafka's recovery writes into that segment's index."""
    bases = [s.base_offset for s in segments]
    out: dict[int, list[AbortedTxn]] = {b: [] for b in bases}
    for txn in state.aborted:
        i = bisect.bisect_right(bases, txn.last_offset) - 1
        if i >= 0:
            out[bases[i]].append(txn)
    return out


def _check_entry(
    txn: AbortedTxn, marker: AbortMarker | None, base: int, upper: int | None
) -> tuple[str, str] | None:
    """What is wrong with one entry of the segment [base, upper), or None."""
    if marker is None or txn.last_offset < base or (upper is not None and txn.last_offset >= upper):
        return EXTRA, (
            f"entry ({_describe(txn)}) names no ABORT marker of producer {txn.producer_id} "
            f"at offset {txn.last_offset} in this segment"
        )
    data_start = marker.txn.first_offset if marker.txn is not None else marker.offset
    if not marker.previous_end < txn.first_offset <= data_start:
        return FIRST_OFFSET, (
            f"entry ({_describe(txn)}) has first offset {txn.first_offset}; the transaction's "
            f"data starts at {data_start}, after the producer's previous marker at "
            f"{marker.previous_end}"
        )
    if marker.txn is not None and txn.last_stable_offset > marker.txn.last_stable_offset:
        return LAST_STABLE_OFFSET, (
            f"entry ({_describe(txn)}) has last stable offset {txn.last_stable_offset}, above "
            f"the log's {marker.txn.last_stable_offset} at that marker: a search would stop "
            "before reaching transactions still open then"
        )
    return None


def txn_index_problems(
    segments: Sequence[LogSegment], state: ProducerState
) -> list[TxnIndexProblem]:
    """Every disagreement between the segments' indexes and the markers in ``state``.

    ``state`` must come from a walk over exactly ``segments`` (oldest first).
    """
    markers = {(m.producer_id, m.offset): m for m in state.abort_markers}
    expected = expected_entries(segments, state)
    problems: list[TxnIndexProblem] = []
    for i, seg in enumerate(segments):
        index = seg.txn_index
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None

        def problem(kind: str, message: str, seg: LogSegment = seg) -> None:
            problems.append(TxnIndexProblem(seg.txn_index.path, seg.base_offset, kind, message))

        try:
            index.sanity_check()
            entries = index.all_aborted()
        except (CorruptIndexError, OSError) as exc:
            problem(CORRUPT, str(exc))
            continue
        for txn in entries:
            wrong = _check_entry(
                txn, markers.get((txn.producer_id, txn.last_offset)), seg.base_offset, upper
            )
            if wrong is not None:
                problem(*wrong)
        have = {(t.producer_id, t.last_offset) for t in entries}
        for txn in expected[seg.base_offset]:
            if (txn.producer_id, txn.last_offset) not in have:
                absent = "" if index.exists else " (the segment has no .txnindex at all)"
                problem(MISSING, f"no entry for the aborted transaction ({_describe(txn)}){absent}")
    return problems


def rebuild(
    segments: Sequence[LogSegment], state: ProducerState, bases: Collection[int] | None = None
) -> list[Path]:
    """Rewrite the indexes of the segments in ``bases`` (all when None) from ``state``, as
    Kafka's recovery writes them; returns the paths rewritten. Callers hold the writer lock."""
    expected = expected_entries(segments, state)
    done = []
    for seg in segments:
        if bases is None or seg.base_offset in bases:
            seg.txn_index.rewrite(expected[seg.base_offset])
            done.append(seg.txn_index.path)
    if done:
        fsync_dir(segments[0].directory)  # a removed index too (atomic_write syncs the others)
    return done
