"""Errors raised on bad Kafka-format input; each names where the problem is."""

from __future__ import annotations

from cleanerd._errors import PickledWhole

TRUNCATION_REASONS = ("truncated batch", "batch length field runs past the end")
"""How the reader words a batch cut short by the end of the data (a torn tail)."""


class CorruptRecordError(PickledWhole, ValueError):
    """A batch or record that does not decode; carries file, byte position and last good offset.

    ``position`` is the byte position of the offending batch inside ``path`` (or inside the
    buffer when ``path`` is None); ``last_good_offset`` is the last offset of the last batch that
    decoded cleanly before it (-1 if none).
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        position: int | None = None,
        last_good_offset: int = -1,
    ) -> None:
        self.reason = reason
        self.path = path
        self.position = position
        self.last_good_offset = last_good_offset
        super().__init__(self._message())

    @property
    def is_truncation(self) -> bool:
        """The data ends inside a batch: at the end of an active segment, a writer's torn or
        in-flight append rather than damage."""
        return self.reason.startswith(TRUNCATION_REASONS)

    def _message(self) -> str:
        where = self.path or "<buffer>"
        if self.position is not None:
            where += f" at byte {self.position}"
        tail = f" (last good offset {self.last_good_offset})" if self.last_good_offset >= 0 else ""
        return f"{where}: {self.reason}{tail}"

    def located(self, path: str, base_position: int = 0) -> CorruptRecordError:
        """The same error placed in a file, with positions shifted by ``base_position``."""
        pos = None if self.position is None else self.position + base_position
        return CorruptRecordError(
            self.reason, path=path, position=pos, last_good_offset=self.last_good_offset
        )
