"""Tests of ``cleanerd/storage/``: one log dir on disk (segments, indexes, checkpoints, swaps,
locks)."""
