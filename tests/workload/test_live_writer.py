"""The live writer writes what its model says; ``check_survivors`` judges compacted logs by it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cleanerd.compaction import compact_directory
from cleanerd.format import Record
from cleanerd.storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    PartitionLog,
    TopicPartition,
    write_offset_checkpoint,
)
from cleanerd.topics import TopicSettings
from cleanerd.workload import LiveWriter
from cleanerd.workload._check import PartitionModel, check_model, check_survivors, load_model
from tests.support.e2e_support import REPO
from tests.support.polling import poll_until

START = 1_700_000_000_000


class FakeClock:
    """Advances 7 ms per call, so every batch gets its own, predictable timestamp."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        self.now += 7
        return self.now


def make_writer(log_dir: Path, **kw: object) -> LiveWriter:
    args: dict[str, object] = {
        "topics": ("live-a", "live-b"),
        "keys": 40,
        "value_bytes": 48,
        "tombstone_ratio": 0.2,
        "batch_records": 10,
        "segment_bytes": 2048,
        "seed": 5,
        "clock": FakeClock(),
    }
    args.update(kw)
    if args["clock"] is None:
        del args["clock"]  # the wall clock
    return LiveWriter(log_dir, **args)  # type: ignore[arg-type]


def read_all(log_dir: Path, tp: TopicPartition) -> list[Record]:
    log = PartitionLog(log_dir / tp.dir_name)
    try:
        return list(log.records())
    finally:
        log.close()


def segment_count(log_dir: Path, tp: TopicPartition) -> int:
    return sum(1 for p in (log_dir / tp.dir_name).iterdir() if p.name.endswith(LOG_SUFFIX))


def assert_matches_model(log_dir: Path, tp: TopicPartition, model: PartitionModel) -> None:
    """Uncompacted: every record is there, and the last per key is the model's."""
    records = read_all(log_dir, tp)
    assert len(records) == model.records
    assert records[-1].offset + 1 == model.log_end_offset
    last: dict[bytes, Record] = {}
    for r in records:
        assert r.key is not None
        last[r.key] = r
    assert {k: r.value for k, r in last.items() if r.value is not None} == model.expected
    assert {k for k, r in last.items() if r.value is None} == model.tombstoned
    assert {k: r.offset for k, r in last.items()} == model.offsets


def test_step_writes_what_the_model_says(tmp_path: Path) -> None:
    writer = make_writer(tmp_path)
    with writer:
        writer.step(80)
        assert writer.records_written == 800
        assert writer.batches_written == 80
        models = {tp: writer.model(tp) for tp in writer.partitions}
    for tp, model in models.items():
        assert model.records == 400  # round-robin: half the batches each
        assert_matches_model(tmp_path, tp, model)
        assert model.tombstoned  # deletes are written ...
        assert model.expected  # ... and so are updates
        assert segment_count(tmp_path, tp) > 3  # small segments roll often
        records = read_all(tmp_path, tp)
        assert sum(r.value is None for r in records) > 0
        assert all(len(r.value) == 48 for r in records if r.value is not None)
        stamps = [r.timestamp for r in records]
        assert stamps == sorted(stamps)
        assert stamps[0] > START
        for key, value in model.expected.items():
            assert key.startswith(b"key-")
            assert value.startswith(f"{tp.dir_name}:".encode())
    assert (
        writer.expected(TopicPartition("live-a", 0)) == models[TopicPartition("live-a", 0)].expected
    )
    assert (
        writer.tombstoned(TopicPartition("live-b", 0))
        == models[TopicPartition("live-b", 0)].tombstoned
    )


def test_same_seed_same_model(tmp_path: Path) -> None:
    docs = []
    for name in ("one", "two"):
        with make_writer(tmp_path / name, partitions=2) as writer:
            writer.step(30)
            doc = writer.to_json()
        del doc["log_dir"]
        docs.append(doc)
    assert docs[0] == docs[1]
    assert len(docs[0]["partitions"]) == 4  # type: ignore[arg-type]


def test_compacted_log_holds_the_models_survivors(tmp_path: Path) -> None:
    settings = TopicSettings.from_kafka({"cleanup.policy": "compact", "delete.retention.ms": 0})
    with make_writer(tmp_path) as writer:
        writer.step(100)
        models = {tp: writer.model(tp) for tp in writer.partitions}
    for tp, model in models.items():
        before = check_survivors(tmp_path, tp, model.expected, model.tombstoned)
        assert before.ok, before.problems
        assert before.records == model.records
        summary = compact_directory(
            tmp_path / tp.dir_name,
            settings.log,
            settings.cleaner,
            settings.strategy,
            START + 10**9,
        )
        assert summary.records_out < summary.records_in
        assert summary.tombstones_removed > 0
        assert summary.checkpoint is not None
        assert summary.checkpoint > 0
        ok, problems, records, distinct = check_survivors(
            tmp_path, tp, model.expected, model.tombstoned, unique_below_checkpoint=True
        )
        assert ok, problems
        assert records < model.records
        # everything but the active segment is compacted: its keys and tombstones may remain
        assert distinct <= len(model.expected) + len(model.tombstoned)
        assert set(model.expected) <= {r.key for r in read_all(tmp_path, tp)}


