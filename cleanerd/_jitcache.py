"""Where numba keeps compiled kernels, chosen before numba is imported.

numba caches next to the source (``__pycache__``). From a read-only install (a system
package, a container image) that fails, so we point ``NUMBA_CACHE_DIR`` at a per-user
cache dir. An explicit ``NUMBA_CACHE_DIR`` always wins.
"""

from __future__ import annotations

import os
from pathlib import Path


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def configure_numba_cache() -> None:
    """Set ``NUMBA_CACHE_DIR`` when the package directory is not writable."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    package_dir = Path(__file__).resolve().parent
    if _writable(package_dir):
        return
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    cache = Path(base) / "cleanerd" / "numba"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ["NUMBA_CACHE_DIR"] = str(cache)
