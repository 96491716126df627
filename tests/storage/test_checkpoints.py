"""Checkpoint files: Kafka's exact bytes, Kafka's parsing rules, and errors that name file+line."""

from __future__ import annotations

import base64
import os
import threading
import tracemalloc
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cleanerd.storage import TopicPartition as TP, _checkpoints as cp
from cleanerd.storage._checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    atomic_write,
    read_any_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_from_bytes,
    update_offset_checkpoint,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from cleanerd.storage._errors import CheckpointError, StorageError

TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"  # bytes 0..15, as Kafka's Uuid.toString prints them
FUZZ = settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_constants_match_kafka_file_names() -> None:
    assert CLEANER_OFFSET_CHECKPOINT == "cleaner-offset-checkpoint"
    assert RECOVERY_POINT_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert REPLICATION_OFFSET_CHECKPOINT == "replication-offset-checkpoint"
    assert LEADER_EPOCH_CHECKPOINT == "leader-epoch-checkpoint"
    assert PARTITION_METADATA == "partition.metadata"


def test_topic_partition_names_its_dir() -> None:
    tp = TP("my-topic", 3)
    assert tp.dir_name == "my-topic-3"
    assert str(tp) == "my-topic-3"
    assert sorted([TP("b", 0), TP("a", 10), TP("a", 2)]) == [TP("a", 2), TP("a", 10), TP("b", 0)]


# --------------------------------------------------------------------------- offset checkpoints


def test_offset_checkpoint_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TP("t", 1): 7, TP("t", 0): 5})
    assert path.read_bytes() == b"0\n2\nt 0 5\nt 1 7\n"
    assert read_offset_checkpoint(path) == {TP("t", 0): 5, TP("t", 1): 7}


def test_offset_checkpoint_sorts_by_topic_then_numeric_partition(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TP("b", 0): 1, TP("a", 10): 2, TP("a", 2): 3, TP("a-x", 0): 4})
    assert path.read_bytes() == b"0\n4\na 2 3\na 10 2\na-x 0 4\nb 0 1\n"


