"""numba's kernel cache: found wherever it can be written, and never a crash when it cannot."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd import _jitcache
from tests.support.logs import tree_hash, two_partitions
from tests.support.nobody import (
    as_nobody,
    give_to_nobody,
    nobody_python,
    public_dir,
    unprivileged_uid,
)

REPO = Path(__file__).resolve().parents[2]
# as an entry point does: the cache dir first, then the kernels (importing cleanerd chooses none)
_SCRIPT = (
    "import os, stat;"
    "from cleanerd._jitcache import configure_numba_cache;"
    "configure_numba_cache();"
    "from cleanerd.format._builder import build_batch;"
    "from cleanerd.format._records import Record;"
    "from cleanerd.format import scan_batches;"
    "scan_batches(build_batch([Record(0, 1, b'k', b'v')]));"
    "d = os.environ.get('NUMBA_CACHE_DIR');"
    "print(d);"
    "print(oct(stat.S_IMODE(os.stat(d).st_mode)));"
    "print(sorted({p.rsplit('.', 1)[-1] for _, _, f in os.walk(d) for p in f}))"
)
# /proc refuses new dirs even to root: a cache dir nobody can create
_UNWRITABLE = "/proc/cleanerd-no-such-dir"
# a subprocess cannot be monkeypatched: these lines, run first, do it
_NO_SHARED_TMP = "import cleanerd._jitcache as j; j.SHARED_TMP = ();"  # not this machine's
_READ_ONLY_INSTALL = "import cleanerd._jitcache as j; j._package_writable = lambda: False;"


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv (unlike delenv of an absent name) makes monkeypatch put each variable back as it was,
    # so what the code under test sets does not outlive the test; empty counts as unset
    for name in ("NUMBA_CACHE_DIR", "CACHE_DIRECTORY", "XDG_CACHE_HOME", "TMPDIR"):
        monkeypatch.setenv(name, "")
    # never this machine's /var/tmp or /tmp: a test that wants a shared dir makes its own
    monkeypatch.setattr(_jitcache, "SHARED_TMP", (Path(_UNWRITABLE),))
    monkeypatch.setattr(_jitcache, "_temporary", None)


def _homeless(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only install run by a user whose HOME cannot be written (nobody's /nonexistent;
    as root only a dir under /proc cannot be made)."""
    _clean_env(monkeypatch)
    monkeypatch.setenv("HOME", _UNWRITABLE)
    monkeypatch.setattr(_jitcache, "_package_writable", lambda: False)


def _shared(path: Path) -> Path:
    """A dir like /var/tmp: everyone may write in it, the sticky bit keeps their entries apart."""
    path.mkdir()
    path.chmod(0o1777)
    return path


def _mine(base: Path) -> Path:
    return base / f"cleanerd-numba-{os.geteuid()}"


def test_read_only_package_dir_moves_the_cache_to_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_jitcache, "_package_writable", lambda: False)
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "cleanerd" / "numba")
    assert (tmp_path / "cleanerd" / "numba").is_dir()
    assert capsys.readouterr().err == ""


def test_systemd_cache_directory_comes_before_the_home_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("CACHE_DIRECTORY", f"{tmp_path / 'svc'}:{tmp_path / 'other'}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(_jitcache, "_package_writable", lambda: False)
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "svc" / "numba")


