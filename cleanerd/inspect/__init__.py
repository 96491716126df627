"""The logic behind ``cleanerd dump`` and ``cleanerd verify``, free of click and rich.

Everything here only reads: files are mapped read-only and no storage object that repairs on open
(``PartitionLog``) is used, so both commands are safe on a log dir a broker may open later.
"""
