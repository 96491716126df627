"""Errors that cross a process boundary whole: a cleaning's error reaches the daemon from the
worker's process (``service._processes``) pickled, and must still name its file and position."""

from __future__ import annotations

from typing import Any


class PickledWhole:
    """Mixin for an exception whose ``__init__`` takes other arguments than its message.

    Python pickles an exception as ``type(*args)``, which would call such an ``__init__`` with
    the message and lose the attributes; this one is rebuilt from its ``args`` and attributes
    without calling ``__init__``."""

    args: tuple[Any, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, dict(vars(self))))


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    vars(error).update(state)
    return error
