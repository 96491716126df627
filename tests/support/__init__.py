"""Helpers the tests share: imported as ``from tests.support.<module> import name``, never from a
test module. ``fuzz_support`` and ``fuzz_mutations`` are bench/fuzz_compact.py's too, so they
import nothing of the suite (no pytest, hypothesis or test modules)."""
