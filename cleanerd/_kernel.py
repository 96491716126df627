"""``kernel``: how every numba kernel is made: ``njit`` with the on-disk cache, loaded light.

A kernel compiles at its first call with a new signature, or loads that signature from numba's
cache dir (``cleanerd._jitcache``; ``cleanerd warmup`` fills it). numba prepares its whole
compiler before it loads a cached kernel: it imports and registers the implementation of every
Python and numpy feature it can compile (90 modules, 0.2-0.3 s on the 2-core dev VM), though a
kernel loaded as machine code needs none of them. That was a third of ``cleanerd verify``'s run.

So a kernel's cache here loads the cached machine code with only what running it needs: numba's
runtime (``NRT``: the reference counts of the arrays a kernel takes or makes). Compiling is
unchanged: numba's compiler prepares itself fully before each compilation, and a signature the
cache lacks is compiled as before. Two things keep a light load sound:

- what the cached code links to is known without the registries: numba's C helpers and math
  functions are put in the symbol table when the target is made, and the runtime here; kernels
  use neither numpy's random nor Python's hash (whose symbols come with their registries) nor
  ``parallel=True`` (threading layer symbols);
- a kernel's cached code carries the code of the kernels it calls (numba links them in), so
  loading one never loads another.

The cache's checks stay numba's own: the index is keyed by signature, CPU and numba version, and
dropped when the kernel's source file changes (size and mtime).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from numba import njit
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher
from numba.core.runtime import nrt

F = TypeVar("F", bound=Callable[..., Any])


class _LightCache(FunctionCache):
    """numba's per-kernel cache, minus the compiler's set-up before a load."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            guard = self._guard_against_spurious_io_errors
            load = self._load_overload
            initialize = nrt.rtsys.initialize
        except AttributeError:  # another numba's internals: its own (full) load, still correct
            return super().load_overload(sig, target_context)  # type: ignore[no-untyped-call]
        initialize(target_context)  # safe to repeat: it runs once
        with guard():
            return load(sig, target_context)  # type: ignore[no-untyped-call]


def kernel(
    *, nogil: bool = False, inline: Literal["never", "always"] = "never"
) -> Callable[[F], Dispatcher[F]]:
    """``numba.njit(cache=True, nogil=nogil, inline=inline)``, whose cache loads light.

    ``nogil``: the kernel lets go of the GIL (worker threads run kernels side by side);
    ``inline="always"``: a helper numba inlines into the kernels that call it."""

    def make(func: F) -> Dispatcher[F]:
        dispatcher = njit(nogil=nogil, inline=inline)(func)
        # what numba's enable_caching() sets, with the light load
        dispatcher._cache = _LightCache(func)  # type: ignore[attr-defined,no-untyped-call]
        return dispatcher

    return make
