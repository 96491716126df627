"""Tests of ``cleanerd/config/``: the daemon's configuration, its sources, and the examples in
``config/``."""
