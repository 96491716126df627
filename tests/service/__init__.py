"""Tests of ``cleanerd/service/``: the daemon's parts, mostly in process (``tests/e2e/`` runs it
whole)."""
