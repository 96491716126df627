"""Tests of ``cleanerd/snapshot/``: KIP-630 snapshots."""
