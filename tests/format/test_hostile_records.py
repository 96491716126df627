"""Hostile record layouts inside a CRC-valid batch: refused as corrupt, never trusted.

Each case is a batch whose records (or record count) lie, with its CRC32C recomputed after the
damage, so only the record checks stand between it and the cleaner. In an uncompressed and in
compressed batches: the reader raises CorruptRecordError naming the file and the batch's
position; ``cleanerd verify``, ``dump --deep-iteration`` and ``compact`` exit 1 with a one-line
message naming both and leave every file as it was; and no count from a header sizes an
allocation before it is checked against what the payload can hold.
"""

from __future__ import annotations

import shutil
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import crc32c
import numpy as np
import pytest
from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.format import (
    MAX_DECOMPRESSED_BYTES,
    RECORD_INDEX_BYTES,
    BatchHeader,
    Compression,
    CorruptRecordError,
    _payloads as payloads_module,
    batch_records_bound,
    chunk_payloads_bound,
    compress,
    index_batches,
    kernels as k,
    scan_batches,
)
from cleanerd.workload import WorkloadSpec, generate
from tests.support.bombs import tiny_records_batch

PATH = "/data/t-0/00000000000000000000.log"
CODECS = [Compression.NONE, Compression.GZIP, Compression.ZSTD]
INT32_MAX = 2**31 - 1


def varint(value: int) -> bytes:
    """Kafka's zig-zag varint (any width: a hostile field may need 5 bytes)."""
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def record(
    delta: int,
    *,
    key: bytes = varint(10) + b"K" * 10,
    value: bytes = varint(1) + b"v",
    headers: bytes = varint(0),
    extra_length: int = 0,
) -> bytes:
    """One record; ``key``, ``value`` and ``headers`` are the raw fields, length prefix and all,
    so a case can write a length its bytes do not have."""
    body = b"\x00" + varint(0) + varint(delta) + key + value + headers
    return varint(len(body) + extra_length) + body


# name -> the last record of a three-record batch, at offset delta 2
LAST_RECORD: dict[str, bytes] = {
    "record-length-past-the-batch": record(2, extra_length=1000),
    "key-length-past-the-payload": record(2, key=varint(1000) + b"K" * 10),
    "key-length-varint-cut": b"\x04\x00\x00\x04\x80",  # length 2 covers attrs..offset only
    "value-length-past-the-payload": record(2, value=varint(1000) + b"v"),
    "value-length-varint-cut": record(2, value=b"\xff\xff", headers=b""),
    "header-count-varint-cut": record(2, headers=b"\x80"),
    "header-key-length-past-the-payload": record(2, headers=varint(1) + varint(1000) + b"h"),
    "header-value-length-varint-cut": record(2, headers=varint(1) + varint(1) + b"h" + b"\xff"),
    "key-length-minus-2": record(2, key=varint(-2)),
    "key-length-minus-1000": record(2, key=varint(-1000)),
    "key-length-int32-min": record(2, key=varint(-(2**31))),
    "value-length-minus-2": record(2, value=varint(-2)),
    "value-length-int32-min": record(2, value=varint(-(2**31))),
    "header-value-length-minus-2": record(2, headers=varint(1) + varint(1) + b"h" + varint(-2)),
    "header-count-int32-max": record(2, headers=varint(INT32_MAX)),
    "header-count-negative": record(2, headers=varint(-2)),
}
# name -> the header's record count for an otherwise valid three-record batch
COUNTS: dict[str, int] = {
    "count-int32-max": INT32_MAX,
    "count-2^31-read-as-int32-min": -(2**31),
    "count-huge-with-a-tiny-payload": 300_000_000,
    "count-one-more": 4,
}
CASES = [*LAST_RECORD, *COUNTS]


def hostile_batch(base: int, case: str, codec: Compression, *, first_delta: int = 0) -> bytes:
    """A three-record batch at ``base`` damaged as ``case`` says, CRC32C recomputed."""
    last = LAST_RECORD.get(case, record(first_delta + 2))
    payload = record(first_delta) + record(first_delta + 1) + last
    count = COUNTS.get(case, 3)
    data = compress(codec, payload) if codec != Compression.NONE else payload
    header = BatchHeader(
        base_offset=base,
        batch_length=49 + len(data),
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=int(codec),
        last_offset_delta=first_delta + 2,
        base_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_000,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=count & 0xFFFFFFFF if count >= 0 else count,
    )
    out = bytearray(header.pack() + data)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))  # after the damage
    return bytes(out)


