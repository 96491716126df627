"""How big an offset map a log needs: enough slots for its dirty records at the load factor.

The record count comes from the dirty segments' batch headers (the metadata cache keeps it per
segment), so it is an upper bound on the keys: a small log asks for a small map and leaves the
rest of the shared dedupe budget to the others, a big one may ask for all of it.
"""

from __future__ import annotations

import math

from cleanerd.compaction import slot_bytes
from cleanerd.topics import Strategy, StrategyConfig

MIN_SLOTS = 1024
"""Floor: a map this small costs nothing and spares the tiny-log edge cases (24 KiB at most)."""


def map_bytes_for(
    records: int,
    strategy: StrategyConfig | Strategy,
    load_factor: float,
    budget_bytes: int,
) -> int:
    """Bytes of the offset map for ``records`` keys: ``ceil(records / load_factor) + 1`` slots
    (the + 1 keeps ``slots * load_factor`` at or above ``records`` despite rounding), at least
    ``MIN_SLOTS``, capped at the whole budget."""
    if not 0.0 < load_factor <= 1.0:
        raise ValueError(f"load factor {load_factor} must be in (0, 1]")
    if budget_bytes <= 0:
        raise ValueError(f"budget {budget_bytes} must be positive")
    slots = max(math.ceil(max(records, 0) / load_factor) + 1, MIN_SLOTS)
    return min(slots * slot_bytes(strategy), budget_bytes)
