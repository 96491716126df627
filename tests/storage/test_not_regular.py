"""Files that are not what their names say: a symlink or a FIFO named like a segment file.

cleanerd rewrites and deletes segment files, so it must never follow a symlink to whatever it
points at, and a FIFO must never block a command. One rule (``storage._regular``): a partition
dir holding such a file is refused, with the file named. The commands run in a subprocess with
a timeout, so a FIFO that blocks an open fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd.scheduling._metadata import LogDirCheckpoints, MetadataCache
from cleanerd.storage import TopicPartition
from cleanerd.storage._errors import NotRegularFileError
from cleanerd.storage._regular import (
    check_regular,
    irregular_segment_files,
    open_regular,
    read_regular,
    segment_logs,
    truncate_regular,
)
from cleanerd.workload import WorkloadSpec, generate
from tests.support.cli import cleanerd_env

SPEC = {"records": 400, "keys": 100, "records_per_batch": 20, "segment_bytes": 6000}
TIMEOUT = 180  # seconds; a command blocked on a FIFO never ends by itself


def cleanerd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cleanerd", *args],
        env=cleanerd_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def state(directory: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry without following links: a file's bytes, a link's target, a FIFO as such."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for p in sorted(directory.iterdir()):
        if p.is_symlink():
            out[p.name] = ("link", os.readlink(p))
        elif p.is_fifo():
            out[p.name] = ("fifo", "")
        elif p.is_file():
            out[p.name] = ("file", p.read_bytes())
    return out


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    logdir = tmp_path / "L"
    generate(logdir, WorkloadSpec(topic="t", **SPEC))  # type: ignore[arg-type]
    return logdir


def _segment(logdir: Path) -> Path:
    """An inactive segment's ``.log`` in the middle of the partition."""
    return sorted((logdir / "t-0").glob("*.log"))[1]


def symlinked_log(logdir: Path) -> tuple[Path, Path]:
    """The segment's ``.log`` moved out of the dir and linked back: (link, target)."""
    link = _segment(logdir)
    target = logdir.parent / "elsewhere.log"
    shutil.move(link, target)
    link.symlink_to(target)
    return link, target