def good_batch(base: int) -> bytes:
    payload = record(0) + record(1) + record(2)
    header = BatchHeader(base, 49 + len(payload), 0, 2, 0, 0, 2, 1, 1, -1, -1, -1, 3)
    out = bytearray(header.pack() + payload)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_the_undamaged_layout_reads() -> None:
    """The helpers write what the reader reads, so each case differs by its damage only."""
    data = good_batch(0)
    scan = scan_batches(data, path=PATH)
    assert scan.error is None
    _, records = index_batches(data, scan.batches, path=PATH)
    assert records[:, k.R_OFFSET].tolist() == [0, 1, 2]
    assert records[:, k.R_KEY_LEN].tolist() == [10, 10, 10]


# -- the reader --------------------------------------------------------------------------------


def full_read(data: bytes) -> None:
    """The cleaner's way through a segment: scan (CRCs checked), raise its error, index."""
    scan = scan_batches(data, path=PATH)
    scan.raise_error()
    index_batches(data, scan.batches, path=PATH)


@pytest.mark.parametrize("count", [-1, -(2**31), 0])
def test_a_count_that_would_hide_records_is_refused_by_the_scan(count: int) -> None:
    """Readers skip a batch whose count says it has no records; a negative count, or 0 over
    uncompressed records, must not make records invisible to the cleaner (it kept such a
    batch unread and uncounted: records "-2147483368" in its stats)."""
    bad = bytearray(good_batch(3))
    struct.pack_into(">i", bad, 57, count)
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    scan = scan_batches(good_batch(0) + bytes(bad), path=PATH)
    assert scan.error is not None
    assert scan.error.position == len(good_batch(0))
    assert "record count in the header" in scan.error.reason
    assert len(scan) == 1


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("case", CASES)
def test_reader_refuses_with_file_and_position(case: str, codec: Compression) -> None:
    first = good_batch(0)
    data = first + hostile_batch(3, case, codec)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError) as info:
            full_read(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = info.value
    assert type(err) is CorruptRecordError
    assert "CRC" not in err.reason  # the damage is CRC-valid: the record checks found it
    assert err.path == PATH
    assert err.position == len(first)
    assert f"{PATH} at byte {len(first)}:" in str(err)
    assert err.last_good_offset == 2
    # nothing sized by a header's count: a few KiB of payload, a few KiB of bookkeeping
    assert peak < 1 << 20, f"{peak} bytes allocated for a {len(data)}-byte input"


def test_a_count_that_would_allocate_gigabytes_allocates_nothing_of_the_sort() -> None:
    """A count the payload could hold only at 7 bytes a record is checked before the record
    matrix (88 bytes a record) is allocated: 300M records would ask numpy for 26 GB."""
    data = hostile_batch(0, "count-huge-with-a-tiny-payload", Compression.NONE)
    scan = scan_batches(data, path=PATH)
    assert scan.error is None
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="record count"):
            index_batches(data, scan.batches, path=PATH)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=["none", "zstd"])
