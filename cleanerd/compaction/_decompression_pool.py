"""How many threads help the cleanings with pass 1's decompression, and their pool.

A ``Cleaner`` given a pool decompresses and indexes pieces of each chunk of a compressed log in
a pool thread beside its own (``_offset_map._build._Pieces``). One thread helps when a core is
left beside the cleanings that run at once, none otherwise: a third thread on two busy cores
only takes turns with them, and hands chunks back and forth for nothing. The daemon shares one
pool among its ``log.cleaner.threads`` cleanings; ``cleanerd compact`` has one for its one
cleaning at a time.
"""

from __future__ import annotations

import concurrent.futures
import os


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the platform has one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def decompression_threads(cleanings: int, cores: int | None = None) -> int:
    """Threads of the decompression pool for ``cleanings`` at once on ``cores`` (default:
    ``usable_cores``): one when a core is left beside the cleanings, none otherwise."""
    if cores is None:
        cores = usable_cores()
    return 1 if (cores or 1) > max(cleanings, 1) else 0


def decompression_pool(cleanings: int) -> concurrent.futures.ThreadPoolExecutor | None:
    """The pool ``cleanings`` cleaners at once share for pass 1's decompression, or None (no
    core left beside them). The caller shuts it down."""
    threads = decompression_threads(cleanings)
    if threads < 1:
        return None
    return concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="cleanerd-decompress")
