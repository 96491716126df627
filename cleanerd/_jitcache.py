"""Where numba keeps compiled kernels, chosen before numba is imported.

Every kernel is ``cache=True``, and numba refuses to even define such a function ("cannot cache
function ... no locator available") when it finds no writable place for the cache: with a
read-only install and an unwritable HOME (``docker run --user``, systemd ``DynamicUser=``)
every command would die at import. So the first writable of these is used, in order:
``NUMBA_CACHE_DIR`` if set; the package's own ``__pycache__`` dirs (numba's default); systemd's
``$CACHE_DIRECTORY`` (``CacheDirectory=``); ``$XDG_CACHE_HOME`` or ``~/.cache``, under
``cleanerd/numba``; then a per-user dir ``cleanerd-numba-<uid>`` in ``$TMPDIR`` (when set),
``/var/tmp`` or ``/tmp``, so that a user with no home of its own (uid 65534, ``HOME=/nonexistent``)
still compiles once and ``cleanerd warmup`` fills the cache its later commands load.

numba loads its cache files with pickle, so whoever can write the cache dir can run code as the
user who loads it. A shared temporary dir is open to every user: there the per-user dir is made
with mode 0700, and one that already exists is used only if it is a real dir (no symlink) owned
by this uid and closed to group and others, in a parent that others cannot rename it out of.
Anything else is refused with a warning naming it, never repaired: it may already hold someone
else's files.

When no dir is usable, a private temporary dir (mode 0700, removed at exit) with one warning
saying why and how to fix it: every run then compiles its kernels again, and ``cleanerd warmup``
refuses to compile into it (:func:`temporary_cache` says why).

Nothing here runs on import: each entry point calls :func:`configure_numba_cache` before it
imports numba (numba reads ``NUMBA_CACHE_DIR`` once, when it is imported), so that a library
import of ``cleanerd`` writes no probe file, prints nothing and registers no exit handler.
Calling it again is harmless: the dir it chose is then ``NUMBA_CACHE_DIR`` and writable.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# after $TMPDIR: /var/tmp is kept across reboots; /tmp is often the one writable dir of a
# read-only container (tests point this at dirs of their own)
SHARED_TMP = (Path("/var/tmp"), Path("/tmp"))


def _can_write_in(path: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


def _writable(path: Path) -> bool:
    """numba's own test of a cache dir: it can be created and a file made in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return _can_write_in(path)


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


def shared_tmp_dirs() -> list[Path]:
    """This user's candidates in the shared temporary dirs, in order: ``$TMPDIR`` first when it
    is set (absolute: a relative one would move with the working dir), then ``SHARED_TMP``."""
    tmpdir = os.environ.get("TMPDIR", "")
    bases = [Path(tmpdir)] if os.path.isabs(tmpdir) else []
    name = f"cleanerd-numba-{os.geteuid()}"
    return [base / name for base in dict.fromkeys([*bases, *SHARED_TMP])]


def _claim(path: Path) -> str | None:
    """Make ``path`` this user's private dir if it is absent; then why it must not be used
    (None: absent, or a dir only this user can change)."""
    with contextlib.suppress(OSError):  # exists, or cannot be made: lstat tells which
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
        parent = os.stat(path.parent)  # following a symlinked /tmp is fine: its target counts
    except OSError:
        return None  # could not be made: not writable, the caller's probe says so
    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != me:
        return f"it is owned by uid {st.st_uid}, not {me}"
    if mode & 0o077:
        return f"its mode {mode:04o} lets group or others in (want 0700)"
    # whoever may rename entries of the parent could swap the dir for theirs after this check
    if parent.st_uid not in (0, me):
        return f"others can replace it: {path.parent} is owned by uid {parent.st_uid}"
    if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
        return f"others can replace it: {path.parent} is writable by them with no sticky bit"
    return None


@dataclass(frozen=True)
class TemporaryCache:
    """The cache dir of a process that found no dir to keep one in, and why."""

    path: str
    why: str


_temporary: TemporaryCache | None = None


def temporary_cache() -> TemporaryCache | None:
    """This process's cache dir when it is removed at exit (None when the cache is kept)."""
    return _temporary


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child that inherited the handler
        shutil.rmtree(path, ignore_errors=True)


def _choose(why: list[str], refused: list[str]) -> Path | None:
    """The first usable candidate after numba's own; each one passed over is added to ``why``,
    or to ``refused`` when it exists and is unsafe."""
    candidates = user_cache_dirs()
    for candidate in candidates:
        if _writable(candidate):
            return candidate
    why += [f"{c} is not writable" for c in candidates] or ["no HOME"]
    for candidate in shared_tmp_dirs():
        if problem := _claim(candidate):
            refused.append(f"refused {candidate}: {problem}")
        elif _can_write_in(candidate):
            return candidate
        else:
            why.append(f"{candidate} is not writable")
    return None


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
    refused: list[str] = []
    chosen = _choose(why, refused)
    if chosen is not None:
        os.environ["NUMBA_CACHE_DIR"] = str(chosen)
        # silent unless a dir was asked for, or one looked planted: then say where kernels go
        notes = why[:1] if explicit else []
        if notes or refused:
            return _warn(f"{'; '.join(notes + refused)}; compiled kernels go to {chosen} instead")
        return None
    global _temporary  # noqa: PLW0603 (one per process, like the environment variable it mirrors)
    private = tempfile.mkdtemp(prefix="cleanerd-numba-")  # mode 0700
    _temporary = TemporaryCache(private, "; ".join(why + refused))
    atexit.register(_remove, private, os.getpid())
    os.environ["NUMBA_CACHE_DIR"] = private
    return _warn(
        f"no writable numba cache dir ({_temporary.why}): kernels are compiled into {private}, "
        "removed at exit, so each run compiles them again. Fix: set NUMBA_CACHE_DIR to a "
        "writable dir and run `cleanerd warmup` once with it."
    )


def _warn(message: str) -> str:
    text = f"cleanerd: warning: {message}"
    print(text, file=sys.stderr)
    return text