def test_empty_offset_checkpoint_bytes(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_missing_and_empty_files_have_no_entries(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    assert read_offset_checkpoint(path) == {}
    path.write_bytes(b"")
    assert read_offset_checkpoint(path) == {}
    path.write_bytes(b"0\n")  # Kafka also treats a file without a count line as empty
    assert read_offset_checkpoint(path) == {}
    assert read_leader_epoch_checkpoint(tmp_path / "nope" / LEADER_EPOCH_CHECKPOINT) == []


def test_reads_kafka_style_whitespace_and_line_endings(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(
        b"0\n5\n__consumer_offsets   49\t\t1234\nmy-topic 0   9223372036854775807  \r\n"
        b"a.b_c 2147483647 -1\rx +1 +5\ny\x0b0\x0c9\n"  # VT/FF: field separators, not lines
    )
    assert read_offset_checkpoint(path) == {
        TP("__consumer_offsets", 49): 1234,
        TP("my-topic", 0): 2**63 - 1,
        TP("a.b_c", 2**31 - 1): -1,
        TP("x", 1): 5,
        TP("y", 0): 9,
    }


def test_duplicate_entries_last_wins_like_kafka(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n2\nt 0 5\nt 0 9\n")
    assert read_offset_checkpoint(path) == {TP("t", 0): 9}
    rows = read_any_checkpoint(path)
    assert rows == [
        {"topic": "t", "partition": 0, "offset": 5},
        {"topic": "t", "partition": 0, "offset": 9},
    ]


OFFSET_ERRORS = [
    (b"1\n0\n", 1, "unsupported version 1"),
    (b"x\n0\n", 1, "expected a version number, got 'x'"),
    (b" 0\n0\n", 1, "expected a version number"),
    (b"\n", 1, "expected a version number, got ''"),
    (b"0\nx\n", 2, "expected an entry count, got 'x'"),
    (b"0\n-1\n", 2, "expected an entry count"),
    (b"0\n1\nfoo 1\n", 3, "expected 'topic partition offset', got 'foo 1'"),
    (b"0\n2\nt 0 1\nt 1\n", 4, "expected 'topic partition offset', got 't 1'"),
    (b"0\n1\nt 0 1 2\n", 3, "expected 'topic partition offset'"),
    (b"0\n1\n t 0 5\n", 3, "expected 'topic partition offset'"),
    (b"0\n1\n\n", 3, "expected 'topic partition offset', got ''"),
    (b"0\n1\nt -1 5\n", 3, "partition must be a non-negative"),
    (b"0\n1\nt x 5\n", 3, "partition must be"),
    (b"0\n1\nt 2147483648 5\n", 3, "partition must be"),
    (b"0\n1\nt 1_0 5\n", 3, "partition must be"),
    ("0\n1\nt \u0663 5\n".encode(), 3, "partition must be"),
    (b"0\n1\nt 0 x\n", 3, "offset must be a 64-bit integer"),
    (b"0\n1\nt 0 9223372036854775808\n", 3, "offset must be"),
    (b"0\n1\nt 0 5.0\n", 3, "offset must be"),
    (b"0\n1\n../x 0 5\n", 3, "invalid topic name '../x'"),
    (b"0\n1\n.. 0 5\n", 3, "invalid topic name '..'"),
    (b"0\n2\nt 0 5\n", 2, "count says 2 entries but the file has 1"),
    (b"0\n0\nt 0 5\n", 2, "count says 0 entries but the file has 1"),
    (b"0\n1\n\xff 0 5\n", 3, "not valid UTF-8"),
]


@pytest.mark.parametrize(("content", "line", "reason"), OFFSET_ERRORS)
def test_offset_checkpoint_errors_name_file_and_line(
    tmp_path: Path, content: bytes, line: int, reason: str
) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        read_offset_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"{path} line {line}: "), message
    assert reason in message


def test_error_message_format_from_the_brief(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n1\nfoo 1\n")
    with pytest.raises(CheckpointError) as info:
        read_offset_checkpoint(path)
    assert str(info.value) == f"{path} line 3: expected 'topic partition offset', got 'foo 1'"


def test_an_over_long_checkpoint_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    with open(path, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB of nothing
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="longer than 67108864 bytes"):
            read_offset_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= cp.MAX_CHECKPOINT_BYTES + (1 << 20)  # the bound and a byte, not the file


def test_unreadable_checkpoint_is_a_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.mkdir()
    with pytest.raises(CheckpointError, match=str(path)):
        read_offset_checkpoint(path)


@pytest.mark.parametrize(
    "entries",
    [
        {TP("../x", 0): 1},
        {TP("a b", 0): 1},
        {TP("t", -1): 1},
        {TP("t", 0): 2**63},
        {TP("t", 0): 1.5},
        {TP("t", 0): -1.0},
        {TP("t", 0): True},
        {TP("t", True): 1},
    ],
)
def test_writer_refuses_entries_kafka_could_not_read(
    tmp_path: Path, entries: dict[TP, int]
) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n0\n")
    with pytest.raises(CheckpointError, match=str(path)):
        write_offset_checkpoint(path, entries)
    assert path.read_bytes() == b"0\n0\n"


def test_update_preserves_other_entries(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n3\na 0 1\nb 0 2\nc 0 3\n")
    result = update_offset_checkpoint(
        path, set={TP("b", 0): 20, TP("d", 1): 4}, remove=[TP("c", 0)]
    )
    assert result == {TP("a", 0): 1, TP("b", 0): 20, TP("d", 1): 4}
    assert path.read_bytes() == b"0\n3\na 0 1\nb 0 20\nd 1 4\n"
    update_offset_checkpoint(path, remove=[TP("zzz", 0)])  # removing an absent entry is fine
    assert read_offset_checkpoint(path) == result


def test_update_creates_missing_file(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    update_offset_checkpoint(path, set={TP("t", 0): 42})
    assert path.read_bytes() == b"0\n1\nt 0 42\n"


def test_update_refuses_to_overwrite_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n5\nt 0 1\n")
    with pytest.raises(CheckpointError):
        update_offset_checkpoint(path, set={TP("t", 0): 2})
    assert path.read_bytes() == b"0\n5\nt 0 1\n"


def test_kept_parse_never_hides_a_rewrite(tmp_path: Path) -> None:
    """The last parse is reused only for the same bytes: another writer's rewrite in place, of
    the same size and with the old mtime and inode, is read again (by reads and by updates)."""
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TP("t", 0): 5, TP("t", 1): 7})
    assert cp.checkpointed_offset(tmp_path, CLEANER_OFFSET_CHECKPOINT, TP("t", 0)) == 5
    before = path.stat()
    with open(path, "r+b") as f:  # the same inode, the same length
        f.write(b"0\n2\nt 0 6\nu 1 7\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_size) == (before.st_ino, before.st_size)
    assert read_offset_checkpoint(path) == {TP("t", 0): 6, TP("u", 1): 7}
    assert cp.checkpointed_offset(tmp_path, CLEANER_OFFSET_CHECKPOINT, TP("t", 0)) == 6
    update_offset_checkpoint(path, set={TP("t", 2): 1})
    assert path.read_bytes() == b"0\n3\nt 0 6\nt 2 1\nu 1 7\n"
    path.write_bytes(b"0\n3\nt 0 6\n")  # now corrupt: the kept parse must not answer
    with pytest.raises(CheckpointError, match="count says 3"):
        read_offset_checkpoint(path)
    with pytest.raises(CheckpointError):
        update_offset_checkpoint(path, set={TP("t", 0): 9})


def test_reads_are_copies(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TP("t", 0): 5})
    first = read_offset_checkpoint(path)
    first[TP("t", 0)] = 99
    first[TP("x", 0)] = 1
    assert read_offset_checkpoint(path) == {TP("t", 0): 5}
    written = update_offset_checkpoint(path, set={TP("t", 1): 2})
    written.clear()
    assert read_offset_checkpoint(path) == {TP("t", 0): 5, TP("t", 1): 2}


topics = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=30).filter(
    lambda t: t not in (".", "..")
)
offset_maps = st.dictionaries(
    st.builds(TP, topics, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=20
)


@pytest.mark.slow
@FUZZ
@given(entries=offset_maps)
def test_offset_round_trip_property(tmp_path: Path, entries: dict[TP, int]) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, entries)
    expected = [f"{tp.topic} {tp.partition} {off}\n" for tp, off in sorted(entries.items())]
    assert path.read_bytes() == f"0\n{len(entries)}\n{''.join(expected)}".encode()
    assert read_offset_checkpoint(path) == entries


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 12), st.integers(-5, 99))),
    steps=st.lists(
        st.tuples(
            st.dictionaries(
                st.builds(TP, st.sampled_from("abcd"), st.integers(0, 12)), st.integers(-5, 99)
            ),
            st.lists(st.builds(TP, st.sampled_from("abcd"), st.integers(0, 12))),
        ),
        max_size=12,
    ),
)
def test_updates_write_what_a_full_rewrite_would(
    tmp_path: Path,
    start: list[tuple[str, int, int]],
    steps: list[tuple[dict[TP, int], list[TP]]],
) -> None:
    """Updates change only their own lines of the kept parse; the file must still be Kafka's
    whole file for the entries: sorted, counted, each once (the start file as a broker might
    write it: any order, duplicates whose last one wins)."""
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    lines = "".join(f"{t} {p} {o}\n" for t, p, o in start)
    path.write_bytes(f"0\n{len(start)}\n{lines}".encode())
    expected = {TP(t, p): o for t, p, o in start}
    for set_, remove in steps:
        for tp in remove:
            expected.pop(tp, None)
        expected.update(set_)
        assert update_offset_checkpoint(path, set=set_, remove=remove) == expected
        rows = "".join(f"{tp.topic} {tp.partition} {o}\n" for tp, o in sorted(expected.items()))
        assert path.read_bytes() == f"0\n{len(expected)}\n{rows}".encode()
        assert read_offset_checkpoint(path) == expected


