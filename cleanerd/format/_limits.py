"""Limits shared by every layer, defined once."""

from __future__ import annotations

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
"""Java's Integer.MIN_VALUE and MAX_VALUE: the range of Kafka's int32 fields (partitions,
epochs, sequences, relative offsets and positions in indexes, int settings)."""

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
"""Java's Long.MIN_VALUE and MAX_VALUE: the range of Kafka's int64 fields; LONG_MAX is also
Kafka's "no limit" for offsets, timestamps and lags."""

MAX_DECOMPRESSED_BYTES = 128 << 20
"""cleanerd's default for ``max.decompressed.message.bytes``: the most one batch's records may
take once decompressed. Kafka bounds each record's declared body by this topic setting (its
default, ``Records.SOFT_MAX_ARRAY_LENGTH``, is no bound in practice); cleanerd decompresses a
batch whole, so it bounds the whole batch, which is never looser than Kafka's check. 128 MiB
serves real batches (Kafka's ``max.message.bytes`` is 1 MiB compressed) and refuses bombs."""
