"""Moved to ``cleanerd.storage.repairs`` (Spark's plans use it too); kept for old imports."""

from __future__ import annotations

from cleanerd.storage.repairs import Fingerprint, Repairs, changed_files, describe, fingerprint

__all__ = ["Fingerprint", "Repairs", "changed_files", "describe", "fingerprint"]