@FUZZ
@given(data=st.binary(max_size=200) | st.text(alphabet="0123 \t\n\r-+x.t/", max_size=60))
def test_garbage_never_escapes_as_anything_but_checkpoint_error(
    tmp_path: Path, data: bytes | str
) -> None:
    raw = data.encode() if isinstance(data, str) else data
    for name in (CLEANER_OFFSET_CHECKPOINT, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA):
        path = tmp_path / name
        path.write_bytes(raw)
        message = str(path)
        try:
            read_any_checkpoint(path)
        except CheckpointError as exc:
            message = str(exc)
        assert message.startswith(str(path))


# --------------------------------------------------------------------------- leader epochs


def test_leader_epoch_exact_bytes_and_order(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    write_leader_epoch_checkpoint(path, [(0, 0), (1, 100), (3, 250)])
    assert path.read_bytes() == b"0\n3\n0 0\n1 100\n3 250\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (1, 100), (3, 250)]


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (b"0\n1\n1\n", 3, "expected 'epoch start_offset', got '1'"),
        (b"0\n1\n1 2 3\n", 3, "expected 'epoch start_offset'"),
        (b"0\n1\n2147483648 0\n", 3, "epoch must be a 32-bit integer"),
        (b"0\n1\n1 zz\n", 3, "start offset must be"),
        (b"0\n2\n1 0\n", 2, "count says 2"),
        (b"2\n0\n", 1, "unsupported version 2"),
    ],
)
def test_leader_epoch_errors(tmp_path: Path, content: bytes, line: int, reason: str) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        read_leader_epoch_checkpoint(path)
    assert str(info.value).startswith(f"{path} line {line}: ")
    assert reason in str(info.value)