def test_writable_package_dir_keeps_numbas_default(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setattr(_jitcache, "_package_writable", lambda: True)
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == ""
    assert _jitcache.temporary_cache() is None


def test_explicit_numba_cache_dir_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")
    assert (tmp_path / "mine").is_dir()
    assert not (tmp_path / "xdg").exists()


def test_unwritable_explicit_dir_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("NUMBA_CACHE_DIR", _UNWRITABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    warning = _jitcache.configure_numba_cache()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "cleanerd" / "numba")
    assert warning is not None
    assert f"NUMBA_CACHE_DIR={_UNWRITABLE} is not writable" in warning
    assert capsys.readouterr().err == warning + "\n"


def test_nothing_writable_uses_a_private_temp_dir_and_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _homeless(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", _UNWRITABLE)
    warning = _jitcache.configure_numba_cache()
    private = Path(os.environ["NUMBA_CACHE_DIR"])
    try:
        temporary = _jitcache.temporary_cache()
        assert temporary is not None  # warmup says it keeps nothing, and why
        assert temporary.path == str(private)
        assert f"{_mine(Path(_UNWRITABLE))} is not writable" in temporary.why
        assert private.is_dir()
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert warning is not None
        assert "read-only" in warning
        assert f"{_UNWRITABLE}/cleanerd/numba is not writable" in warning
        assert "set NUMBA_CACHE_DIR" in warning
        assert "cleanerd warmup" in warning
        assert capsys.readouterr().err.count("warning") == 1
    finally:
        shutil.rmtree(private)


def test_no_writable_home_keeps_the_cache_in_a_dir_of_this_users_own_in_var_tmp(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """uid 65534 with HOME=/nonexistent used to compile every kernel in every run."""
    _homeless(monkeypatch)
    var_tmp = _shared(tmp_path / "var-tmp")
    monkeypatch.setattr(_jitcache, "SHARED_TMP", (var_tmp, tmp_path / "tmp"))
    old_umask = os.umask(0)  # the dir's mode is cleanerd's own, not left to the umask
    try:
        assert _jitcache.configure_numba_cache() is None
    finally:
        os.umask(old_umask)
    mine = _mine(var_tmp)
    assert os.environ["NUMBA_CACHE_DIR"] == str(mine)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    assert mine.stat().st_uid == os.geteuid()
    assert _jitcache.temporary_cache() is None  # kept: warmup fills what later runs load
    assert capsys.readouterr().err == ""
    # the next command, with the same environment, makes the same choice
    monkeypatch.setenv("NUMBA_CACHE_DIR", "")
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(mine)


def test_tmpdir_comes_before_var_tmp_and_the_user_cache_before_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _homeless(monkeypatch)
    var_tmp = _shared(tmp_path / "var-tmp")
    monkeypatch.setattr(_jitcache, "SHARED_TMP", (var_tmp,))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "mine"))
    (tmp_path / "mine").mkdir()
    assert _jitcache.shared_tmp_dirs() == [_mine(tmp_path / "mine"), _mine(var_tmp)]
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(_mine(tmp_path / "mine"))

    monkeypatch.setenv("NUMBA_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _jitcache.configure_numba_cache() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "xdg" / "cleanerd" / "numba")


def _planted_symlink(mine: Path) -> str:
    target = mine.parent.parent / "attacker"
    target.mkdir(mode=0o700)
    mine.symlink_to(target)
    return "it is a symlink"


def _group_writable(mine: Path) -> str:
    mine.mkdir()
    mine.chmod(0o770)
    return "its mode 0770 lets group or others in"


def _a_file(mine: Path) -> str:
    mine.write_bytes(b"")
    return "it is not a directory"


def _someone_elses(mine: Path) -> str:
    mine.mkdir(mode=0o700)  # the test's own uid: the code under test is told it runs as another
    return f"it is owned by uid {mine.stat().st_uid}, not {_OTHER_UID}"


_OTHER_UID = 4242
_PLANTED = {
    "symlink": _planted_symlink,
    "group-writable": _group_writable,
    "file": _a_file,
    "someone else's": _someone_elses,
}


@pytest.mark.parametrize("plant", sorted(_PLANTED))
def test_a_dir_another_user_could_have_planted_is_refused_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    plant: str,
) -> None:
    """numba loads pickles from its cache: one someone else controls would run their code."""
    _homeless(monkeypatch)
    if plant == "someone else's":
        monkeypatch.setattr(os, "geteuid", lambda: _OTHER_UID)
    var_tmp = _shared(tmp_path / "var-tmp")
    monkeypatch.setattr(_jitcache, "SHARED_TMP", (var_tmp,))
    planted = _mine(var_tmp)
    reason = _PLANTED[plant](planted)
    before = planted.lstat()
    warning = _jitcache.configure_numba_cache()
    private = Path(os.environ["NUMBA_CACHE_DIR"])
    try:
        assert warning is not None
        assert f"refused {planted}: {reason}" in warning
        assert capsys.readouterr().err == warning + "\n"
        temporary = _jitcache.temporary_cache()  # nothing else: this run's own, removed at exit
        assert temporary is not None
        assert temporary.path == str(private)
        assert f"refused {planted}" in temporary.why
    finally:
        shutil.rmtree(private)
    after = planted.lstat()  # refused, not repaired
    assert (after.st_mode, after.st_uid, after.st_ino) == (
        before.st_mode,
        before.st_uid,
        before.st_ino,
    )
    if plant == "symlink":
        assert list((tmp_path / "attacker").iterdir()) == []


def test_after_a_refusal_the_next_shared_dir_is_used_and_the_warning_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _homeless(monkeypatch)
    var_tmp, tmp = _shared(tmp_path / "var-tmp"), _shared(tmp_path / "tmp")
    monkeypatch.setattr(_jitcache, "SHARED_TMP", (var_tmp, tmp))
    reason = _planted_symlink(_mine(var_tmp))
    warning = _jitcache.configure_numba_cache()
    assert os.environ["NUMBA_CACHE_DIR"] == str(_mine(tmp))
    assert warning == (
        f"cleanerd: warning: refused {_mine(var_tmp)}: {reason}; "
        f"compiled kernels go to {_mine(tmp)} instead"
    )
    assert capsys.readouterr().err == warning + "\n"
    assert _jitcache.temporary_cache() is None


def test_a_dir_others_can_rename_away_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In a world-writable dir without the sticky bit anyone may swap the checked dir."""
    _homeless(monkeypatch)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    monkeypatch.setattr(_jitcache, "SHARED_TMP", (loose,))
    warning = _jitcache.configure_numba_cache()
    private = Path(os.environ["NUMBA_CACHE_DIR"])
    try:
        assert warning is not None
        assert f"refused {_mine(loose)}: others can replace it" in warning
        assert _jitcache.temporary_cache() is not None
    finally:
        shutil.rmtree(private)


@pytest.mark.slow
def test_kernels_are_cached_in_numba_cache_dir(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines()[0] == str(cache)
    cached = {p.suffix for p in cache.rglob("*") if p.is_file()}
    assert {".nbi", ".nbc"} <= cached
    assert out.stderr == ""


@pytest.mark.slow
def test_no_writable_cache_dir_compiles_into_a_temp_dir_instead_of_dying(tmp_path: Path) -> None:
    """The import that used to die with numba's "no locator available" runs its kernels, warns
    once, and leaves no temp dir behind."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))},
        "NUMBA_CACHE_DIR": _UNWRITABLE,
        "XDG_CACHE_HOME": _UNWRITABLE,
        "HOME": _UNWRITABLE,
        "TMPDIR": _UNWRITABLE,
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run(
        [sys.executable, "-c", _NO_SHARED_TMP + _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    private, mode, kinds = out.stdout.splitlines()
    assert mode == "0o700"
    assert "'nbc'" in kinds  # the kernels were cached (for this run) in the private dir
    assert not Path(private).exists()  # removed at exit
    assert out.stderr.count("warning") == 1
    assert f"kernels are compiled into {private}" in out.stderr


@pytest.mark.slow
def test_a_user_without_a_home_compiles_once_and_then_loads_the_kernels() -> None:
    """The issue: as uid 65534 with HOME=/nonexistent and a read-only install, every command
    compiled every kernel again (verify 8 s against 0.65 s warm) and warned. Now the first run
    fills nobody's own dir in the shared temporary dir, silently, and the second loads it."""
    python, pythonpath = nobody_python(REPO)
    work = public_dir("cleanerd-jitcache-")
    try:
        tmp = _shared(work / "tmp")  # $TMPDIR: this test's /var/tmp
        logdir = two_partitions(work, records=12, keys=3, roll_at=5)
        give_to_nobody(logdir)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": pythonpath}
        env |= {"HOME": "/nonexistent", "TMPDIR": str(tmp)}
        cmd = [python, "-c", _READ_ONLY_INSTALL + "from cleanerd.cli import main; main()"]
        cache = tmp / f"cleanerd-numba-{unprivileged_uid()}"
        files = []
        for _ in range(2):
            done = subprocess.run(
                as_nobody(*cmd, "verify", str(logdir)),
                env=env,
                cwd=work,
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr
            assert "OK (2 partition(s))" in done.stdout
            assert done.stderr == ""  # no cache warning
            files.append(tree_hash(cache))
        first, second = files
        assert {".nbi", ".nbc"} <= {Path(name).suffix for name in first}
        assert second == first  # loaded: a compile would add or rewrite files
        assert (cache.stat().st_uid, stat.S_IMODE(cache.stat().st_mode)) == (
            unprivileged_uid(),
            0o700,
        )
    finally:
        shutil.rmtree(work)
