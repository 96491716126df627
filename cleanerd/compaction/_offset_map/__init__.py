"""Pass 1 and what it leaves for pass 2: the offset map, the kernels that fill it, the record cache.

* ``_table``: the map's slot table at numba level (layout, hash normalisation, the Robin Hood
  probe, Kafka's full rule), the one probe every kernel that touches a map uses;
* ``_map``: ``OffsetMap``, the bounded map from key hash to winning offset (and version);
* ``_touched``: the bitmap of the slots a build wrote, and the upkeep it makes cheap (clearing
  the map, listing its offsets);
* ``_record_cache``: what pass 1 saw of each record (offset, ``FLAG_*`` flags, among them whether
  it won its key) and of each segment's batches, kept so pass 2 need not read them again;
* ``_fill``: pass 1's kernels for the offset strategy (index, hash, put and cache a chunk in one
  call; flag the cached winners);
* ``_build``: pass 1 itself, Kafka's ``buildOffsetMap`` over the dirty range.

Private to ``cleanerd.compaction``: its modules import these modules directly.
"""
