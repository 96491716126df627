"""Decompression bombs: every batch is decompressed within ``max.decompressed.message.bytes``.

The bombs are built here from a batch of one honest record whose payload is then replaced by
that record followed by a long run of zeros, compressed by the codec libraries themselves
(streamed, so building a 2 GiB bomb never holds 2 GiB), with the CRC recomputed: a small,
valid-looking batch that only decompression can tell apart. The commands run as real processes,
so their peak resident memory is the kernel's own count (``os.wait4``).
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

from cleanerd.cli import cli
from cleanerd.format import (
    MAX_DECOMPRESSED_BYTES,
    CorruptRecordError,
    Record,
    _payloads as payloads_module,
    batch_records_bound,
    build_batch,
    index_batches,
    kernels as k,
    lay_out,
    scan_batches,
)
from cleanerd.format._codecs import (
    Compression,
    DecompressedTooLargeError,
    compress,
    decompress,
    decompressor,
    limit_decompression,
    zstd_size_bound,
)
from cleanerd.storage import PartitionLog
from cleanerd.topics import LogConfig
from cleanerd.workload import WorkloadSpec, generate
from tests.support.bombs import (
    GIB,
    bomb_batch,
    bomb_logdir,
    compressed_bomb,
    files_of,
    logdir_ending_in,
    tiny_records_batch,
)
from tests.support.e2e_support import DaemonProcess, write_config
from tests.support.polling import poll_until

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def test_a_bomb_is_refused_before_the_memory_is_taken() -> None:
    limit = 1 << 20
    for codec in CODECS:
        data = compressed_bomb(codec, b"x", 8 << 20)
        with limit_decompression(limit), pytest.raises(DecompressedTooLargeError) as raised:
            decompress(codec, data)
        err = raised.value
        assert err.limit == limit
        assert limit < err.reached <= limit + 256 * 1024, codec  # stopped within one step
        assert "max.decompressed.message.bytes" in str(err)
        assert codec.label in str(err)


@pytest.mark.parametrize("codec", CODECS)
def test_payloads_at_the_bound_pass_and_one_byte_more_is_refused(codec: Compression) -> None:
    limit = 300_000
    exact = os.urandom(1000) + bytes(limit - 1000)
    for data in (compress(codec, exact), compressed_bomb(codec, exact[:1000], limit - 1000)):
        assert decompress(codec, data, limit) == exact
        assert decompressor(codec, limit)(data) == exact
    over = compress(codec, exact + b"!")
    with pytest.raises(DecompressedTooLargeError):
        decompress(codec, over, limit)
    with pytest.raises(DecompressedTooLargeError):
        decompressor(codec, limit)(over)


def test_zstd_frames_as_kafka_writes_them_need_no_content_size() -> None:
    """zstd-jni's stream writes no content size and an empty last block; the bound comes from
    the block headers, and a frame cut short is still an error."""
    data = os.urandom(50_000) * 6
    zc = zstandard.ZstdCompressor(level=3).compressobj()
    frame = zc.compress(data) + zc.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK) + zc.flush()
    assert zstandard.frame_content_size(frame) == -1
    bound = zstd_size_bound(frame)
    assert bound is not None
    assert len(data) <= bound <= len(data) + 2 * 128 * 1024
    assert decompress(Compression.ZSTD, frame) == data
    with pytest.raises(CorruptRecordError, match="zstd payload does not decompress"):
        decompress(Compression.ZSTD, frame[: len(frame) // 2])
    with pytest.raises(CorruptRecordError, match="zstd payload does not decompress"):
        decompress(Compression.ZSTD, frame[:-3])  # the last block's header gone


def test_a_zstd_content_size_that_lies_small_is_not_trusted() -> None:
    """A frame declaring 1 KiB of content whose blocks regenerate 8 MiB: the declared size is
    not what bounds the output (the block headers are)."""
    big = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(bytes(8 << 20))
    assert big[4] == 0  # no content size, not single-segment: a window descriptor follows
    lying = big[:4] + bytes([0x40]) + big[5:6] + (1024 - 256).to_bytes(2, "little") + big[6:]
    assert zstandard.frame_content_size(lying) == 1024
    assert (zstd_size_bound(lying) or 0) >= 8 << 20
    with limit_decompression(1 << 20), pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, lying)


def test_gzip_members_after_one_another_count_together() -> None:
    member = gzip.compress(bytes(600_000))
    with pytest.raises(DecompressedTooLargeError):
        decompress(Compression.GZIP, member + member, 1_000_000)
    assert decompress(Compression.GZIP, member + member, 1_200_000) == bytes(1_200_000)


def test_many_batches_within_the_bound_cannot_add_up_past_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every batch of a chunk within the bound, together over the chunk's bound (four times the
    setting, here with no floor under it): the chunk is refused at the batch that crosses,
    naming the setting."""
    monkeypatch.setattr(payloads_module, "CHUNK_PAYLOADS_FLOOR", 1)
    limit = 1 << 20
    value = bytes(limit - 200)
    batches = [
        build_batch([Record(i, 5, b"k", value)], compression=Compression.ZSTD) for i in range(6)
    ]
    arr = np.frombuffer(b"".join(batches), np.uint8)
    scan = scan_batches(arr)
    scan.raise_error()
    with limit_decompression(limit):
        laid = lay_out(arr, scan.batches)
        assert laid.usable == 4
        assert laid.error is not None
        assert "4 x the larger of max.decompressed.message.bytes = 1048576" in laid.error.reason
        with pytest.raises(CorruptRecordError) as raised:
            index_batches(arr, scan.batches, path="seg.log")
    assert raised.value.position == sum(len(b) for b in batches[:4])