@pytest.mark.slow
@FUZZ
@given(
    entries=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)))
)
def test_leader_epoch_round_trip_property(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    write_leader_epoch_checkpoint(path, entries)
    assert read_leader_epoch_checkpoint(path) == entries


# --------------------------------------------------------------------------- partition.metadata


def test_topic_id_encoding_matches_kafka_uuid_to_string() -> None:
    assert topic_id_from_bytes(bytes(range(16))) == TOPIC_ID
    u = uuid.uuid4()
    assert topic_id_from_bytes(u.bytes) == base64.urlsafe_b64encode(u.bytes).decode()[:22]
    with pytest.raises(ValueError, match="16 bytes"):
        topic_id_from_bytes(b"short")


def test_partition_metadata_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / PARTITION_METADATA
    write_partition_metadata(path, TOPIC_ID)
    assert path.read_bytes() == b"version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw"
    assert read_partition_metadata(path) == TOPIC_ID
    assert read_any_checkpoint(path) == [{"version": 0, "topic_id": TOPIC_ID}]


@FUZZ
@given(raw=st.binary(min_size=16, max_size=16).filter(any))
def test_partition_metadata_round_trip_property(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / PARTITION_METADATA
    topic_id = topic_id_from_bytes(raw)
    write_partition_metadata(path, topic_id)
    assert read_partition_metadata(path) == topic_id


def test_partition_metadata_tolerates_what_kafka_tolerates(tmp_path: Path) -> None:
    path = tmp_path / PARTITION_METADATA
    path.write_bytes(f"version:   0\ntopic_id:\t{TOPIC_ID}\n".encode())
    assert read_partition_metadata(path) == TOPIC_ID
    path.write_bytes(f"version: 1\r\ntopic_id: {TOPIC_ID}".encode())  # newer version: readable
    assert read_any_checkpoint(path) == [{"version": 1, "topic_id": TOPIC_ID}]


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        ("", 1, "file is empty"),
        ("version: -1\ntopic_id: " + TOPIC_ID, 1, "unsupported version -1"),
        ("version:0\ntopic_id: " + TOPIC_ID, 1, "expected 'version: <number>'"),
        ("version: x\ntopic_id: " + TOPIC_ID, 1, "expected 'version: <number>'"),
        ("vers: 0\ntopic_id: " + TOPIC_ID, 1, "expected 'version: <number>'"),
        ("version: 0", 2, "missing 'topic_id: <id>' line"),
        ("version: 0\ntopic: " + TOPIC_ID, 2, "expected 'topic_id: <id>'"),
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2, "all-zero topic id"),
        ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw==", 2, "22 URL-safe base64"),
        ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0OD", 2, "22 URL-safe base64"),
        ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0OD+", 2, "22 URL-safe base64"),
        ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODx", 2, "not canonical"),
        (f"version: 0\ntopic_id: {TOPIC_ID}\nextra: 1", 3, "unexpected content"),
    ],
)
def test_partition_metadata_errors(tmp_path: Path, content: str, line: int, reason: str) -> None:
    path = tmp_path / PARTITION_METADATA
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        read_partition_metadata(path)
    assert str(info.value).startswith(f"{path} line {line}: ")
    assert reason in str(info.value)


