"""Tests of ``cleanerd/topics/``: the topic settings model."""
