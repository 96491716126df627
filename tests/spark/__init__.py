"""Tests of ``cleanerd/spark/``: each starts a SparkSession or runs spark-submit (marked
``spark``)."""
