"""Spark's pushed filters to :class:`Bounds`: topic, partition, offset and timestamp ranges.

A filter is accepted only when the read applies it exactly (Spark does not check it again);
everything else goes back to Spark unchanged, by reference, as the API requires.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from cleanerd.format import LONG_MAX, LONG_MIN
from cleanerd.spark._bounds import Bounds, to_micros

_RANGES = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_NEVER_NULL = ("topic", "partition", "offset")


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _range(f: Filter, value: int) -> tuple[int, int]:
    """Inclusive (lo, hi) of an integer comparison."""
    if isinstance(f, EqualTo):
        return value, value
    if isinstance(f, GreaterThan):
        return value + 1, LONG_MAX
    if isinstance(f, GreaterThanOrEqual):
        return value, LONG_MAX
    if isinstance(f, LessThan):
        return LONG_MIN, value - 1
    return LONG_MIN, value


def apply_filter(bounds: Bounds, f: Filter) -> Bounds | None:
    """``bounds`` narrowed by ``f``, or None when ``f`` is not one the read applies exactly."""
    attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if len(attr) != 1:
        return None
    column = attr[0]
    if isinstance(f, IsNotNull):
        if column in _NEVER_NULL:
            return bounds
        return bounds.only_timestamped() if column == "timestamp" else None
    value = getattr(f, "value", None)
    if column == "topic":
        if isinstance(f, EqualTo) and isinstance(value, str):
            return bounds.with_topics(frozenset([value]))
        if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            return bounds.with_topics(frozenset(f.value))
        return None
    if column == "partition":
        if isinstance(f, In) and all(_int(v) is not None for v in f.value):
            return bounds.with_partitions(frozenset(f.value))
        number = _int(value)
        if isinstance(f, _RANGES) and number is not None:
            return bounds.with_partition_range(*_range(f, number))
        return None
    if column == "offset":
        number = _int(value)
        if isinstance(f, _RANGES) and number is not None:
            return bounds.with_offset_range(*_range(f, number))
        return None
    if column == "timestamp" and isinstance(f, _RANGES):
        try:
            micros = to_micros(value)
        except TypeError:
            return None
        lo, hi = _range(f, micros)
        return bounds.with_micros_range(
            None if lo == LONG_MIN else lo, None if hi == LONG_MAX else hi
        )
    return None


def push(bounds: Bounds, filters: Iterable[Filter]) -> tuple[Bounds, list[Filter]]:
    """Apply every filter the read can; return the new bounds and the filters left to Spark."""
    rejected: list[Filter] = []
    for f in filters:
        narrowed = apply_filter(bounds, f)
        if narrowed is None:
            rejected.append(f)
        else:
            bounds = narrowed
    return bounds, rejected
