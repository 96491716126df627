"""Erasure benchmark: how long a superseded value stays on disk under a steady write load.

Run ``.venv/bin/python bench/erasure.py [--partitions 20] [--rate 27000] [--duration 240]``.

Three processes, as in production, and the measuring one trusts nobody:

- the writer, ``python -m cleanerd.workload._live``: updates and tombstones of ``--keys`` keys per
  partition to ``--partitions`` partitions of one compacted topic, at ``--rate`` records/s, each
  batch stamped with the wall clock when it is appended, through the writer contract;
- the daemon, ``cleanerd run`` with ``--workers`` workers, ``max.compaction.lag.ms`` =
  ``--lag-ms`` and ``log.cleaner.backoff.ms`` = ``--backoff-ms``, on a warm kernel cache
  (``cleanerd warmup`` runs first);
- the checker (this file with ``checker``): it reads the partition dirs itself, with
  kafka-python's record decoder (not cleanerd's), every ``--poll`` seconds. Segment files are
  only ever appended to, so a file is identified by its inode: a grown one is read from where
  the last read stopped, a new one from its start. A record is *superseded* when a record of its
  key with a higher offset appears (at that record's timestamp: the writer's clock at append),
  and *gone* when no file of the partition dir holds its offset any more (``.deleted``,
  ``.cleaned`` and ``.swap`` files count as on disk). "superseded -> gone" is the time from the
  first to the second, as the checker saw it (its resolution: ``--poll``).

After ``--duration`` the writer stops and the checker waits up to ``--lag-ms`` + 30 s for every
superseded value to go. Prints one JSON document: the removal times (p50, p99, p99.9, max, in
seconds), how many took longer than the lag, values still on disk at the end, values that came
back after they were gone, the writer's achieved rate and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kafka.errors import CorruptRecordError
from kafka.record import MemoryRecords

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon_support import Daemon

TOPIC = "erasure"
LOG_SUFFIXES = (".log", ".log.deleted", ".log.cleaned", ".log.swap")
BATCH_OVERHEAD = 61  # a v2 batch header: no batch is shorter
MIN_LENGTH = BATCH_OVERHEAD - 12  # its length field counts what follows offset and length


def log(msg: str) -> None:
    print(f"[erasure] {msg}", file=sys.stderr, flush=True)


@dataclass
class Segment:
    """What the checker read of one segment file (one inode)."""

    read_to: int = 0
    offsets: set[int] = field(default_factory=set)
    head: bytes = b""  # its first batch header: who the inode is (inode numbers are reused)


@dataclass
class Partition:
    """The checker's view of one partition dir."""

    segments: dict[int, Segment] = field(default_factory=dict)  # inode -> what it holds
    latest: dict[bytes, int] = field(default_factory=dict)  # key -> highest offset seen
    key_of: dict[int, bytes] = field(default_factory=dict)  # offset -> key, while on disk
    superseded_at: dict[int, float] = field(default_factory=dict)  # offset -> seconds (epoch)
    gone: set[int] = field(default_factory=set)  # superseded offsets seen gone
    next_offset: int = 0  # past the highest offset seen: what is below was seen before


@dataclass
class Tally:
    delays: list[float] = field(default_factory=list)
    reappeared: int = 0
    records_seen: int = 0


class ReplacedError(Exception):
    """The inode holds another file than the one read so far (inode numbers are reused)."""


def read_tail(path: Path, segment: Segment) -> list[tuple[int, int, bytes | None]]:
    """(offset, timestamp ms, key) of the whole, CRC-valid batches past ``segment.read_to``."""
    try:
        with path.open("rb") as f:
            if segment.read_to > os.fstat(f.fileno()).st_size:
                raise ReplacedError  # files are only appended to: a shorter one is another file
            head = f.read(BATCH_OVERHEAD)
            if head[: len(segment.head)] != segment.head:
                raise ReplacedError  # another first batch: a new file under a reused inode
            segment.head = head
            f.seek(segment.read_to)
            data = f.read()
    except FileNotFoundError:
        return []
    found: list[tuple[int, int, bytes | None]] = []
    pos = 0
    while pos + BATCH_OVERHEAD <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if length < MIN_LENGTH or end > len(data):
            break  # a batch still being written (a length not there yet): read it next time
        if data[pos + 16] != 2:  # not a v2 batch where the last one ended: another file
            raise ReplacedError
        try:
            batch = MemoryRecords(data[pos:end]).next_batch()
            if batch is None or not batch.validate_crc():
                break  # its bytes are not all there yet: read it next time
            found += [(r.offset, r.timestamp, r.key) for r in batch]
        except CorruptRecordError:
            break  # the same
        pos = end
    segment.read_to += pos
    return found


