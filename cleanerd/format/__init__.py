"""Kafka record format v2: batches, records, codecs, control records, numba kernels."""
