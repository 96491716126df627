"""What a walk of a segment's batch headers learns, kept a chunk at a time.

A batch's row in a walk's matrix takes 112 bytes (14 columns of 8) and a batch may be as small
as 61 bytes, so a walk that holds every row of a segment at once takes more memory than the
file: about 1 GiB for an unbatched producer's 1 GiB segment (one record a batch), about 2 GiB
for a crafted one of empty batches. Whoever needs only a summary of the headers (the survey's
segment metadata, the offsets a swap's checks compare, a segment's tail) walks through
``iter_chunks`` and folds each chunk into a ``HeaderSummary``: one chunk's rows at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from cleanerd.format import ATTR_TRANSACTIONAL, I64, U8, CorruptRecordError, kernels as k
from cleanerd.storage._chunks import iter_chunks


@dataclass(slots=True)
class HeaderSummary:
    """The batches a walk of ``arr[start:]`` found, summarised: where it stopped (after the last
    good batch) and why (the first bad batch's error, None when it reached the end)."""

    end: int
    batches: int = 0
    records: int = 0  # sum of the batches' record counts
    transactional: bool = False  # some batch (data or marker) is transactional
    max_timestamp: int = -1  # the largest batch max timestamp; -1 when there is no batch
    max_timestamp_offset: int = -1  # the last offset of the first batch that has it
    first_timestamp: int | None = None  # the first batch's max timestamp
    first_offset: int | None = None  # the first batch's base offset
    last_offset: int | None = None  # the last batch's last offset
    last_batch: tuple[int, int, int] | None = None  # (position, base offset, crc)
    error: CorruptRecordError | None = None

    def add(self, b: I64) -> None:
        """Fold the next batches (in file order) in."""
        row = int(b[:, k.B_MAX_TIMESTAMP].argmax())
        if self.first_offset is None or int(b[row, k.B_MAX_TIMESTAMP]) > self.max_timestamp:
            self.max_timestamp = int(b[row, k.B_MAX_TIMESTAMP])
            self.max_timestamp_offset = int(b[row, k.B_LAST_OFFSET])
        if self.first_offset is None:
            self.first_offset = int(b[0, k.B_BASE_OFFSET])
            self.first_timestamp = int(b[0, k.B_MAX_TIMESTAMP])
        self.batches += b.shape[0]
        self.records += int(b[:, k.B_COUNT].sum())
        self.transactional = self.transactional or bool(
            (b[:, k.B_ATTRIBUTES] & ATTR_TRANSACTIONAL).any()
        )
        self.last_offset = int(b[-1, k.B_LAST_OFFSET])
        self.last_batch = (int(b[-1, k.B_POS]), int(b[-1, k.B_BASE_OFFSET]), int(b[-1, k.B_CRC]))
        self.end = int(b[-1, k.B_POS] + b[-1, k.B_SIZE])


def summarise_headers(
    arr: U8,
    *,
    path: str,
    start: int = 0,
    prev_last_offset: int = -1,
    check_crc: bool = False,
) -> HeaderSummary:
    """Walk the batches of ``arr[start:]`` as ``iter_chunks`` checks them (CRCs only with
    ``check_crc``), a chunk at a time, into a summary; the first bad batch ends the walk, its
    error kept rather than raised."""
    summary = HeaderSummary(end=start)
    chunks = iter_chunks(
        arr, path=path, start=start, prev_last_offset=prev_last_offset, check_crc=check_crc
    )
    try:
        for b in chunks:
            summary.add(b)
    except CorruptRecordError as e:
        # without its traceback, whose frames hold ``arr``: a caller may close its map next
        summary.error = e.with_traceback(None)
    finally:
        chunks.close()
    return summary
