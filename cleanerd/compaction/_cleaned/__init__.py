"""Pass 2's output: a group of segments filtered into its ``.cleaned`` segment, and swapped in.

* ``_rebuild``: the batches that lost records, re-encoded with their kept records;
* ``_writer``: ``CleanedSegmentWriter``, what pass 2 keeps of a chunk appended to the
  ``.cleaned`` segment (copied, rebuilt or emptied batches);
* ``_group_writer``: pass 2 over one group (Kafka's ``cleanInto``), shared by ``Cleaner`` and
  Spark's plan B;
* ``_group_swap``: the swap of a cleaned group into the log (Kafka's ``replaceSegments``).

Private to ``cleanerd.compaction``: its modules import these modules directly.
"""
