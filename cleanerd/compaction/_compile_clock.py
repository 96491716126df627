"""How much of a run was numba compiling: the first call of each kernel pays for it, once per
cache dir (see ``cleanerd._jitcache``), and it must not be reported as cleaning time.

numba fires a ``numba:compile`` event around each real compilation (never around a load from its
on-disk cache) while it holds its global compiler lock, so compilations never overlap: summing
the outermost events gives the compile time, and counting them the kernels compiled. A process
that runs its kernels from kept copies (``cleanerd._kernel``) never imports numba, so the listener
is installed only once numba is in use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cleanerd._kernel import when_numba

COMPILE_EVENT = "numba:compile"


@dataclass
class CompileClock:
    """What numba compiled while installed (``compile_clock``): seconds, and which kernels."""

    seconds: float = 0.0
    kernels: list[str] = field(default_factory=list)  # outermost compilations, in order
    _depth: int = 0
    _started: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def compiled(self) -> int:
        return len(self.kernels)


def _listener(clock: CompileClock) -> Any:
    """A numba event listener that adds the outermost compilations to ``clock``."""
    from numba.core import event  # noqa: PLC0415 (numba only once it is in use)

    class Listener(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            with clock._lock:
                if clock._depth == 0:
                    clock._started = time.perf_counter()
                    clock.kernels.append(_name(ev))
                clock._depth += 1

        def on_end(self, ev: event.Event) -> None:
            with clock._lock:
                clock._depth -= 1
                if clock._depth == 0:
                    clock.seconds += time.perf_counter() - clock._started

    return Listener()


def _name(ev: Any) -> str:
    data = ev.data or {}
    dispatcher = data.get("dispatcher")
    func = getattr(dispatcher, "py_func", None)
    if func is None:
        return "?"
    args = ", ".join(str(a) for a in data.get("args", ()))
    return f"{func.__module__}.{func.__qualname__}({args})"


@contextmanager
def compile_clock() -> Iterator[CompileClock]:
    """Count numba's compilations in this process (every thread) while the block runs."""
    clock = CompileClock()
    installed: list[Any] = []

    def install() -> None:
        from numba.core import event  # noqa: PLC0415 (numba is in use)

        listener = _listener(clock)
        register: Any = event.register
        register(COMPILE_EVENT, listener)
        installed.append(listener)

    cancel = when_numba(install)
    try:
        yield clock
    finally:
        cancel()
        if installed:
            from numba.core import event  # noqa: PLC0415

            unregister: Any = event.unregister
            unregister(COMPILE_EVENT, installed[0])
