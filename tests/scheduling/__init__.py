"""Tests of ``cleanerd/scheduling/``: the cleaner manager and its metadata cache."""
