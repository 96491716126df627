"""Where numba keeps compiled kernels, chosen before numba is imported.

Every kernel is ``cache=True``, and numba refuses to even define such a function ("cannot cache
function ... no locator available") when it finds no writable place for the cache: with a
read-only install and an unwritable HOME (``docker run --user``, systemd ``DynamicUser=``)
every command would die at import. So the first writable of these is used, in order:
``NUMBA_CACHE_DIR`` if set; the package's own ``__pycache__`` dirs (numba's default); systemd's
``$CACHE_DIRECTORY`` (``CacheDirectory=``); ``$XDG_CACHE_HOME`` or ``~/.cache``, under
``cleanerd/numba``. When none is, a private temporary dir (mode 0700, removed at exit) with one
warning saying why and how to fix it: every run then compiles its kernels again.

Nothing here runs on import: each entry point calls :func:`configure_numba_cache` before it
imports numba (numba reads ``NUMBA_CACHE_DIR`` once, when it is imported), so that a library
import of ``cleanerd`` writes no probe file, prints nothing and registers no exit handler.
Calling it again is harmless: the dir it chose is then ``NUMBA_CACHE_DIR`` and writable.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _writable(path: Path) -> bool:
    """numba's own test of a cache dir: it can be created and a file made in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


def _package_writable() -> bool:
    """numba's default puts each kernel's cache in ``__pycache__`` next to its source: every
    subpackage may hold kernels (format, compaction, spark, ...)."""
    for package in (p for p in _PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        pycache = package / "__pycache__"
        usable = _writable(pycache) if pycache.exists() else os.access(pycache.parent, os.W_OK)
        if not usable:
            return False
    return True


def user_cache_dirs() -> list[Path]:
    """The per-service and per-user candidates, in order."""
    dirs = []
    if service := os.environ.get("CACHE_DIRECTORY"):  # systemd: the first of a list
        dirs.append(Path(service.split(":")[0]) / "numba")
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME and no passwd entry (docker run --user N)
            base = None
    if base:
        dirs.append(Path(base) / "cleanerd" / "numba")
    return dirs


_private: str | None = None


def private_dir() -> str | None:
    """The temporary cache dir of this process when no other was writable (else None)."""
    return _private


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that inherited the handler
        shutil.rmtree(path, ignore_errors=True)


def configure_numba_cache() -> str | None:
    """Set ``NUMBA_CACHE_DIR`` unless numba's own choice works; returns the warning printed
    (None when none was needed)."""
    explicit = os.environ.get("NUMBA_CACHE_DIR")
    if explicit:
        if _writable(Path(explicit)):
            return None
        why = [f"NUMBA_CACHE_DIR={explicit} is not writable"]
    else:
        if _package_writable():
            return None
        why = [f"{_PACKAGE} is read-only"]
    candidates = user_cache_dirs()
    for candidate in candidates:
        if _writable(candidate):
            os.environ["NUMBA_CACHE_DIR"] = str(candidate)
            if explicit:
                return _warn(f"{why[0]}; compiled kernels go to {candidate} instead")
            return None
    why += [f"{c} is not writable" for c in candidates] or ["no HOME"]
    global _private  # noqa: PLW0603 (one per process, like the environment variable it mirrors)
    private = _private = tempfile.mkdtemp(prefix="cleanerd-numba-")  # mode 0700
    atexit.register(_remove, private, os.getpid())
    os.environ["NUMBA_CACHE_DIR"] = private
    return _warn(
        f"no writable numba cache dir ({'; '.join(why)}): kernels are compiled into {private}, "
        "removed at exit, so each run compiles them again. Fix: set NUMBA_CACHE_DIR to a "
        "writable dir and run `cleanerd warmup` once with it."
    )


def _warn(message: str) -> str:
    text = f"cleanerd: warning: {message}"
    print(text, file=sys.stderr)
    return text
