"""A log dir's pause record (``cleanerd-paused.json``): written atomically, read back as written,
gone when nothing is paused, and read strictly: a damaged file is an error naming it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cleanerd.storage import (
    PAUSES_FILE,
    PauseFileError,
    StorageError,
    TopicPartition,
    read_pauses,
    write_pauses,
)

ORDERS_3, USERS_0 = TopicPartition("orders", 3), TopicPartition("users.v2", 0)


def test_pauses_are_read_back_as_written_with_their_counts(tmp_path: Path) -> None:
    write_pauses(tmp_path, {USERS_0: 2, ORDERS_3: 1})
    assert read_pauses(tmp_path) == {ORDERS_3: 1, USERS_0: 2}
    doc = json.loads((tmp_path / PAUSES_FILE).read_text())
    assert doc == {
        "version": 1,
        "paused": [
            {"topic": "orders", "partition": 3, "pauses": 1},
            {"topic": "users.v2", "partition": 0, "pauses": 2},
        ],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [PAUSES_FILE]  # no .tmp left


def test_no_file_is_no_pause_and_no_pause_leaves_no_file(tmp_path: Path) -> None:
    assert read_pauses(tmp_path) == {}
    write_pauses(tmp_path, {})
    assert not (tmp_path / PAUSES_FILE).exists()
    write_pauses(tmp_path, {ORDERS_3: 1})
    write_pauses(tmp_path, {ORDERS_3: 0})  # the last one resumed
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_record(tmp_path: Path) -> None:
    write_pauses(tmp_path, {ORDERS_3: 1})
    (tmp_path / f"{PAUSES_FILE}.tmp").mkdir()  # the temp file cannot be created
    with pytest.raises(StorageError, match=PAUSES_FILE):
        write_pauses(tmp_path, {ORDERS_3: 1, USERS_0: 1})
    assert read_pauses(tmp_path) == {ORDERS_3: 1}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        ("[]", "not a version 1 cleanerd pause file"),
        ('{"version": 2, "paused": []}', "not a version 1 cleanerd pause file"),
        ('{"version": 1}', "'paused' must be a list"),
        ('{"version": 1, "paused": [1]}', "entry 0: must have exactly topic, partition and pauses"),
        (
            '{"version": 1, "paused": [{"topic": "a", "partition": 0}]}',
            "entry 0: must have exactly",
        ),
        (
            '{"version": 1, "paused": [{"topic": "../x", "partition": 0, "pauses": 1}]}',
            "entry 0: invalid topic name",
        ),
        (
            '{"version": 1, "paused": [{"topic": 7, "partition": 0, "pauses": 1}]}',
            "entry 0: topic must be a string",
        ),
        (
            '{"version": 1, "paused": [{"topic": "a", "partition": -1, "pauses": 1}]}',
            "entry 0: partition must be an integer from 0 to 2147483647",
        ),
        (
            '{"version": 1, "paused": [{"topic": "a", "partition": true, "pauses": 1}]}',
            "entry 0: partition must be an integer",
        ),
        (
            '{"version": 1, "paused": [{"topic": "a", "partition": 0, "pauses": 0}]}',
            "entry 0: pauses must be an integer from 1",
        ),
        (
            '{"version": 1, "paused": [{"topic": "a", "partition": 0, "pauses": 1},'
            ' {"topic": "a", "partition": 0, "pauses": 2}]}',
            "entry 1: a-0 is listed twice",
        ),
    ],
)
def test_a_damaged_record_is_an_error_naming_the_file(
    tmp_path: Path, text: str | bytes, reason: str
) -> None:
    path = tmp_path / PAUSES_FILE
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(PauseFileError) as caught:
        read_pauses(tmp_path)
    assert str(caught.value).startswith(f"{path}: ")
    assert reason in str(caught.value)


def test_an_unreadable_or_irregular_record_is_an_error_too(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / PAUSES_FILE)  # a FIFO would block a plain read forever
    with pytest.raises(PauseFileError, match=PAUSES_FILE):
        read_pauses(tmp_path)


def test_an_over_long_record_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    path = tmp_path / PAUSES_FILE
    with open(path, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB of nothing
    with pytest.raises(PauseFileError, match=r"longer than 67108864 bytes: not a pause file"):
        read_pauses(tmp_path)
