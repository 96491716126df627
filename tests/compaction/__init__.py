"""Tests of ``cleanerd/compaction/``: the cleaning engine and the one-shot ``compact`` driver."""
