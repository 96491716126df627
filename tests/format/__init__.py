"""Tests of ``cleanerd/format/``: record format v2, codecs, CRCs and the numba kernels."""
