"""Which aborted transactions a range of the log overlaps, read from the segments' ``.txnindex``.

Kafka's ``collectAbortedTransactions``: the cleaner needs the aborted ranges of what it reads to
drop aborted records, and they come from storage's transaction indexes, not from the batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cleanerd.storage._segment import LogSegment
from cleanerd.storage._txnindex import AbortedTxn


def collect_aborted(
    segments: Sequence[LogSegment], start_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """Kafka's ``collectAbortedTransactions``: from the segment holding ``start_offset`` on,
    the aborted txns overlapping [start, upper), until an entry's LSO shows the search is done."""
    bases = [s.base_offset for s in segments]
    first = max(int(np.searchsorted(bases, start_offset, side="right")) - 1, 0)
    found: list[AbortedTxn] = []
    for seg in segments[first:]:
        txns, complete = seg.txn_index.collect_aborted(start_offset, upper_bound)
        found.extend(txns)
        if complete:
            break
    return found
