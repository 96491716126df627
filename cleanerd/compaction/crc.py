"""Moved to ``cleanerd.format.crc`` (issue 10): this name stays only until
``compaction/batches.py``, being edited elsewhere, takes its CRC check from storage/."""

from cleanerd.format.crc import AVAILABLE, batch_crcs, first_bad_crc

__all__ = ["AVAILABLE", "batch_crcs", "first_bad_crc"]
