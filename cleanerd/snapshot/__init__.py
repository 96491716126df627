"""Snapshots (KIP-630) of a compacted partition's state: files, writing, validating, loading.

Synchronous, below service/: the daemon and the CLI drive it. See docs/architecture.md.
"""
