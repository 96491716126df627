"""Where plan B's tasks write their ``.cleaned`` segments before the driver swaps them in.

The staging dir must be on the log's filesystem, so moving a staged segment into the partition
dir is a rename (no copy, no half-written file under a final name), and visible to every
executor. It is never inside the log dir itself: a broker started after a crashed job would
take a leftover directory there for a malformed partition dir and refuse to load. The default
is a hidden sibling of the log dir; each job writes under a directory of its own, removed when
the job ends, whether it succeeded or not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cleanerd.storage import SEGMENT_SUFFIXES, StorageError, segment_file

STAGING_SUFFIX = ".cleanerd-staging"


def default_staging_root(logdir: Path) -> Path:
    """``<parent>/.<logdir name>.cleanerd-staging``: beside the log dir, on its filesystem."""
    logdir = logdir.absolute()
    return logdir.parent / f".{logdir.name}{STAGING_SUFFIX}"


@contextmanager
def job_dir(root: Path, logdir: Path, name: str) -> Iterator[Path]:
    """A fresh directory for one job under ``root`` (created), removed when the block ends.

    Refuses a root on another filesystem than ``logdir``: the swap must be a rename.
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(
            f"staging dir {root}: cannot create it ({e.strerror}); pass --staging-dir on the"
            " log dir's filesystem"
        ) from e
    if os.stat(root).st_dev != os.stat(logdir).st_dev:
        raise StorageError(
            f"staging dir {root} is not on the filesystem of {logdir}: the swap must be a rename"
        )
    path = root / f"{name}-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    try:
        yield path
    finally:
        _remove(path)
        with contextlib.suppress(OSError):
            root.rmdir()  # only when no other job uses it


def _remove(path: Path, attempts: int = 5) -> None:
    """Remove a job's dir; again if a task of the failed job still wrote into it meanwhile."""
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return


def group_dir(job: Path, group: int) -> Path:
    """The directory one write task stages its group's segment in (emptied first: a retried
    task finds what a failed attempt left). Never recreates the job's dir: a task that outlived
    its failed job must fail, not leave a staging dir behind."""
    path = job / f"group-{group:06d}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def move_into(staged: Path, directory: Path, base_offset: int, temp_suffix: str) -> None:
    """Rename the staged files of segment ``base_offset`` into ``directory`` under the same
    names, after removing stale ones a failed cleaning left there."""
    for suffix in SEGMENT_SUFFIXES:
        segment_file(directory, base_offset, suffix, temp_suffix).unlink(missing_ok=True)
    for suffix in SEGMENT_SUFFIXES:
        source = segment_file(staged, base_offset, suffix, temp_suffix)
        if source.exists():
            os.rename(source, segment_file(directory, base_offset, suffix, temp_suffix))
