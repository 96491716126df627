"""Tests of ``cleanerd/cli/``: the commands as a user runs them."""
