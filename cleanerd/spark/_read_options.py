"""The ``kafka-log`` read options: parsed and checked, and the ``ReadSpec`` every task applies.

Options come as strings (Spark's ``.option(...)``); a bad one stops the query with the
option's name, its value and what it accepts. No pyspark here: the driver checks options
before Spark sees them (``read_log``), and the data source parses them on each query.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cleanerd.format import MAX_DECOMPRESSED_BYTES
from cleanerd.spark._bounds import Bounds
from cleanerd.spark._segment_read import ReadSpec

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
DEFAULT_MAX_SEGMENT_BYTES_PER_TASK = 128 * 1024 * 1024
_SIZE = re.compile(r"(\d+)\s*([kmg]i?b?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
OPTION_NAMES = (
    "path",
    "topics",
    "partitions",
    "isolation",
    "include_values",
    "max_segment_bytes_per_task",
    "max_decompressed_message_bytes",
    "min_tasks",
    "skip_corrupt",
    "starting_offsets",
)


class OptionError(ValueError):
    """A ``kafka-log`` option with a value it does not accept."""


@dataclass(frozen=True)
class ReadOptions:
    """Parsed ``kafka-log`` options."""

    path: str
    topics: tuple[str, ...] = ()
    partitions: frozenset[int] | None = None
    committed: bool = False
    include_values: bool = True
    max_segment_bytes_per_task: int = DEFAULT_MAX_SEGMENT_BYTES_PER_TASK
    max_decompressed_message_bytes: int = MAX_DECOMPRESSED_BYTES
    min_tasks: int = 1
    skip_corrupt: bool = False
    starting_offsets: str = "earliest"

    def bounds(self) -> Bounds:
        """The options' own bounds (pushed filters narrow them further)."""
        b = Bounds(topic_globs=self.topics)
        return b if self.partitions is None else b.with_partitions(self.partitions)

    def spec(self, bounds: Bounds) -> ReadSpec:
        return ReadSpec(
            bounds,
            committed=self.committed,
            values=self.include_values,
            skip_corrupt=self.skip_corrupt,
            max_decompressed_bytes=self.max_decompressed_message_bytes,
        )


def _bool(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={value!r}: expected true or false")


def _partitions(value: str) -> frozenset[int]:
    numbers: set[int] = set()
    for part in (p.strip() for p in value.split(",")):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if m is None:
            raise OptionError(
                f"option partitions={value!r}: expected partition numbers and ranges such as "
                "'0,3,5-7'"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise OptionError(f"option partitions={value!r}: range {part} runs backwards")
        numbers.update(range(lo, hi + 1))
    return frozenset(numbers)


def _size(name: str, value: str) -> int:
    m = _SIZE.fullmatch(value.strip())
    if m is None:
        raise OptionError(
            f"option {name}={value!r}: expected a byte count such as 134217728 or 128m"
        )
    unit = (m.group(2) or "").lower()[:1]
    size = int(m.group(1)) * _UNITS[unit]
    if size < 1:
        raise OptionError(f"option {name}={value!r}: must be at least 1 byte")
    return size


def _count(name: str, value: str) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise OptionError(f"option {name}={value!r}: expected a whole number of at least 1")
    return int(text)


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check and parse the options of a ``kafka-log`` read (keys case-insensitive)."""
    opts = {key.lower(): str(value) for key, value in options.items()}
    unknown = sorted(set(opts) - set(OPTION_NAMES))
    if unknown:
        raise OptionError(
            f"unknown kafka-log option(s) {', '.join(unknown)}; known: {', '.join(OPTION_NAMES)}"
        )
    path = opts.get("path")
    if not path:
        raise OptionError("kafka-log needs a path: spark.read.format('kafka-log').load(LOGDIR)")
    isolation = opts.get("isolation", READ_UNCOMMITTED).strip().lower()
    if isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise OptionError(
            f"option isolation={opts['isolation']!r}: "
            f"expected {READ_UNCOMMITTED} or {READ_COMMITTED}"
        )
    starting = opts.get("starting_offsets", "earliest").strip().lower()
    if starting not in ("earliest", "latest"):
        raise OptionError(f"option starting_offsets={starting!r}: expected earliest or latest")
    topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
    return ReadOptions(
        path=path,
        topics=topics,
        partitions=_partitions(opts["partitions"]) if "partitions" in opts else None,
        committed=isolation == READ_COMMITTED,
        include_values=_bool("include_values", opts.get("include_values", "true")),
        max_segment_bytes_per_task=_size(
            "max_segment_bytes_per_task",
            opts.get("max_segment_bytes_per_task", str(DEFAULT_MAX_SEGMENT_BYTES_PER_TASK)),
        ),
        max_decompressed_message_bytes=_size(
            "max_decompressed_message_bytes",
            opts.get("max_decompressed_message_bytes", str(MAX_DECOMPRESSED_BYTES)),
        ),
        min_tasks=_count("min_tasks", opts.get("min_tasks", "1")),
        skip_corrupt=_bool("skip_corrupt", opts.get("skip_corrupt", "false")),
        starting_offsets=starting,
    )
