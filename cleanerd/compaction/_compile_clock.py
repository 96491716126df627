"""How much of a run was numba compiling: the first call of each kernel pays for it, once per
cache dir (see ``cleanerd._jitcache``), and it must not be reported as cleaning time.

numba fires a ``numba:compile`` event around each real compilation (never around a load from its
on-disk cache) while it holds its global compiler lock, so compilations never overlap: summing
the outermost events gives the compile time, and counting them the kernels compiled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from numba.core import event

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


class _Listener(event.Listener):
    def __init__(self, clock: CompileClock) -> None:
        self.clock = clock

    def on_start(self, ev: event.Event) -> None:
        c = self.clock
        with c._lock:
            if c._depth == 0:
                c._started = time.perf_counter()
                c.kernels.append(_name(ev))
            c._depth += 1

    def on_end(self, ev: event.Event) -> None:
        c = self.clock
        with c._lock:
            c._depth -= 1
            if c._depth == 0:
                c.seconds += time.perf_counter() - c._started


def _name(ev: event.Event) -> str:
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
    with event.install_listener(COMPILE_EVENT, _Listener(clock)):
        yield clock
