"""A decoded record, for builders, tests and the CLI (hot paths use the kernels' matrices)."""

from __future__ import annotations

from dataclasses import dataclass

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record: absolute offset and timestamp, nullable key and value, ordered headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

    @property
    def is_tombstone(self) -> bool:
        return self.value is None
