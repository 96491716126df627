"""``iter_chunks``: a segment walked in chunks of whole batches, each bounded in bytes and in
records, every batch once, in order, checked once."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cleanerd.format import Compression, _scan as scan_mod, kernels as k, scan_batches
from cleanerd.storage import _chunks as chunks_mod, iter_chunks
from tests.support.cleaning import new_log, rec


def _segment(tmp_path: Path, sizes: list[int]) -> tuple[Any, Any]:
    """One rolled segment of zstd batches of ``sizes[i]`` tiny records each; its map and scan."""
    log = new_log(tmp_path, segment_bytes=1 << 30)
    for n in sizes:
        log.append([rec(j % 7, None) for j in range(n)], compression=Compression.ZSTD)
    log.roll()
    arr = log.segments[0].view(keep=False)
    return arr, scan_batches(arr, check_crc=False).batches


@pytest.mark.parametrize("most", [1, 250, 1000, 10_000])
def test_a_chunk_holds_at_most_chunk_records_records_unless_one_batch_holds_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, most: int
) -> None:
    sizes = [300, 40, 900, 1200, 5, 5, 5, 700, 260, 1]
    arr, every = _segment(tmp_path, sizes)
    monkeypatch.setattr(chunks_mod, "CHUNK_RECORDS", most)
    checked: Counter[int] = Counter()
    original = scan_mod.first_crc_mismatch

    def counting(buf: Any, batches: Any, stop: int) -> int:
        checked.update(int(p) for p in batches[:stop, k.B_POS])
        return original(buf, batches, stop)

    monkeypatch.setattr(scan_mod, "first_crc_mismatch", counting)
    chunks = list(iter_chunks(arr, path="seg"))
    for chunk in chunks:
        records = int(chunk[:, k.B_COUNT].sum())
        assert records <= most or chunk.shape[0] == 1, (records, chunk[:, k.B_COUNT])
    # every batch once, in order, and no cut earlier than the bound asks
    assert np.array_equal(np.concatenate(chunks), every)
    for a, b in itertools.pairwise(chunks):
        assert int(a[:, k.B_COUNT].sum() + b[0, k.B_COUNT]) > most
    assert checked == Counter(int(p) for p in every[:, k.B_POS])


def test_the_default_leaves_honest_chunks_whole(tmp_path: Path) -> None:
    arr, every = _segment(tmp_path, [1000] * 20)
    assert len(list(iter_chunks(arr, path="seg"))) == 1
    assert int(every[:, k.B_COUNT].sum()) <= chunks_mod.CHUNK_RECORDS


def test_pages_are_released_only_up_to_the_chunk_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arr, every = _segment(tmp_path, [2000] * 6)
    monkeypatch.setattr(chunks_mod, "CHUNK_RECORDS", 4000)
    released: list[tuple[int, int]] = []
    monkeypatch.setattr(chunks_mod, "release", lambda a, lo, hi: released.append((lo, hi)))
    ends = []
    for chunk in iter_chunks(arr, path="seg"):
        ends.append(int(chunk[-1, k.B_POS] + chunk[-1, k.B_SIZE]))
        # nothing of this chunk was released before it was handed out
        assert all(hi <= int(chunk[0, k.B_POS]) for _, hi in released)
    assert [hi for _, hi in released] == ends
    assert [lo for lo, _ in released] == [0, *ends[:-1]]
    assert ends[-1] == int(every[-1, k.B_POS] + every[-1, k.B_SIZE])


def test_uncompressed_batches_come_in_wider_chunks_than_compressed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uncompressed batches are read where they lie (nothing decompressed), so once a chunk of
    them is seen the next ones are ``uncompressed_chunk_bytes()`` wide; compressed batches
    keep to ``CHUNK_BYTES`` of them a chunk, even inside a wide read."""
    step = 4096
    monkeypatch.setattr(chunks_mod, "CHUNK_BYTES", step)
    wide = chunks_mod.uncompressed_chunk_bytes()
    assert wide == 4 * step
    log = new_log(tmp_path, segment_bytes=1 << 30)
    codecs = [Compression.NONE] * 60 + [Compression.GZIP] * 60 + [Compression.NONE] * 60
    for i, codec in enumerate(codecs):
        log.append([rec(j, 1000 * i + j) for j in range(30)], compression=codec)
    log.roll()
    arr = log.segments[0].view(keep=False)
    every = scan_batches(arr, check_crc=False).batches
    chunks = list(iter_chunks(arr, path="seg"))
    assert np.array_equal(np.concatenate(chunks), every)  # every batch once, in order
    compressed = [int(c[(c[:, k.B_ATTRIBUTES] & 7) != 0, k.B_SIZE].sum()) for c in chunks]
    sizes = [int(c[:, k.B_SIZE].sum()) for c in chunks]
    assert all(n <= step for n in compressed), compressed
    assert all(n <= wide for n in sizes), sizes
    # a read after a chunk holding any compressed batch (and the first read) takes step bytes,
    # as before; a read after a plain chunk takes wide ones
    plain = [n == 0 for n in compressed]
    for i, size in enumerate(sizes):
        assert size <= (wide if i and plain[i - 1] else step), (i, sizes, compressed)
    assert max(sizes) > 3 * step  # the plain reads did widen
    log.close()