def test_partition_metadata_missing_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / PARTITION_METADATA
    with pytest.raises(CheckpointError, match=f"{path}: file does not exist"):
        read_partition_metadata(path)


@pytest.mark.parametrize("bad", ["AAAAAAAAAAAAAAAAAAAAAA", "short", TOPIC_ID + "=="])
def test_partition_metadata_writer_refuses_invalid_ids(tmp_path: Path, bad: str) -> None:
    path = tmp_path / PARTITION_METADATA
    with pytest.raises(CheckpointError, match="cannot write"):
        write_partition_metadata(path, bad)
    assert not path.exists()


# --------------------------------------------------------------------------- read_any_checkpoint


def test_read_any_checkpoint_by_name(tmp_path: Path) -> None:
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        write_offset_checkpoint(tmp_path / name, {TP("t", 0): 3})
        assert read_any_checkpoint(tmp_path / name) == [{"topic": "t", "partition": 0, "offset": 3}]
    write_leader_epoch_checkpoint(tmp_path / LEADER_EPOCH_CHECKPOINT, [(2, 10)])
    assert read_any_checkpoint(tmp_path / LEADER_EPOCH_CHECKPOINT) == [
        {"epoch": 2, "start_offset": 10}
    ]
    tmp = tmp_path / (CLEANER_OFFSET_CHECKPOINT + ".tmp")
    tmp.write_bytes(b"0\n1\nx 1 2\n")
    assert read_any_checkpoint(tmp) == [{"topic": "x", "partition": 1, "offset": 2}]
    with pytest.raises(CheckpointError, match="not a known checkpoint file name"):
        read_any_checkpoint(tmp_path / "meta.properties")


# --------------------------------------------------------------------------- atomic_write


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    (tmp_path / "f.tmp").write_bytes(b"stale leftover from a crash, longer than new data")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_atomic_write_order_fsync_file_then_rename_then_fsync_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic_write(tmp_path / "f", b"data")
    assert events == ["fsync-file", "replace", "fsync-dir"]


@pytest.mark.parametrize("target", ["replace", "fsync"])
def test_atomic_write_failure_keeps_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TP("t", 0): 1})

    def boom(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, target, boom)
    with pytest.raises(StorageError, match="No space left on device") as info:
        write_offset_checkpoint(path, {TP("t", 0): 2})
    assert str(path) in str(info.value)
    monkeypatch.undo()
    assert path.read_bytes() == b"0\n1\nt 0 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [CLEANER_OFFSET_CHECKPOINT]


def test_atomic_write_non_os_error_propagates_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert not (tmp_path / "f.tmp").exists()


def test_atomic_write_into_missing_dir_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot create"):
        atomic_write(tmp_path / "missing" / "f", b"x")


def test_fsync_dir_on_missing_dir_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="missing"):
        cp.fsync_dir(tmp_path / "missing")


def test_concurrent_updates_from_threads_keep_every_entry(tmp_path: Path) -> None:
    """The daemon's workers update one cleaner-offset-checkpoint from several threads."""
    path = tmp_path / "cleaner-offset-checkpoint"
    errors: list[BaseException] = []

    def worker(partition: int) -> None:
        try:
            for offset in range(30):
                update_offset_checkpoint(path, {TP("t", partition): offset})
        except BaseException as e:  # pragma: no cover - what the test is looking for
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_offset_checkpoint(path) == {TP("t", p): 29 for p in range(6)}