def fifo_in_place_of(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


COMMANDS = {
    "verify": lambda d: ["verify", str(d)],
    "dump": lambda d: ["dump", "--deep-iteration", str(d / "t-0")],
    "plan": lambda d: ["plan", str(d)],
    "compact": lambda d: ["compact", str(d), "--now", "9999999999999"],
    "open": lambda d: ["-c", "open"],  # PartitionLog(...), see below
}


def run(command: str, logdir: Path) -> subprocess.CompletedProcess[str]:
    if command == "open":
        code = (
            "import sys; from pathlib import Path; "
            "from cleanerd.storage._partition import PartitionLog; "
            "from cleanerd.storage._errors import StorageError\n"
            "try:\n    PartitionLog(Path(sys.argv[1]))\n"
            "except StorageError as e:\n    print(e); sys.exit(1)"
        )
        return subprocess.run(
            [sys.executable, "-c", code, str(logdir / "t-0")],
            env=cleanerd_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    return cleanerd(*COMMANDS[command](logdir))


def assert_refused(done: subprocess.CompletedProcess[str], bad: Path) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"{bad}: not a regular file" in out or f"{bad}: not-regular-file" in out, out
    assert "Traceback" not in out


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_symlinked_log_is_refused_and_its_target_untouched(logdir: Path, command: str) -> None:
    link, target = symlinked_log(logdir)
    part = logdir / "t-0"
    before, target_bytes = state(part), target.read_bytes()
    assert_refused(run(command, logdir), link)
    assert state(part) == before
    assert target.read_bytes() == target_bytes


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_symlinked_index_to_a_file_outside_is_refused(logdir: Path, command: str) -> None:
    """``.index`` -> a file outside (as if ``/etc/passwd``): rebuilding the index it cannot
    parse would write through the link."""
    outside = logdir.parent / "passwd"
    outside.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 3)
    index = _segment(logdir).with_suffix(".index")
    index.unlink()
    index.symlink_to(outside)
    before = state(logdir / "t-0")
    assert_refused(run(command, logdir), index)
    assert state(logdir / "t-0") == before
    assert outside.read_bytes() == b"root:x:0:0:root:/root:/bin/bash\n" * 3


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".txnindex"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_fifo_index_is_refused_without_blocking(logdir: Path, command: str, suffix: str) -> None:
    path = _segment(logdir).with_suffix(suffix)
    path.touch()
    fifo = fifo_in_place_of(path)
    before = state(logdir / "t-0")
    assert_refused(run(command, logdir), fifo)
    assert state(logdir / "t-0") == before


@pytest.mark.slow
@pytest.mark.parametrize("command", ["verify", "compact"])
def test_fifo_checkpoint_is_refused_without_blocking(logdir: Path, command: str) -> None:
    """A FIFO under a checkpoint's name is a bad checkpoint, not a hang: the log dir's
    ``cleaner-offset-checkpoint`` fails both commands; the partition's
    ``leader-epoch-checkpoint`` fails verify and is a warning for compact (not used by it)."""
    for path, fails in (
        (logdir / "cleaner-offset-checkpoint", True),
        (logdir / "t-0" / "leader-epoch-checkpoint", command == "verify"),
    ):
        if path.exists():
            path.unlink()
        os.mkfifo(path)
        done = run(command, logdir)
        out = done.stdout + done.stderr
        assert done.returncode == (1 if fails else 0), out
        assert f"{path}: not a regular file (a FIFO)" in out
        assert "Traceback" not in out
        path.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_fifo_log_is_refused_without_blocking(logdir: Path, command: str) -> None:
    fifo = fifo_in_place_of(_segment(logdir))
    before = state(logdir / "t-0")
    assert_refused(run(command, logdir), fifo)
    assert state(logdir / "t-0") == before


def test_scheduler_metadata_gives_the_partition_an_error_naming_the_file(logdir: Path) -> None:
    link, _ = symlinked_log(logdir)
    meta = MetadataCache().read(logdir / "t-0", TopicPartition("t", 0), LogDirCheckpoints())
    assert meta.error is not None
    assert f"{link}: not a regular file (a symbolic link)" in meta.error


# -- the rule itself ---------------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.index"
    os.mkfifo(path)
    return path


def test_open_regular_refuses_a_symlink_for_reading_and_for_writing(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"keep me")
    link = tmp_path / "00000000000000000000.index"
    link.symlink_to(target)
    for flags in (os.O_RDONLY, os.O_WRONLY | os.O_APPEND | os.O_CREAT):
        with pytest.raises(NotRegularFileError, match="a symbolic link"):
            open_regular(link, flags)
    with pytest.raises(NotRegularFileError):
        truncate_regular(link, 0)
    with pytest.raises(NotRegularFileError):
        read_regular(link)
    assert target.read_bytes() == b"keep me"


def test_open_regular_refuses_a_fifo_without_blocking(fifo: Path) -> None:
    # O_NONBLOCK: neither open waits for the other end (a reader opens at once; a writer with
    # no reader gets ENXIO); both are then refused as a FIFO
    for flags in (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY | os.O_APPEND | os.O_CREAT):
        with pytest.raises(NotRegularFileError, match="a FIFO"):
            open_regular(fifo, flags)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        check_regular(fifo)


def test_a_missing_file_is_still_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "absent.log", os.O_RDONLY)
    assert truncate_regular(tmp_path / "absent.log", 0) is False


def test_listing_names_the_first_bad_file_and_verify_sees_them_all(logdir: Path) -> None:
    link, _ = symlinked_log(logdir)
    fifo = fifo_in_place_of(sorted((logdir / "t-0").glob("*.timeindex"))[3])
    with pytest.raises(NotRegularFileError) as info:
        segment_logs(logdir / "t-0")
    assert str(link) in str(info.value)
    assert irregular_segment_files(logdir / "t-0") == [
        (link, "a symbolic link"),
        (fifo, "a FIFO"),
    ]
    kept = segment_logs(logdir / "t-0", skip=True)
    assert int(link.stem) not in kept
    assert len(kept) == len(list((logdir / "t-0").glob("*.log"))) - 1


@pytest.mark.slow
def test_dump_of_one_good_segment_beside_a_symlinked_one(logdir: Path) -> None:
    """Only the bad file is refused: a regular segment beside it still dumps."""
    link, _ = symlinked_log(logdir)
    good = sorted((logdir / "t-0").glob("*.log"))[0]
    done = cleanerd("dump", "--deep-iteration", str(good))
    assert done.returncode == 0, done.stderr
    assert "offset: 0 " in done.stdout
    assert_refused(cleanerd("dump", "--deep-iteration", str(link)), link)
