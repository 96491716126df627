"""``cleanerd gen`` feeding a running ``cleanerd run``, as a user watching the daemon would.

The daemon holds the log dir; gen appends beside it through the partitions' writer locks at a
steady rate, to a topic that already has history and to a partition it creates meanwhile. The
daemon must clean what gen wrote, without a failed cleaning, and the final log must keep, per
key, the record gen's ``--expected`` file names.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from cleanerd.storage import CLEANER_OFFSET_CHECKPOINT, PartitionLog, read_offset_checkpoint
from tests.support.cli import REPO, cleanerd_env, ok
from tests.support.e2e_support import DaemonProcess, write_config
from tests.support.polling import poll_until

LAYOUT = ["--topic", "orders", "--keys", "200", "--records-per-batch", "50"]
LAYOUT += ["--segment-bytes", "16384", "--tombstone-ratio", "0.1"]


def _log_end(directory: Path) -> int:
    log = PartitionLog(directory)
    try:
        return log.log_end_offset
    finally:
        log.close()


def _partition(status: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in status["partitions"] if p["tp"] == name)
    return found


def _problems(directory: Path, expected: dict[str, Any], checkpoint: int) -> list[str]:
    """Where the log's last record of a key is not the survivor gen expected, and keys with
    more than one record below the cleaner checkpoint (offset strategy, no transactions)."""
    last: dict[str, tuple[int, bool]] = {}
    below: dict[str, int] = {}
    log = PartitionLog(directory)
    try:
        for r in log.records():
            assert r.key is not None
            key = r.key.decode()
            last[key] = (r.offset, r.value is None)
            if r.offset < checkpoint:
                below[key] = below.get(key, 0) + 1
    finally:
        log.close()
    problems = [f"{key}: {n} records below the checkpoint" for key, n in below.items() if n > 1]
    for key, survivor in expected.items():
        found = last.pop(key, None)
        want = (survivor["offset"], survivor["tombstone"])
        if found != want and not (found is None and survivor["tombstone"]):
            problems.append(f"{key}: last record {found}, expected {want}")
    problems += [f"{key}: not in gen's model" for key in last]
    return problems


def test_gen_feeds_a_running_daemon_which_cleans_what_it_writes(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    ok("gen", logdir, *LAYOUT, "--partitions", "2", "--records", "3000")
    history = {p: _log_end(logdir / f"orders-{p}") for p in (0, 1)}
    config = write_config(
        tmp_path,
        {
            "log.dirs": str(logdir),
            "log.cleanup.policy": "compact",
            "log.cleaner.backoff.ms": 300,
            "log.cleaner.min.cleanable.ratio": 0.1,
        },
    )
    expected_file = tmp_path / "expected.json"
    with DaemonProcess(config, tmp_path) as d:
        stream = ["--partitions", "3", "--append", "--rate", "3000", "--duration", "2"]
        stream += ["--format", "json", "--expected", str(expected_file)]
        gen = subprocess.run(
            [sys.executable, "-m", "cleanerd", "gen", str(logdir), *LAYOUT, *stream],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=cleanerd_env(),
            timeout=120,
            check=False,
        )
        assert gen.returncode == 0, gen.stderr
        doc = json.loads(gen.stdout)
        assert doc["beside_daemon"] is True
        assert doc["ended"] == "deadline"
        written = [p["records"] for p in doc["partitions"]]
        # round-robin: every partition grew, by a few segments each
        assert all(n >= 500 for n in written), written
        ends = [p["last_offset"] + 1 for p in doc["partitions"]]
        assert ends[:2] == [history[0] + written[0], history[1] + written[1]]  # after history
        assert ends[2] == written[2]

        def cleaned_past_gen() -> bool:
            """Every partition's cleaner checkpoint is past the history, into gen's records
            (the active segment is never cleaned, so not to the end)."""
            status = d.status()
            first: dict[int, int] = {
                p: _partition(status, f"orders-{p}")["first_dirty_offset"] for p in (0, 1, 2)
            }
            return first[0] > history[0] and first[1] > history[1] and first[2] > 0

        poll_until(cleaned_past_gen, timeout=60, what="cleanings of what gen wrote")
        status = d.status()
        assert status["totals"]["failures"] == 0
        assert _partition(status, "orders-2")["cleanings"] >= 1  # the partition gen created
        assert all(p["last_error"] is None for p in status["partitions"])
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=30) == 0
    checkpoints = read_offset_checkpoint(logdir / CLEANER_OFFSET_CHECKPOINT)
    expected = json.loads(expected_file.read_text())["partitions"]
    for p in (0, 1, 2):
        tp = next(tp for tp in checkpoints if tp.partition == p)
        directory = logdir / f"orders-{p}"
        assert _problems(directory, expected[str(p)]["keys"], checkpoints[tp]) == []
    assert not list(logdir.rglob("*.cleaned"))
    assert not [p for p in logdir.iterdir() if p.name.endswith("-delete")]