def test_one_batch_holds_no_more_records_than_its_index_may_take(
    codec: Compression, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's records are indexed together (104 bytes a record), so the bound on its
    payload alone let one batch of tiny records take 15 times it. A batch of
    ``batch_records_bound`` records reads; one more is refused, naming the setting, before the
    batch is decompressed. The rule is tried at 400 records by raising its per-record cost."""
    monkeypatch.setattr(payloads_module, "RECORD_INDEX_BYTES", (3 * 128 << 20) // 400)
    assert batch_records_bound(MAX_DECOMPRESSED_BYTES) == 400
    whole = tiny_records_batch(400, 0, codec)
    _, records = index_batches(whole, scan_batches(whole).batches, path=PATH)
    assert records[:, k.R_OFFSET].tolist() == list(range(400))
    data = good_batch(0) + tiny_records_batch(401, 3, codec)
    with pytest.raises(CorruptRecordError) as info:
        index_batches(data, scan_batches(data).batches, path=PATH)
    assert info.value.position == len(good_batch(0))
    assert info.value.last_good_offset == 2
    assert "batch claims 401 records, more than the 400" in info.value.reason
    assert "raise max.decompressed.message.bytes for this topic" in info.value.reason


def test_the_bound_leaves_room_for_the_payload_in_the_chunks_bound() -> None:
    """What one batch may take (its payload and its records' index) is within what one chunk
    may take decompressed, at the default and at a raised setting."""
    for limit in (1 << 20, MAX_DECOMPRESSED_BYTES, 1 << 30):
        most = batch_records_bound(limit)
        assert limit + most * RECORD_INDEX_BYTES <= chunk_payloads_bound(limit)
        assert limit + (most + 1) * RECORD_INDEX_BYTES > chunk_payloads_bound(limit)
    assert np.dtype(np.int64).itemsize * k.RECORD_COLUMNS + 16 == RECORD_INDEX_BYTES


@pytest.fixture(scope="module")
def past_the_bound() -> bytes:
    """A real zstd batch of one record more than the default bound (3.9M records, 43 MB of
    records, 3 MB compressed): what the bound on its payload alone let through."""
    return tiny_records_batch(batch_records_bound(MAX_DECOMPRESSED_BYTES) + 1, 0, Compression.ZSTD)


def test_a_real_batch_past_the_bound_is_refused_before_it_takes_memory(
    past_the_bound: bytes,
) -> None:
    """Its index would have taken 400 MB: the reader refuses it having decompressed nothing."""
    most = batch_records_bound(MAX_DECOMPRESSED_BYTES)
    scan = scan_batches(past_the_bound, path=PATH)
    assert scan.error is None
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match=f"batch claims {most + 1} records"):
            index_batches(past_the_bound, scan.batches, path=PATH)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


# -- the commands ------------------------------------------------------------------------------

SPEC = {"records": 300, "keys": 60, "records_per_batch": 20, "segment_bytes": 5000, "topic": "t"}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[Compression, Path]:
    """One generated log dir per codec, copied by each test."""
    out = {}
    for codec in CODECS:
        logdir = tmp_path_factory.mktemp(codec.name.lower()) / "L"
        generate(logdir, WorkloadSpec(codec=codec.name.lower(), **SPEC))  # type: ignore[arg-type]
        out[codec] = logdir
    return out


def damaged_copy(src: Path, dst: Path, case: str, codec: Compression) -> tuple[Path, Path, int]:
    """A copy of ``src`` whose second segment ends in a hostile batch in place of its last
    batch (same base offset and offsets, so only the records are wrong): (logdir, segment,
    the batch's byte position)."""
    logdir = dst / "L"
    shutil.copytree(src, logdir)
    target = sorted((logdir / "t-0").glob("*.log"))[1]
    raw = target.read_bytes()
    last = scan_batches(raw).batches[-1]
    pos, base = int(last[k.B_POS]), int(last[k.B_BASE_OFFSET])
    header = BatchHeader.parse(raw[pos:])
    first_delta = header.last_offset_delta - 2
    target.write_bytes(raw[:pos] + hostile_batch(base, case, codec, first_delta=first_delta))
    return logdir, target, pos


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "verify": lambda d: ["verify", str(d)],
    "dump": lambda d: ["dump", "--deep-iteration", str(d / "t-0")],
    "compact": lambda d: ["compact", str(d), "--delete-retention-ms", "0", "--now", "9" * 13],
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize(
    "case",
    [
        "record-length-past-the-batch",
        "key-length-varint-cut",
        "value-length-past-the-payload",
        "header-count-varint-cut",
        "key-length-minus-2",
        "value-length-int32-min",
        "header-count-int32-max",
        "count-int32-max",
        "count-2^31-read-as-int32-min",
        "count-huge-with-a-tiny-payload",
    ],
)
def test_commands_refuse_and_leave_the_files_alone(
    logs: dict[Compression, Path], tmp_path: Path, case: str, codec: Compression
) -> None:
    logdir, target, pos = damaged_copy(logs[codec], tmp_path, case, codec)
    before = snapshot(logdir / "t-0")
    for name, args in COMMANDS.items():
        result = CliRunner().invoke(cli, args(logdir), catch_exceptions=False)
        out = result.stdout + result.stderr
        assert result.exit_code == 1, f"{name}: {out}"
        assert "Traceback" not in out
        # one line says what and where: the file, then the batch's position
        lines = [line for line in out.splitlines() if str(target) in line]
        assert any(f"at byte {pos}:" in line for line in lines), f"{name}: {out}"
        assert snapshot(logdir / "t-0") == before, name
