"""Tests of ``cleanerd/workload/``: generated logs, the live writer and their oracle."""
