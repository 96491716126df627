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


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv (unlike delenv of an absent name) makes monkeypatch put each variable back as it was,
    # so what the code under test sets does not outlive the test; empty counts as unset
    for name in ("NUMBA_CACHE_DIR", "CACHE_DIRECTORY", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, "")


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
    assert _jitcache.private_dir() is None


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
    _clean_env(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", _UNWRITABLE)
    monkeypatch.setattr(_jitcache, "_package_writable", lambda: False)
    monkeypatch.setattr(_jitcache, "_private", None)
    warning = _jitcache.configure_numba_cache()
    private = Path(os.environ["NUMBA_CACHE_DIR"])
    try:
        assert _jitcache.private_dir() == str(private)  # warmup says it keeps nothing
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
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    private, mode, kinds = out.stdout.splitlines()
    assert mode == "0o700"
    assert "'nbc'" in kinds  # the kernels were cached (for this run) in the private dir
    assert not Path(private).exists()  # removed at exit
    assert out.stderr.count("warning") == 1
    assert f"kernels are compiled into {private}" in out.stderr
