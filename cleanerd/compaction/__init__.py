"""The compaction engine: plan, offset map, strategies, transactions, cleaner, swap, stats."""
