"""``cleanerd gen`` feeding a running daemon: the writer contract instead of the log dir lock.

The daemon here is a process holding the log dir exactly as ``cleanerd run`` does
(``LogDir.lock(welcome_writers=True)``); ``tests/e2e/test_daemon_gen.py`` runs the real one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cleanerd.storage import Holding, LogDir, LogDirHolder, PartitionLog
from cleanerd.workload import WorkloadError, WorkloadSpec, generate
from tests.support.cli import REPO, cleanerd_env, ok, run
from tests.support.lock_holders import LockHolder, holding
from tests.support.polling import poll_until

SMALL = ["--records", "2000", "--keys", "50", "--records-per-batch", "20"]


def _data_records(directory: Path) -> int:
    log = PartitionLog(directory)
    try:
        return sum(b.header.records_count for b in log.read() if not b.header.is_control)
    finally:
        log.close()


def _log_bytes(directory: Path) -> int:
    """Bytes in the partition's segments, read from the file sizes (no open, no lock)."""
    return sum(p.stat().st_size for p in directory.glob("*.log")) if directory.is_dir() else 0


def _summary(*args: str | Path) -> Any:
    return json.loads(ok("gen", *args, "--format", "json").output)


def test_gen_appends_beside_a_daemon_and_leaves_it_the_log_dir(tmp_path: Path) -> None:
    ok("gen", tmp_path, *SMALL)  # demo-0 holds data already
    with holding(tmp_path, "daemon") as daemon:
        doc = _summary(tmp_path, *SMALL, "--append", "--partitions", "2")
        # gen never took .lock, nor let go of the daemon's
        assert LogDir(tmp_path).holder() == LogDirHolder(Holding.WELCOMING, daemon.pid)
    assert doc["beside_daemon"] is True
    assert [p["records"] for p in doc["partitions"]] == [2000, 2000]
    assert [p["appended_to_existing"] for p in doc["partitions"]] == [True, False]
    assert _data_records(tmp_path / "demo-0") == 4000
    assert _data_records(tmp_path / "demo-1") == 2000
    # the new partition was made under a staging name and renamed: nothing of it is left
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["demo-0", "demo-1"]


def test_gen_refuses_a_log_dir_held_by_a_broker(tmp_path: Path) -> None:
    ok("gen", tmp_path, *SMALL)
    with holding(tmp_path, "broker") as broker:
        result = run("gen", tmp_path, *SMALL, "--append", "--rate", "1000")
    assert result.exit_code == 1
    assert f"locked by process {broker.pid}" in result.output
    assert "does not let writers append beside it" in result.output
    assert "Kafka broker" in result.output
    assert _data_records(tmp_path / "demo-0") == 2000  # nothing written


def test_a_stream_stops_when_a_broker_takes_the_dir_from_the_daemon(tmp_path: Path) -> None:
    """The daemon stops and something that is not cleanerd locks the dir: the stream ends
    with an error before its next batch, every batch written being whole."""
    daemon = LockHolder(tmp_path, "daemon")
    brokers: list[LockHolder] = []

    def progress(partition: int, written: int) -> None:
        if written == 60:  # three batches of 20 in: the daemon goes, a broker comes
            daemon.release()
            brokers.append(LockHolder(tmp_path, "broker"))

    spec = WorkloadSpec(records=1, keys=10, records_per_batch=20)
    try:
        with pytest.raises(WorkloadError) as err:
            generate(tmp_path, spec, progress, duration_s=60.0)
    finally:
        daemon.release()
        for broker in brokers:
            broker.release()
    assert f"locked by process {brokers[0].pid}" in err.value.message
    assert "stopped writing" in err.value.message
    assert _data_records(tmp_path / "demo-0") == 60
    verify = run("verify", tmp_path)
    assert verify.exit_code == 0, verify.output


@pytest.mark.slow
def test_sigterm_ends_a_stream_at_a_batch_boundary_with_a_summary(tmp_path: Path) -> None:
    """A stream of transactions stopped by SIGTERM: exit 0, the summary counts what the log
    holds, the transaction under way is committed or aborted, and the log verifies."""
    args = ["--rate", "2000", "--duration", "600", "--transactional-producers", "2"]
    args += ["--keys", "50", "--records-per-batch", "20", "--format", "json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cleanerd", "gen", str(tmp_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cleanerd_env(),
    )
    try:
        poll_until(
            lambda: proc.poll() is not None or _log_bytes(tmp_path / "demo-0") >= 20_000,
            timeout=60,
            what="gen to write its first batches",
        )
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["ended"] == "stopped"
    part = doc["partitions"][0]
    assert part["records"] > 0
    assert part["records"] == _data_records(tmp_path / "demo-0")
    assert part["records"] == part["batches"] * 20
    assert part["open_transactions"] == 0
    log = PartitionLog(tmp_path / "demo-0")
    try:
        assert log.last_stable_offset() == log.log_end_offset  # no transaction left open
        assert part["last_offset"] == log.log_end_offset - 1
    finally:
        log.close()
    verify = run("verify", tmp_path)
    assert verify.exit_code == 0, verify.output
