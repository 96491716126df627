"""A monotonic clock the test moves: ``wait`` advances it instead of sleeping, so pacing is
checked to the exact instant without any real time passing."""

from __future__ import annotations


class FakeClock:
    """``clock()`` reads it; ``wait(s)`` and ``advance(s)`` move it forward."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, seconds: float) -> bool:
        """Stands in for ``Event.wait``: time passes, nobody set the event."""
        self.waits.append(seconds)
        self.now += seconds
        return False
