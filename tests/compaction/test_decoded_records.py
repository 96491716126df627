"""Pass 1 decodes each lz4 or zstd payload and indexes it at once (``_fill.cache_decoded_records``)
instead of laying out a whole piece first and reading it back (``format.lay_out``, then
``_fill.cache_records``). Whatever the kernel does not take (another codec, a payload past its
room or a bound, a bad frame, count or record) sends the piece back to the lay-out path, so
pass 1 must leave exactly what that path leaves: the map, the record cache, the payload bytes
per chunk, the stats and the errors."""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cleanerd.compaction._offset_map import _build
from cleanerd.format import Compression, CorruptRecordError, Record, build_batch
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig
from tests.compaction.test_decompression_pool import NOW, _damage, _log, _pass1, _same


def _both(
    part: Path, monkeypatch: pytest.MonkeyPatch, pool: Executor | None, map_bytes: int = 1 << 20
) -> tuple[dict[str, Any], dict[str, Any], list[bool]]:
    """Pass 1 through the decoding kernel (and what it took), then through the lay-out path."""
    took: list[bool] = []
    real = _build._Pieces._cache_decoded

    def spied(self: _build._Pieces, i: int, scratch: Any) -> bool:
        took.append(real(self, i, scratch))
        return took[-1]

    with monkeypatch.context() as m:
        m.setattr(_build._Pieces, "_cache_decoded", spied)
        decoded = _pass1(part, map_bytes, 1 << 20, pool)
    with monkeypatch.context() as m:
        m.setattr(_build._Pieces, "_cache_decoded", lambda self, i, scratch: False)
        laid = _pass1(part, map_bytes, 1 << 20, pool)
    return decoded, laid, took


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("map_bytes", [1 << 20, 24 * 400], ids=["whole", "fills"])
@pytest.mark.parametrize("threads", [1, 2])
def test_decoding_and_indexing_at_once_leaves_what_laying_out_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, map_bytes: int, threads: int
) -> None:
    part = _log(tmp_path, codec)
    with ThreadPoolExecutor(1) as pool:
        decoded, laid, took = _both(part, monkeypatch, pool if threads == 2 else None, map_bytes)
    assert took
    assert all(took)  # the kernel did every piece
    assert _same(decoded, laid)
    assert decoded["records"] > 0


def _log_of(part: Path, codecs: list[Compression]) -> Path:
    """A closed segment of one 20-record batch per codec in ``codecs``, then an empty active."""
    log = PartitionLog.create(part, LogConfig(), clock=lambda: NOW)
    offset = 0
    for b, codec in enumerate(codecs):
        keys = [b"k%d" % ((b * 7 + j) % 40) for j in range(20)]
        records = [Record(offset + j, 5, key, b"v%d" % b) for j, key in enumerate(keys)]
        log.append_batches(build_batch(records, base_offset=offset, compression=codec))
        offset += len(records)
    log.roll()
    log.close()
    return part


def test_a_chunk_of_mixed_codecs_goes_to_the_lay_out_path_where_the_kernel_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gzip and snappy are not the kernel's: a piece holding one is laid out whole."""
    codecs = [Compression.LZ4, Compression.NONE, Compression.ZSTD, Compression.GZIP,
              Compression.ZSTD, Compression.SNAPPY, Compression.LZ4]  # fmt: skip
    decoded, laid, took = _both(_log_of(tmp_path / "t-0", codecs * 5), monkeypatch, None)
    assert took == [False]  # one chunk, one piece: the gzip batch sent it to the lay-out path
    assert _same(decoded, laid)
    native = [Compression.LZ4, Compression.NONE, Compression.ZSTD] * 5
    decoded, laid, took = _both(_log_of(tmp_path / "n" / "t-0", native), monkeypatch, None)
    assert took == [True]  # uncompressed batches among lz4 and zstd ones: all the kernel's
    assert _same(decoded, laid)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_payload_past_the_kernels_room_goes_to_the_lay_out_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    part = _log(tmp_path, codec)
    monkeypatch.setattr(_build, "DECODED_BATCH_ROOM", 256)  # smaller than any batch's records
    decoded, laid, took = _both(part, monkeypatch, None)
    assert took
    assert not any(took)
    assert _same(decoded, laid)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_corrupt_frame_is_the_readers_error_whichever_path_met_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    part = _log(tmp_path, codec)
    pos = _damage(part, codec)
    errors = []
    for kernel in (True, False):
        with monkeypatch.context() as m:
            if not kernel:
                m.setattr(_build._Pieces, "_cache_decoded", lambda self, i, scratch: False)
            with pytest.raises(CorruptRecordError) as raised:
                _pass1(part, 1 << 20, 1 << 20, None)
        errors.append((str(raised.value), raised.value.position))
    assert errors[0] == errors[1]
    assert errors[0][1] == pos


def test_the_kernels_room_is_one_payload_not_a_piece(tmp_path: Path) -> None:
    """Memory: the decoded payload buffer is per thread and holds one payload, at most
    ``DECODED_BATCH_ROOM`` or the decompression limit if that is lower."""
    assert _build._decoded_room(1 << 30).shape[0] == _build.DECODED_BATCH_ROOM
    assert _build._decoded_room(4096).shape[0] == 4096
    assert np.shares_memory(_build._decoded_room(4096), _build._decoded_room(4096))