def test_the_record_index_names_file_position_codec_and_setting() -> None:
    good = build_batch([Record(0, 5, b"k", b"v")], compression=Compression.LZ4)
    bomb = bomb_batch(Compression.LZ4, 1, 4 << 20)
    arr = np.frombuffer(good + bomb, np.uint8)
    with limit_decompression(1 << 20), pytest.raises(CorruptRecordError) as raised:
        index_batches(arr, scan_batches(arr).batches, path="/x/00000000000000000000.log")
    text = str(raised.value)
    assert text.startswith(f"/x/00000000000000000000.log at byte {len(good)}: lz4 payload")
    assert "max.decompressed.message.bytes = 1048576" in text
    assert "(last good offset 0)" in text


# --- the commands, as processes, at the default bound -------------------------------------


def run_measured(args: list[str], env: dict[str, str]) -> tuple[int, str, int]:
    """``(exit status, stderr+stdout, peak RSS in MiB)`` of ``python -m cleanerd ARGS``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cleanerd", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, usage.ru_maxrss // 1024


def _last_log(part: Path) -> str:
    return str(sorted(part.glob("*.log"))[-1])


COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "verify": lambda logdir, part: ["verify", str(logdir)],
    "dump": lambda logdir, part: ["dump", "--deep-iteration", _last_log(part)],
    "snapshot create": lambda logdir, part: ["snapshot", "create", str(part)],
    "compact": lambda logdir, part: ["compact", "--roll-active", str(logdir)],
}


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_commands_refuse_a_2_gib_bomb_in_bounded_memory(codec: Compression, tmp_path: Path) -> None:
    """A batch of a few KB that decompresses to 2 GiB (snappy, whose ratio tops out near 21:1:
    just past the bound) is refused by every command that reads records: exit 1, one line
    naming the decompressed size and the setting, peak RSS far under the bomb, files intact."""
    zeros = MAX_DECOMPRESSED_BYTES + (1 << 20) if codec == Compression.SNAPPY else 2 * GIB
    logdir, part = bomb_logdir(tmp_path, codec, zeros)
    before = files_of(part)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for name, args in COMMANDS.items():
        status, out, rss = run_measured(args(logdir, part), env)
        assert status == 1, (name, out)
        assert "Traceback" not in out, (name, out)
        assert f"{codec.label} payload decompresses past" in out, (name, out)
        assert f"max.decompressed.message.bytes = {MAX_DECOMPRESSED_BYTES}" in out, (name, out)
        assert rss < 1536, (name, rss)
        assert files_of(part) == before, name


@pytest.mark.slow
def test_commands_refuse_a_batch_of_millions_of_tiny_records_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A 3 MB zstd batch of one record more than ``batch_records_bound`` allows (3.9M 11-byte
    records, 43 MB decompressed: within the 128 MiB bound on a payload) is refused by every
    command that reads records, before it is decompressed: its record index alone would take
    400 MB. Exit 1, one line naming the file, position and setting, files intact."""
    most = batch_records_bound(MAX_DECOMPRESSED_BYTES)
    batch = tiny_records_batch(most + 1, 0, Compression.ZSTD)
    logdir, part = logdir_ending_in(
        tmp_path / "L", lambda base: tiny_records_batch(most + 1, base, Compression.ZSTD)
    )
    pos = Path(_last_log(part)).stat().st_size - len(batch)
    before = files_of(part)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # the same command refusing the same batch by the bound on its payload, set at 1 byte
    *_, baseline = run_measured(
        ["verify", str(logdir), "--max-decompressed-message-bytes", "1"], env
    )
    for name, args in COMMANDS.items():
        status, out, rss = run_measured(args(logdir, part), env)
        assert status == 1, (name, out)
        assert "Traceback" not in out, (name, out)
        assert f"at byte {pos}: batch claims {most + 1} records, more than the {most}" in out, (
            name,
            out,
        )
        assert rss < baseline + 64, (name, rss, baseline)
        assert files_of(part) == before, name