def poll(directory: Path, part: Partition, tally: Tally, now: float) -> None:
    """One look at a partition dir: new records, superseded values, values gone."""
    present: dict[int, Path] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.endswith(LOG_SUFFIXES):
            try:
                present[entry.inode()] = Path(entry.path)
            except FileNotFoundError:
                continue
    gone_before: set[int] = set()
    for inode, path in present.items():
        segment = part.segments.setdefault(inode, Segment())
        try:
            records = read_tail(path, segment)
        except ReplacedError:  # the old file went between two looks: its offsets may be gone
            gone_before |= part.segments.pop(inode).offsets
            segment = part.segments[inode] = Segment()
            records = read_tail(path, segment)
        for offset, timestamp, key in records:
            segment.offsets.add(offset)
            if offset >= part.next_offset:  # appended, not copied by a cleaning
                part.next_offset = offset + 1
                tally.records_seen += 1
            if key is None:
                continue
            if offset in part.gone:
                tally.reappeared += 1
                continue
            previous = part.latest.get(key)
            if previous is not None and offset > previous:
                part.superseded_at.setdefault(previous, timestamp / 1000)
            if previous is None or offset > previous:
                part.latest[key] = offset
            part.key_of[offset] = key
    removed = [inode for inode in part.segments if inode not in present]
    if not removed and not gone_before:
        return
    candidates = gone_before.union(*(part.segments.pop(inode).offsets for inode in removed))
    still = set().union(*(s.offsets for s in part.segments.values())) if part.segments else set()
    for offset in candidates - still:
        part.key_of.pop(offset, None)
        superseded = part.superseded_at.pop(offset, None)
        if superseded is not None:
            part.gone.add(offset)
            tally.delays.append(now - superseded)


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Whole or not at all: the other process may read it at any moment."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document))
    tmp.replace(path)


def checker(args: argparse.Namespace) -> None:
    """Poll every partition dir until the stop file appears; write the tally as JSON, and every
    second how many superseded values are still on disk (``<out>.progress``)."""
    log_dir, stop, out = Path(args.log_dir), Path(args.stop_file), Path(args.out)
    progress = out.with_name(out.name + ".progress")
    partitions: dict[str, Partition] = {}
    tally = Tally()
    reported = 0.0
    while True:
        stopping = stop.exists()
        now = time.time()
        for entry in os.scandir(log_dir):
            if entry.is_dir() and entry.name.startswith(f"{TOPIC}-"):
                part = partitions.setdefault(entry.name, Partition())
                poll(Path(entry.path), part, tally, now)
        if stopping:
            break
        if now - reported >= 1.0:
            left = sum(len(p.superseded_at) for p in partitions.values())
            write_json(progress, {"still_on_disk": left, "gone": len(tally.delays)})
            reported = now
        time.sleep(max(0.0, args.poll - (time.time() - now)))
    left = sum(len(p.superseded_at) for p in partitions.values())
    oldest = [now - t for p in partitions.values() for t in p.superseded_at.values()]
    write_json(
        out,
        {
            "delays": tally.delays,
            "still_on_disk": left,
            "oldest_still_on_disk_s": max(oldest, default=0.0),
            "reappeared": tally.reappeared,
            "records_seen": tally.records_seen,
        },
    )


