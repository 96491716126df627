"""Limits shared by every layer, defined once."""

from __future__ import annotations

LONG_MAX = 2**63 - 1
"""Java's Long.MAX_VALUE: Kafka's "no limit" for offsets, timestamps and lags."""

MAX_DECOMPRESSED_BYTES = 128 << 20
"""cleanerd's default for ``max.decompressed.message.bytes``: the most one batch's records may
take once decompressed. Kafka bounds each record's declared body by this topic setting (its
default, ``Records.SOFT_MAX_ARRAY_LENGTH``, is no bound in practice); cleanerd decompresses a
batch whole, so it bounds the whole batch, which is never looser than Kafka's check. 128 MiB
serves real batches (Kafka's ``max.message.bytes`` is 1 MiB compressed) and refuses bombs."""