def _peak_rss_mib(pid: int) -> int:
    """The process's resident high-water mark so far (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@pytest.mark.slow
def test_the_daemon_marks_a_bomb_partition_uncleanable_and_cleans_the_others(
    tmp_path: Path,
) -> None:
    """One partition holds a 2 GiB zstd bomb in an inactive segment: its cleanings fail, are
    retried, and it ends uncleanable naming the file and position; the healthy partition is
    cleaned; the daemon never holds the bomb (no crash, no restart loop); the bomb's files are
    untouched."""
    logdir = tmp_path / "logs"
    generate(logdir, WorkloadSpec(topic="t", partitions=2, records=3000, keys=100))
    part = logdir / "t-1"
    last = max(
        int(scan_batches(p.read_bytes()).batches[-1, k.B_LAST_OFFSET])
        for p in part.glob("*.log")
        if p.stat().st_size
    )
    bomb = part / f"{last + 1:020d}.log"
    bomb.write_bytes(bomb_batch(Compression.ZSTD, last + 1, 2 * GIB))
    (part / f"{last + 2:020d}.log").touch()  # a new active segment: the bomb's is inactive
    PartitionLog(part).close()  # recovery builds the new segments' indexes, as Kafka's does
    before = files_of(part)
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 200,
            "log.cleaner.threads": 2,
            "cleanerd.retry.attempts": 2,
            "cleanerd.retry.backoff.ms": 100,
        },
    )
    with DaemonProcess(config, tmp_path) as d:

        def settled() -> dict[str, Any] | None:
            status = d.status()
            healthy, hostile = (_partition(status, f"t-{i}") for i in (0, 1))
            return status if healthy["cleanings"] >= 1 and hostile["uncleanable"] else None

        status = poll_until(settled, timeout=120, what="t-0 cleaned, t-1 uncleanable")
        assert d.proc is not None
        rss = _peak_rss_mib(d.proc.pid)
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    hostile = _partition(status, "t-1")
    assert hostile["state"] == "uncleanable"
    assert hostile["failures"] == 3  # a try and two retries, then no more
    assert bomb.name in hostile["last_error"]
    assert "at byte 0" in hostile["last_error"]
    assert "zstd payload decompresses past max.decompressed.message.bytes" in hostile["last_error"]
    assert rss < 1536
    assert files_of(part) == before
    assert not list(logdir.rglob("*.cleaned"))


def _partition(status: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in status["partitions"] if p["tp"] == name)
    return found


def test_verify_and_dump_take_the_bound_as_an_option(tmp_path: Path) -> None:
    """Without a topic config, ``--max-decompressed-message-bytes`` sets the bound; raised past
    a batch, the batch decompresses and what is wrong with it comes next."""
    logdir, part = bomb_logdir(tmp_path, Compression.LZ4, 3 << 20)
    runner = CliRunner()
    low = ["--max-decompressed-message-bytes", "1048576"]
    result = runner.invoke(cli, ["verify", str(logdir), *low])
    assert result.exit_code == 1
    assert "lz4 payload decompresses past max.decompressed.message.bytes = 1048576" in (
        result.output
    )
    result = runner.invoke(cli, ["verify", str(logdir)])
    assert result.exit_code == 1
    assert "decompresses past" not in result.output
    assert "record count in the header does not match" in result.output
    active = str(sorted(part.glob("*.log"))[-1])
    result = runner.invoke(cli, ["dump", "--deep-iteration", active, *low])
    assert result.exit_code == 1
    assert "max.decompressed.message.bytes = 1048576" in result.output
    result = runner.invoke(cli, ["verify", str(logdir), "--max-decompressed-message-bytes", "0"])
    assert result.exit_code == 2


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD, Compression.GZIP])
def test_a_low_setting_bounds_each_batch_not_a_chunk_of_honest_ones(
    tmp_path: Path, codec: Compression
) -> None:
    """A setting far below cleanerd's default (64 KiB) refuses a batch past it, but a chunk of
    honest 12 KB batches compressing 100:1 reads, verifies and compacts (four times the setting
    bounded the chunk once, refusing every honest log compressed past 1:1)."""
    limit = 64 << 10
    value = b"a fairly repetitive value " * 4
    batches = [
        build_batch(
            [Record(b * 100 + j, 5, b"k%d" % j, value) for j in range(100)],
            base_offset=b * 100,
            compression=codec,
        )
        for b in range(60)
    ]
    arr = np.frombuffer(b"".join(batches), np.uint8)
    scan = scan_batches(arr)
    scan.raise_error()
    with limit_decompression(limit):
        laid = lay_out(arr, scan.batches)
        assert laid.error is None
        assert int(laid.ends[-1]) > 4 * limit  # past what bounded a chunk before
        _, records = index_batches(arr, scan.batches, path="seg.log")
    assert records.shape[0] == 6000
    big = build_batch([Record(j, 5, b"k", bytes(1024)) for j in range(100)], compression=codec)
    with limit_decompression(limit):
        one = lay_out(np.frombuffer(big, np.uint8), scan_batches(big).batches)
    assert one.error is not None  # one batch past the setting: still refused, naming it
    assert "max.decompressed.message.bytes" in str(one.error)
    part = tmp_path / "t-0"
    log = PartitionLog.create(part, LogConfig(max_decompressed_message_bytes=limit))
    log.append_batches(arr.tobytes())
    log.roll()
    log.close()
    setting = ["--max-decompressed-message-bytes", str(limit)]
    verified = CliRunner().invoke(cli, ["verify", str(tmp_path), *setting])
    assert verified.exit_code == 0, verified.output
    compacted = CliRunner().invoke(
        cli,
        ["compact", str(tmp_path), "--now", "9999999999999",
         "--set", f"max.decompressed.message.bytes={limit}"],
    )  # fmt: skip
    assert compacted.exit_code == 0, compacted.output
    log = PartitionLog(part, LogConfig(max_decompressed_message_bytes=limit))
    assert sorted(r.key or b"" for r in log.records()) == sorted(b"k%d" % j for j in range(100))
    log.close()
