"""Limits shared by every layer, defined once."""

from __future__ import annotations

LONG_MAX = 2**63 - 1
"""Java's Long.MAX_VALUE: Kafka's "no limit" for offsets, timestamps and lags."""