def still_on_disk(progress: Path) -> int | None:
    """The checker's last count of superseded values still on disk (None before its first)."""
    try:
        return int(json.loads(progress.read_text())["still_on_disk"])
    except FileNotFoundError:
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="cleanerd-erasure-", dir=args.work))
    log_dir = work / "logs"
    log_dir.mkdir()
    here = Path(__file__).resolve()
    log("warmup (a warm kernel cache is part of the promise)")
    subprocess.run([sys.executable, "-m", "cleanerd", "warmup"], check=True, capture_output=True)
    stop, out = work / "stop", work / "checker.json"
    checker_cmd = [sys.executable, str(here), "checker", "--log-dir", str(log_dir)]
    checker_cmd += ["--stop-file", str(stop), "--out", str(out), "--poll", str(args.poll)]
    checker_proc = subprocess.Popen(checker_cmd)
    writer_cmd = [sys.executable, "-m", "cleanerd.workload._live", str(log_dir)]
    writer_cmd += ["--topics", TOPIC, "--partitions", str(args.partitions)]
    writer_cmd += ["--rate", str(args.rate), "--duration", str(args.duration)]
    writer_cmd += ["--keys", str(args.keys), "--value-bytes", str(args.value_bytes)]
    writer_cmd += ["--batch-records", str(args.batch_records)]
    writer_cmd += ["--segment-bytes", str(args.segment_bytes), "--tombstone-ratio", "0.05"]
    settings: dict[str, object] = {
        "log.cleaner.threads": args.workers,
        "log.cleaner.backoff.ms": args.backoff_ms,
        "log.cleaner.max.compaction.lag.ms": args.lag_ms,
        "log.segment.bytes": args.segment_bytes,
    }
    load_before = os.getloadavg()
    started = time.monotonic()
    writer = subprocess.Popen(writer_cmd, stdout=subprocess.PIPE, text=True)
    # the writer makes its partitions first: opening runs recovery, which must not race a clean
    deadline = time.monotonic() + 60
    while len(list(log_dir.glob(f"{TOPIC}-*"))) < args.partitions:
        if time.monotonic() > deadline or writer.poll() is not None:
            raise RuntimeError("the writer did not create its partitions")
        time.sleep(0.05)
    with Daemon(work, log_dir, settings) as daemon:
        log(f"daemon ready after {daemon.wait_ready():.1f} s; writing for {args.duration} s")
        written, _ = writer.communicate(timeout=args.duration + 120)
        writer_code = writer.returncode
        wrote_s = time.monotonic() - started
        settle = time.monotonic() + args.lag_ms / 1000 + 30
        log("writer done; waiting for the last superseded values to go")
        progress = out.with_name(out.name + ".progress")
        seen = progress.stat().st_mtime_ns if progress.exists() else 0
        while time.monotonic() < settle:
            time.sleep(0.5)  # the checker rewrites its progress file every second
            if not progress.exists() or progress.stat().st_mtime_ns == seen:
                continue  # not a count made after the writer stopped yet
            if still_on_disk(progress) == 0:
                break
        cpu = daemon.stat()
        status = daemon.get("/status")
        failed = [
            {k: e.get(k) for k in ("event", "partition", "error", "failures")}
            for _, e in daemon.lines
            if e.get("level") in ("error", "warning")
        ]
        counts: dict[str, int] = {}
        for _, e in daemon.lines:
            counts[str(e.get("event"))] = counts.get(str(e.get("event")), 0) + 1
        load_after = os.getloadavg()
        stop.touch()
        checker_proc.wait(timeout=120)
    result = json.loads(out.read_text())
    delays = np.array(result["delays"], dtype=np.float64)
    lag_s = args.lag_ms / 1000
    figures = (
        {
            "p50_s": float(np.percentile(delays, 50)),
            "p99_s": float(np.percentile(delays, 99)),
            "p99_9_s": float(np.percentile(delays, 99.9)),
            "max_s": float(delays.max()),
        }
        if delays.size
        else {}
    )
    return {
        "benchmark": "erasure",
        "settings": {
            k: v
            for k, v in vars(args).items()
            if k not in {"mode", "work", "log_dir", "stop_file", "out"}
        },
        "writer_exit": writer_code,
        "writer": json.loads(written.strip().splitlines()[-1]) if written.strip() else None,
        "writer_seconds": round(wrote_s, 1),
        "records_seen": result["records_seen"],
        "records_per_s": round(result["records_seen"] / max(wrote_s, 1e-9)),
        "superseded_gone": int(delays.size),
        "superseded_to_gone": figures,
        "over_lag": int((delays > lag_s).sum()),
        "still_on_disk_at_end": result["still_on_disk"],
        "oldest_still_on_disk_s": result["oldest_still_on_disk_s"],
        "reappeared": result["reappeared"],
        "daemon": cpu,
        "daemon_events": counts,
        "daemon_problems": failed[:10],
        "uncleanable": [p["tp"] for p in status["partitions"] if p.get("uncleanable")],
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="run", choices=("run", "checker"))
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--rate", type=float, default=27000.0, help="records/s, all partitions")
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of writing")
    parser.add_argument("--keys", type=int, default=1000, help="keys per partition")
    parser.add_argument("--value-bytes", type=int, default=180)
    parser.add_argument("--batch-records", type=int, default=50)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--lag-ms", type=int, default=10_000, help="max.compaction.lag.ms")
    parser.add_argument("--backoff-ms", type=int, default=1_000, help="log.cleaner.backoff.ms")
    parser.add_argument("--workers", type=int, default=2, help="log.cleaner.threads")
    parser.add_argument("--poll", type=float, default=0.1, help="checker's poll interval, s")
    parser.add_argument("--work", default=None, help="where the log dir goes (default: $TMPDIR)")
    parser.add_argument("--log-dir", help=argparse.SUPPRESS)
    parser.add_argument("--stop-file", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "checker":
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it with the stop file
        checker(args)
        return
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