def test_check_survivors_reports_wrong_expectations(tmp_path: Path) -> None:
    with make_writer(tmp_path, topics=("t",)) as writer:
        writer.step(20)
        model = writer.model(TopicPartition("t", 0))
    live = sorted(model.expected)
    dead = sorted(model.tombstoned)
    expected = dict(model.expected)
    expected[live[0]] = b"stale"
    expected[dead[0]] = b"resurrected"  # the model says live, the log ends on a tombstone
    expected[b"never-written"] = b"x"
    del expected[live[1]]  # a key in the log the expectation does not know
    tombstoned = (model.tombstoned - {dead[0]}) | {live[2]}
    del expected[live[2]]  # deleted by the expectation, alive in the log
    ok, problems, records, distinct = check_survivors(tmp_path, ("t", 0), expected, tombstoned)
    assert not ok
    assert records == model.records
    assert distinct == len(model.expected) + len(model.tombstoned)
    text = "\n".join(problems)
    assert f"key {live[0].decode()!r}: last value" in text
    assert f"key {dead[0].decode()!r}: last record is a tombstone" in text
    assert "key 'never-written': missing" in text
    assert f"key {live[1].decode()!r}: not written" in text
    assert f"key {live[2].decode()!r}: deleted, but last value" in text
    assert len(problems) == 5


def test_unique_below_checkpoint_flags_uncompacted_duplicates(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    with make_writer(tmp_path, topics=("t",), keys=5) as writer:
        writer.step(10)
        model = writer.model(tp)
    write_offset_checkpoint(tmp_path / CLEANER_OFFSET_CHECKPOINT, {tp: model.log_end_offset})
    ok, problems, _, _ = check_survivors(
        tmp_path, tp, model.expected, model.tombstoned, unique_below_checkpoint=True
    )
    assert not ok
    assert all("records below the cleaner checkpoint" in p for p in problems)


def test_run_paces_and_stops(tmp_path: Path) -> None:
    with make_writer(tmp_path, rate=20_000.0, clock=None) as writer:
        stop = threading.Event()
        thread = threading.Thread(target=writer.run, args=(stop,))
        thread.start()
        poll_until(lambda: writer.batches_written >= 20, timeout=30, what="20 batches")
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
        assert writer.error is None
        models = {tp: writer.model(tp) for tp in writer.partitions}
    for tp, model in models.items():
        assert_matches_model(tmp_path, tp, model)


def test_start_stop_thread_with_wall_clock(tmp_path: Path) -> None:
    writer = LiveWriter(tmp_path, ["w"], rate=50_000.0, batch_records=5)
    writer.start()
    poll_until(lambda: writer.records_written >= 50, timeout=30, what="50 records")
    writer.close()
    tp = TopicPartition("w", 0)
    records = read_all(tmp_path, tp)
    assert records[0].timestamp > START  # wall clock: now, after the fixed start of `gen`
    assert_matches_model(tmp_path, tp, writer.model(tp))


def live_cmd(log_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cleanerd.workload._live",
        str(log_dir),
        "--topics",
        "p,q",
        "--partitions",
        "2",
        "--keys",
        "30",
        "--batch-records",
        "5",
        "--segment-bytes",
        "2048",
        "--expected-out",
        str(out),
        *extra,
    ]


def check_model_file(log_dir: Path, out: Path) -> None:
    models = load_model(out)
    assert sorted(models) == [("p", 0), ("p", 1), ("q", 0), ("q", 1)]
    for tp, model in models.items():
        assert model.records > 0
        assert_matches_model(log_dir, tp, model)
    results = check_model(log_dir, models)
    assert sorted(results) == sorted(models)
    assert all(r.ok for r in results.values()), results


@pytest.mark.slow
def test_writer_process_writes_its_model(tmp_path: Path) -> None:
    out = tmp_path / "expected.json"
    cmd = live_cmd(tmp_path / "logs", out, "--rate", "0", "--duration", "0.3")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["records"] > 0
    assert summary["error"] is None
    check_model_file(tmp_path / "logs", out)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_writer_process_stops_on_signal_and_writes_its_model(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "expected.json"
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        live_cmd(logs, out, "--rate", "2000"), cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        poll_until(
            lambda: (
                all(segment_count(logs, TopicPartition(t, p)) > 1 for t in "pq" for p in (0, 1))
                if logs.is_dir() and len(list(logs.iterdir())) == 4
                else None
            ),
            timeout=60,
            what="the writer process to roll segments",
        )
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    check_model_file(logs, out)
