"""numba's kernel cache works from a read-only install and honours NUMBA_CACHE_DIR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cleanerd import _jitcache

REPO = Path(__file__).resolve().parents[1]
_SCRIPT = (
    "import os, cleanerd;"
    "from cleanerd.format.builder import build_batch;"
    "from cleanerd.format.records import Record;"
    "from cleanerd.format.reader import scan_batches;"
    "scan_batches(build_batch([Record(0, 1, b'k', b'v')]));"
    "print(os.environ.get('NUMBA_CACHE_DIR'))"
)


def test_read_only_package_dir_moves_the_cache_to_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Empty counts as unset; setenv (unlike delenv of an absent name) makes monkeypatch put the
    # variable back as it was, so the dir the code under test sets does not outlive this test.
    monkeypatch.setenv("NUMBA_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_jitcache, "_writable", lambda path: False)
    _jitcache.configure_numba_cache()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "cleanerd" / "numba")
    assert (tmp_path / "cleanerd" / "numba").is_dir()


def test_explicit_numba_cache_dir_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setattr(_jitcache, "_writable", lambda path: False)
    _jitcache.configure_numba_cache()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")


def test_kernels_are_cached_in_numba_cache_dir(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(cache)
    cached = {p.suffix for p in cache.rglob("*") if p.is_file()}
    assert {".nbi", ".nbc"} <= cached
