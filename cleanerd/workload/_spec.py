"""What ``cleanerd gen`` writes: one immutable, validated description of a workload.

The field names are the command-line option names (``abort_ratio`` is ``--abort-ratio``), so a
:class:`WorkloadError` can name the option a user has to fix, and tests and benchmarks can build
the same workload without going through click.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cleanerd._errors import PickledWhole
from cleanerd.format import Compression
from cleanerd.storage import MAX_PARTITION, StorageError, validate_topic_name
from cleanerd.topics import LogConfig

DEFAULT_START_TIMESTAMP = 1_700_000_000_000
"""Fixed, so that two runs with the same seed write the same bytes (the fixtures use it too)."""

KEY_DISTRIBUTIONS = ("uniform", "zipf")
TIMESTAMP_MODES = ("in-order", "shuffled")
MAX_PRODUCERS = 1_000_000
"""Each producer kind owns a block of this many producer ids (see ``producers``)."""


class WorkloadError(PickledWhole, ValueError):
    """An invalid workload setting; ``option`` is the spec field (= the CLI option name)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message

    @property
    def flag(self) -> str:
        """The command-line spelling, e.g. ``--abort-ratio``."""
        return "--" + self.option.replace("_", "-")


@dataclass(frozen=True)
class WorkloadSpec:
    """Every knob of the generator; the defaults make a small demo log in well under a second.

    ``records`` and ``keys`` are per partition. ``segment_bytes`` defaults small (256 KiB) so the
    demo log has several segments: the cleaner never touches the active one.
    """

    topic: str = "demo"
    partitions: int = 1
    records: int = 10_000
    keys: int = 1_000
    key_distribution: str = "uniform"
    zipf_s: float = 1.1
    value_bytes: int = 100
    tombstone_ratio: float = 0.05
    codec: str = "none"
    records_per_batch: int = 100
    headers: int = 0
    version_header: str | None = None
    version_skew: float = 0.1
    timestamps: str = "in-order"
    timestamp_window_ms: int = 10_000
    start_timestamp: int | None = None  # None: DEFAULT_START_TIMESTAMP, or after existing data
    idempotent_producers: int = 0
    transactional_producers: int = 0
    abort_ratio: float = 0.2
    leave_open: bool = False
    segment_bytes: int = 256 * 1024
    index_interval_bytes: int = 4096
    seed: int = 42
    append: bool = False

    def __post_init__(self) -> None:
        self.validate()

    # --- validation ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise WorkloadError for the first bad field (checked in declaration order)."""
        try:
            validate_topic_name(self.topic)
        except StorageError as e:
            raise WorkloadError("topic", str(e)) from None
        _at_least("partitions", self.partitions, 1)
        if self.partitions - 1 > MAX_PARTITION:
            raise WorkloadError("partitions", f"at most {MAX_PARTITION + 1} partitions")
        _at_least("records", self.records, 0)
        _at_least("keys", self.keys, 1)
        _one_of("key_distribution", self.key_distribution, KEY_DISTRIBUTIONS)
        if not self.zipf_s > 0:
            raise WorkloadError("zipf_s", f"must be > 0, got {self.zipf_s}")
        _at_least("value_bytes", self.value_bytes, 0)
        _ratio("tombstone_ratio", self.tombstone_ratio)
        try:
            Compression.from_label(self.codec)
        except ValueError as e:
            raise WorkloadError("codec", str(e)) from None
        _at_least("records_per_batch", self.records_per_batch, 1)
        _at_least("headers", self.headers, 0)
        if self.version_header is not None and not self.version_header:
            raise WorkloadError("version_header", "the header name must not be empty")
        _ratio("version_skew", self.version_skew)
        _one_of("timestamps", self.timestamps, TIMESTAMP_MODES)
        _at_least("timestamp_window_ms", self.timestamp_window_ms, 1)
        if self.start_timestamp is not None:
            _at_least("start_timestamp", self.start_timestamp, 0)
        for name in ("idempotent_producers", "transactional_producers"):
            value = getattr(self, name)
            _at_least(name, value, 0)
            if value > MAX_PRODUCERS:
                raise WorkloadError(name, f"at most {MAX_PRODUCERS}, got {value}")
        _ratio("abort_ratio", self.abort_ratio)
        _at_least("seed", self.seed, 0)
        try:
            self.log_config()
        except ValueError as e:
            name = "segment_bytes" if "segment.bytes" in str(e) else "index_interval_bytes"
            raise WorkloadError(name, str(e)) from None

    # --- derived settings ---------------------------------------------------------------------
    @property
    def compression(self) -> Compression:
        return Compression.from_label(self.codec)

    def log_config(self) -> LogConfig:
        """The storage settings the partitions are written with."""
        return LogConfig(
            segment_bytes=self.segment_bytes,
            index_interval_bytes=self.index_interval_bytes,
            compact=True,
        )

    def params(self) -> dict[str, object]:
        """Every setting as plain JSON values (recorded in summaries and expected files)."""
        return dataclasses.asdict(self)


WARMUP_VERSION_HEADER = "v"
"""The header the warm-up log's records carry a version in (the header strategy reads it)."""


def warmup_spec(codec: str) -> WorkloadSpec:
    """A log small enough to write and clean in a blink, yet with every kind of batch: tombstones,
    headers with a version, idempotent and transactional producers (commits and aborts), several
    segments with index entries. ``cleanerd warmup`` and the daemon's kernel load clean it to
    make numba compile (or load) the kernels a real cleaning calls."""
    return WorkloadSpec(
        topic="warmup",
        records=300,
        keys=40,
        value_bytes=16,
        tombstone_ratio=0.2,
        codec=codec,
        records_per_batch=10,
        headers=1,
        version_header=WARMUP_VERSION_HEADER,
        idempotent_producers=1,
        transactional_producers=2,
        abort_ratio=0.5,
        segment_bytes=4 * 1024,
        index_interval_bytes=256,
    )


def _at_least(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise WorkloadError(name, f"must be at least {minimum}, got {value}")


def _ratio(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise WorkloadError(name, f"must be a ratio in [0, 1], got {value}")


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise WorkloadError(name, f"must be one of {', '.join(choices)}; got {value!r}")
