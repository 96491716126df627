"""The admin pauses of a log dir's partitions, kept in ``<log dir>/cleanerd-paused.json``.

Kafka keeps its cleaner pauses in memory; cleanerd's are an operator's (``cleanerd ctl pause``),
and an operator pauses a partition for a reason that a restart does not end. So each log dir
records the pauses of its partitions, with their counts (two pauses need two resumes), in one
small JSON file written as checkpoints are (``.tmp``, fsync, rename, fsync of the dir). A log dir
with no pause has no file. Kafka's log manager takes only directories of a log dir for
partitions, so the file is invisible to a broker that later opens the dir.

The file is read strictly: anything but the format below is a ``PauseFileError`` naming the
file, for the daemon refuses to start rather than clean a partition someone paused::

    {"version": 1, "paused": [{"topic": "orders", "partition": 3, "pauses": 1}]}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from cleanerd.storage._checkpoints import atomic_write, fsync_dir
from cleanerd.storage._errors import StorageError
from cleanerd.storage._regular import read_regular
from cleanerd.storage._topic_partition import MAX_PARTITION, TopicPartition, validate_topic_name

PAUSES_FILE = "cleanerd-paused.json"
"""The pause record's name inside each log dir."""
PAUSES_VERSION = 1
_MAX_PAUSES = 1 << 31  # a count beyond any real use: a larger one is a damaged file
MAX_PAUSES_FILE_BYTES = 64 << 20  # hundreds of thousands of partitions; longer is not read

Pauses = Mapping[TopicPartition, int]
"""Partition -> outstanding pauses (at least 1)."""


class PauseFileError(StorageError):
    """A log dir's pause file cannot be read or does not parse; the message names the file."""


def pauses_path(log_dir: Path) -> Path:
    return Path(log_dir) / PAUSES_FILE


def read_pauses(log_dir: Path) -> dict[TopicPartition, int]:
    """The pauses recorded in ``log_dir`` (none when it has no pause file)."""
    path = pauses_path(log_dir)
    try:
        raw = read_regular(path, MAX_PAUSES_FILE_BYTES)  # a symlink or FIFO is refused
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise PauseFileError(f"{path}: cannot read: {e.strerror or e}") from e
    if len(raw) > MAX_PAUSES_FILE_BYTES:
        raise PauseFileError(f"{path}: longer than {MAX_PAUSES_FILE_BYTES} bytes: not a pause file")
    try:
        doc = json.loads(raw)
    except ValueError as e:  # UnicodeDecodeError included
        raise PauseFileError(f"{path}: not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("version") != PAUSES_VERSION:
        raise PauseFileError(f"{path}: not a version {PAUSES_VERSION} cleanerd pause file")
    entries = doc.get("paused")
    if not isinstance(entries, list):
        raise PauseFileError(f"{path}: 'paused' must be a list")
    found: dict[TopicPartition, int] = {}
    for i, entry in enumerate(entries):
        tp, count = _entry(path, i, entry)
        if tp in found:
            raise PauseFileError(f"{path}: entry {i}: {tp} is listed twice")
        found[tp] = count
    return found


def _entry(path: Path, i: int, entry: object) -> tuple[TopicPartition, int]:
    where = f"{path}: entry {i}"
    if not isinstance(entry, dict) or set(entry) != {"topic", "partition", "pauses"}:
        raise PauseFileError(f"{where}: must have exactly topic, partition and pauses")
    topic, partition, pauses = entry["topic"], entry["partition"], entry["pauses"]
    if not isinstance(topic, str):
        raise PauseFileError(f"{where}: topic must be a string")
    try:
        validate_topic_name(topic)
    except StorageError as e:
        raise PauseFileError(f"{where}: {e}") from None
    for name, value, low, high in (
        ("partition", partition, 0, MAX_PARTITION),
        ("pauses", pauses, 1, _MAX_PAUSES),
    ):
        # bool is an int to Python, not to the file
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise PauseFileError(f"{where}: {name} must be an integer from {low} to {high}")
    return TopicPartition(topic, partition), pauses


def write_pauses(log_dir: Path, pauses: Pauses) -> None:
    """Record ``pauses`` as ``log_dir``'s pauses, atomically; none removes the file.
    StorageError names the file when it cannot be written."""
    path = pauses_path(log_dir)
    kept = {tp: n for tp, n in pauses.items() if n > 0}
    if not kept:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StorageError(f"{path}: cannot remove: {e.strerror or e}") from e
        fsync_dir(path.parent)
        return
    doc = {
        "version": PAUSES_VERSION,
        "paused": [
            {"topic": tp.topic, "partition": tp.partition, "pauses": n}
            for tp, n in sorted(kept.items())
        ],
    }
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())
